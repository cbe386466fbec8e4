package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

// The tool kit over MCP, driven with the official Go SDK's client against
// a real daemon: streamable HTTP at /mcp, and stdio through `agentbox mcp`.

const (
	mcpAliceKey = "key-alice-mcp"
	mcpBobKey   = "key-bob-mcp"
)

// kitTools are the tools every session-mode MCP endpoint offers.
var kitTools = []string{
	"browser_open", "env_get", "env_set", "file_delete", "file_edit", "file_list", "file_read", "file_search", "file_write",
	"git_clone", "git_commit", "git_diff", "git_init", "git_log", "git_push", "git_status",
	"http_request", "npm_install", "pip_install", "preview_url", "process_kill", "process_list",
	"run_code", "sandbox_create", "sandbox_kill", "sandbox_list", "screenshot", "shell_exec", "shell_interactive",
}

// bearer adds an API key to every request.
type bearer struct {
	key  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// mcpHTTP opens an MCP session on the daemon's /mcp (or another path).
func mcpHTTP(t *testing.T, d *daemon, key, path string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	hc := &http.Client{Transport: bearer{key: key, base: http.DefaultTransport}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + path, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", path, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpStdio starts `agentbox mcp` against the daemon and opens its session.
func mcpStdio(t *testing.T, d *daemon, key string) *mcp.ClientSession {
	t.Helper()
	bin, _ := binaries(t)
	cmd := exec.Command(bin, "mcp")
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatalf("start agentbox mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("agentbox mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// callTool calls a tool and returns the result and its joined text.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return res, strings.Join(texts, "\n")
}

// mustTool calls a tool that must succeed.
func mustTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, text := callTool(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", name, args, text)
	}
	return text
}

// failTool calls a tool that must fail with a tool error whose text
// matches want.
func failTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) string {
	t.Helper()
	res, text := callTool(t, cs, name, args)
	if !res.IsError {
		t.Fatalf("%s(%v) succeeded, want an error matching %q: %s", name, args, want, text)
	}
	if !regexp.MustCompile(want).MatchString(text) {
		t.Fatalf("%s(%v) error %q does not match %q", name, args, text, want)
	}
	return text
}

var sandboxIDRe = regexp.MustCompile(`(?m)^(\S+)\s+template=.*\(this session's default\)`)

// sessionSandbox returns the session's default sandbox id.
func sessionSandbox(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	text := mustTool(t, cs, "sandbox_list", nil)
	m := sandboxIDRe.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no default sandbox in sandbox_list: %s", text)
	}
	return m[1]
}

// checkToolList lists the tools and checks every schema is a valid JSON
// Schema of an object.
func checkToolList(t *testing.T, cs *mcp.ClientSession, want []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 && slices.Contains(kitTools, tool.Name) {
			t.Errorf("tool %s: description too thin for a model: %q", tool.Name, tool.Description)
		}
		raw, _ := json.Marshal(tool.InputSchema)
		var s jsonschema.Schema
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Errorf("tool %s: schema does not decode: %v", tool.Name, err)
			continue
		}
		if _, err := s.Resolve(nil); err != nil {
			t.Errorf("tool %s: invalid JSON Schema: %v", tool.Name, err)
		}
		if s.Type != "object" {
			t.Errorf("tool %s: schema type %q, want object", tool.Name, s.Type)
		}
	}
	sort.Strings(names)
	want = slices.Sorted(slices.Values(want))
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("tools = %v\nwant %v", names, want)
	}
}

// exerciseKit runs the kit's behaviours through one MCP session.
func exerciseKit(t *testing.T, cs *mcp.ClientSession, previewBase string) {
	checkToolList(t, cs, kitTools)

	// Code keeps its state across calls.
	mustTool(t, cs, "run_code", map[string]any{"code": "x = 41"})
	if got := mustTool(t, cs, "run_code", map[string]any{"code": "x + 1"}); !strings.Contains(got, "42") {
		t.Errorf("run_code x + 1 = %q, want 42", got)
	}
	failTool(t, cs, "run_code", map[string]any{"code": "1/0"}, `ZeroDivisionError`)

	// An image result comes back as PNG image content.
	res, text := callTool(t, cs, "run_code", map[string]any{"code": "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"})
	if res.IsError {
		t.Fatalf("matplotlib: %s", text)
	}
	gotPNG := false
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok && ic.MIMEType == "image/png" && bytes.HasPrefix(ic.Data, []byte("\x89PNG")) {
			gotPNG = true
		}
	}
	if !gotPNG {
		t.Errorf("matplotlib figure: no PNG image content in %s", text)
	}

	// Other interpreters; a saved figure read back as an image.
	if got := mustTool(t, cs, "run_code", map[string]any{"code": "const a = 40; a + 2", "language": "javascript"}); !strings.Contains(got, "42") {
		t.Errorf("javascript: %q", got)
	}
	if got := mustTool(t, cs, "run_code", map[string]any{"code": "echo $((6 * 7))", "language": "bash"}); !strings.Contains(got, "42") {
		t.Errorf("bash: %q", got)
	}
	mustTool(t, cs, "run_code", map[string]any{"code": "plt.savefig('/workspace/plot.png')"})
	res, _ = callTool(t, cs, "file_read", map[string]any{"path": "plot.png"})
	if res.IsError || len(res.Content) != 2 || res.Content[1].(*mcp.ImageContent).MIMEType != "image/png" {
		t.Errorf("file_read of a PNG: %+v", res.Content)
	}

	// Write, edit, read.
	mustTool(t, cs, "file_write", map[string]any{"path": "notes/a.txt", "content": "alpha\nbeta\ngamma\n"})
	mustTool(t, cs, "file_edit", map[string]any{"path": "notes/a.txt", "old_string": "beta", "new_string": "BETA"})
	if got := mustTool(t, cs, "file_read", map[string]any{"path": "/workspace/notes/a.txt"}); got != "alpha\nBETA\ngamma\n" {
		t.Errorf("file_read after edit = %q", got)
	}
	failTool(t, cs, "file_edit", map[string]any{"path": "notes/a.txt", "old_string": "delta", "new_string": "x"}, `not found`)
	mustTool(t, cs, "file_write", map[string]any{"path": "notes/b.txt", "content": "x x x\n"})
	failTool(t, cs, "file_edit", map[string]any{"path": "notes/b.txt", "old_string": "x", "new_string": "y"}, `occurs 3 times`)
	mustTool(t, cs, "file_edit", map[string]any{"path": "notes/b.txt", "old_string": "x", "new_string": "y", "replace_all": true})
	if got := mustTool(t, cs, "file_read", map[string]any{"path": "notes/b.txt"}); got != "y y y\n" {
		t.Errorf("replace_all: %q", got)
	}
	if got := mustTool(t, cs, "file_search", map[string]any{"pattern": "BETA"}); !strings.Contains(got, "/workspace/notes/a.txt:2:BETA") {
		t.Errorf("file_search: %q", got)
	}
	if got := mustTool(t, cs, "file_search", map[string]any{"name": "b.*"}); !strings.Contains(got, "/workspace/notes/b.txt") {
		t.Errorf("file_search by name: %q", got)
	}
	if got := mustTool(t, cs, "file_list", map[string]any{"path": "notes"}); !strings.Contains(got, "/workspace/notes/a.txt") {
		t.Errorf("file_list: %q", got)
	}
	// Pages of a long file.
	mustTool(t, cs, "shell_exec", map[string]any{"command": "seq 1 5000 > long.txt"})
	if got := mustTool(t, cs, "file_read", map[string]any{"path": "long.txt", "offset": 10, "limit": 3}); !strings.HasPrefix(got, "10\n11\n12\n") || !strings.Contains(got, "offset=13") {
		t.Errorf("file_read page: %q", got)
	}
	// Binary refused with a hint.
	mustTool(t, cs, "shell_exec", map[string]any{"command": "head -c 4096 /dev/urandom > blob.bin; printf 'a\\0b' >> blob.bin"})
	failTool(t, cs, "file_read", map[string]any{"path": "blob.bin"}, `binary file`)

	// Paths outside the workspace are refused, links out of it too.
	failTool(t, cs, "file_read", map[string]any{"path": "/etc/passwd"}, `outside the workspace`)
	failTool(t, cs, "file_read", map[string]any{"path": "../etc/passwd"}, `outside the workspace`)
	mustTool(t, cs, "shell_exec", map[string]any{"command": "ln -sfn /etc /workspace/etclink"})
	failTool(t, cs, "file_read", map[string]any{"path": "etclink/passwd"}, `leads out of the workspace`)
	failTool(t, cs, "file_write", map[string]any{"path": "etclink/x", "content": "x"}, `leads out of the workspace`)
	mustTool(t, cs, "file_delete", map[string]any{"path": "etclink"}) // the link itself
	failTool(t, cs, "file_delete", map[string]any{"path": "notes"}, `recursive=true`)

	// git: init, commit, diff, log.
	mustTool(t, cs, "git_init", map[string]any{"path": "repo"})
	mustTool(t, cs, "file_write", map[string]any{"path": "repo/main.py", "content": "print('old')\n"})
	if got := mustTool(t, cs, "git_commit", map[string]any{"path": "repo", "message": "first"}); !strings.Contains(got, "first") {
		t.Errorf("git_commit: %q", got)
	}
	mustTool(t, cs, "file_edit", map[string]any{"path": "repo/main.py", "old_string": "old", "new_string": "new"})
	if got := mustTool(t, cs, "git_status", map[string]any{"path": "repo"}); !strings.Contains(got, "M main.py") {
		t.Errorf("git_status: %q", got)
	}
	if got := mustTool(t, cs, "git_diff", map[string]any{"path": "repo"}); !strings.Contains(got, "-print('old')") || !strings.Contains(got, "+print('new')") {
		t.Errorf("git_diff: %q", got)
	}
	mustTool(t, cs, "git_commit", map[string]any{"path": "repo", "message": "second"})
	log := mustTool(t, cs, "git_log", map[string]any{"path": "repo"})
	if !strings.Contains(log, "second") || !strings.Contains(log, "first") || strings.Count(log, "\n") != 1 {
		t.Errorf("git_log: %q", log)
	}
	failTool(t, cs, "git_commit", map[string]any{"path": "repo", "message": "empty"}, `nothing to commit`)
	// Clone and push, with local repositories (no network needed).
	if got := mustTool(t, cs, "git_clone", map[string]any{"url": "/workspace/repo", "path": "clone"}); !strings.Contains(got, "second") {
		t.Errorf("git_clone: %q", got)
	}
	mustTool(t, cs, "shell_exec", map[string]any{"command": "git init -q --bare /workspace/remote.git"})
	mustTool(t, cs, "file_write", map[string]any{"path": "clone/more.txt", "content": "more\n"})
	mustTool(t, cs, "git_commit", map[string]any{"path": "clone", "message": "third", "files": []string{"more.txt"}, "author": "Ada <ada@example.com>"})
	mustTool(t, cs, "git_push", map[string]any{"path": "clone", "remote": "/workspace/remote.git", "branch": "main"})
	if got := mustTool(t, cs, "shell_exec", map[string]any{"command": "git --git-dir=/workspace/remote.git log --format='%an %s' -1 main"}); got != "Ada third\n" {
		t.Errorf("pushed commit: %q", got)
	}

	// A failing command, a huge output.
	failTool(t, cs, "shell_exec", map[string]any{"command": "echo oops >&2; exit 3"}, `(?s)oops.*exit code 3`)
	huge := mustTool(t, cs, "shell_exec", map[string]any{"command": "seq 1 300000"})
	if !strings.Contains(huge, "output truncated") || !strings.Contains(huge, "file_read") || len(huge) > 64<<10 ||
		!strings.HasPrefix(huge, "1\n2\n") || !strings.Contains(huge, "300000") {
		t.Errorf("huge output: %d bytes, head %q", len(huge), huge[:min(len(huge), 200)])
	}

	// Variables persist for later commands and code.
	mustTool(t, cs, "env_set", map[string]any{"vars": map[string]any{"GREETING": "hello 'world'"}})
	if got := mustTool(t, cs, "shell_exec", map[string]any{"command": "echo \"$GREETING\""}); got != "hello 'world'\n" {
		t.Errorf("env in shell: %q", got)
	}
	if got := mustTool(t, cs, "run_code", map[string]any{"code": "import os; print(os.environ['GREETING'])"}); !strings.Contains(got, "hello 'world'") {
		t.Errorf("env in code: %q", got)
	}
	if got := mustTool(t, cs, "env_get", nil); !strings.Contains(got, "GREETING=hello 'world'") {
		t.Errorf("env_get: %q", got)
	}

	// Background process, process list and kill.
	bg := mustTool(t, cs, "shell_exec", map[string]any{"command": "sleep 300", "background": true})
	pid := regexp.MustCompile(`pid (\d+)`).FindStringSubmatch(bg)
	if pid == nil {
		t.Fatalf("background: %q", bg)
	}
	if got := mustTool(t, cs, "process_list", nil); !strings.Contains(got, "sleep 300") {
		t.Errorf("process_list: %q", got)
	}
	mustTool(t, cs, "process_kill", map[string]any{"pid": json.Number(pid[1])})

	// A persistent terminal.
	start := mustTool(t, cs, "shell_interactive", map[string]any{"action": "start"})
	term := regexp.MustCompile(`terminal (t\d+)`).FindStringSubmatch(start)
	if term == nil {
		t.Fatalf("terminal start: %q", start)
	}
	mustTool(t, cs, "shell_interactive", map[string]any{"action": "send", "terminal": term[1], "input": "export ZED=42"})
	if got := mustTool(t, cs, "shell_interactive", map[string]any{"action": "send", "terminal": term[1], "input": "echo zed=$ZED"}); !strings.Contains(got, "zed=42") {
		t.Errorf("terminal keeps its shell: %q", got)
	}
	mustTool(t, cs, "shell_interactive", map[string]any{"action": "close", "terminal": term[1]})

	// Named code contexts have their own state.
	mustTool(t, cs, "run_code", map[string]any{"code": "z = 'ctx-a'", "context": "a"})
	failTool(t, cs, "run_code", map[string]any{"code": "z", "context": "b"}, `NameError`)
	if got := mustTool(t, cs, "run_code", map[string]any{"code": "z", "context": "a"}); !strings.Contains(got, "ctx-a") {
		t.Errorf("named context: %q", got)
	}

	// HTTP from inside the sandbox to a server there, and its preview URL.
	mustTool(t, cs, "shell_exec", map[string]any{"command": "python3 -m http.server 8765 --bind 127.0.0.1", "background": true})
	mustTool(t, cs, "shell_exec", map[string]any{"command": "for i in $(seq 100); do curl -s -o /dev/null 127.0.0.1:8765 && exit 0; sleep 0.1; done; exit 1"})
	if got := mustTool(t, cs, "http_request", map[string]any{"url": "http://127.0.0.1:8765/notes/a.txt"}); !strings.Contains(got, "200") || !strings.Contains(got, "BETA") {
		t.Errorf("http_request: %q", got)
	}
	failTool(t, cs, "http_request", map[string]any{"url": "http://127.0.0.1:1/"}, `request failed`)
	failTool(t, cs, "http_request", map[string]any{"url": "file:///etc/passwd"}, `http://`)
	prev := mustTool(t, cs, "preview_url", map[string]any{"port": 8765})
	purl := regexp.MustCompile(`https?://\S+`).FindString(prev)
	// The URL names the daemon as the caller reached it (its port), and
	// serves the sandbox's server.
	port := previewBase[strings.LastIndex(previewBase, ":"):]
	if u, err := neturl.Parse(purl); err != nil || !strings.HasSuffix(u.Host, port) {
		t.Errorf("preview_url %q is not on the daemon's port %s", purl, port)
	} else if body := fetchVia(t, previewBase, purl); !strings.Contains(body, "Directory listing") {
		t.Errorf("preview URL serves %q", body)
	}

	// npm from a local package (no registry needed).
	mustTool(t, cs, "file_write", map[string]any{"path": "mylib/package.json", "content": `{"name": "mylib", "version": "1.0.0"}`})
	mustTool(t, cs, "npm_install", map[string]any{"packages": []string{"../mylib"}, "path": "app-js"})
	if got := mustTool(t, cs, "file_read", map[string]any{"path": "app-js/node_modules/mylib/package.json"}); !strings.Contains(got, "mylib") {
		t.Errorf("npm_install: %q", got)
	}
	failTool(t, cs, "pip_install", map[string]any{"packages": []string{"--index-url=http://evil"}}, `not options`)

	// Bad arguments are tool errors naming the problem.
	failTool(t, cs, "file_read", map[string]any{}, `invalid arguments.*path`)
	failTool(t, cs, "shell_exec", map[string]any{"command": "true", "bogus": 1}, `invalid arguments`)
}

func TestMCPHTTP(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice,"+mcpBobKey+":bob")
	sdk := d.sdk(t, mcpAliceKey)
	cs := mcpHTTP(t, d, mcpAliceKey, "/mcp")
	exerciseKit(t, cs, d.url)

	// A large file travels in one message and is read back in pages.
	big := strings.Repeat("0123456789\n", 500000)
	mustTool(t, cs, "file_write", map[string]any{"path": "big.txt", "content": big})
	page := mustTool(t, cs, "file_read", map[string]any{"path": "big.txt"})
	if !strings.HasSuffix(page, "[lines 1-2000 of 500000; call file_read with offset=2001 to read on]") {
		t.Errorf("first page of a large file ends %q", page[max(0, len(page)-120):])
	}

	// Two sessions never see each other's sandbox: same user, and
	// another user.
	a := sessionSandbox(t, cs)
	cs2 := mcpHTTP(t, d, mcpAliceKey, "/mcp")
	mustTool(t, cs2, "file_write", map[string]any{"path": "mine.txt", "content": "2"})
	b := sessionSandbox(t, cs2)
	if a == b {
		t.Fatalf("two sessions share sandbox %s", a)
	}
	if got := mustTool(t, cs2, "sandbox_list", nil); strings.Contains(got, a) {
		t.Errorf("session 2 lists session 1's sandbox: %s", got)
	}
	failTool(t, cs2, "file_read", map[string]any{"path": "notes/a.txt"}, `does not exist`)
	bob := mcpHTTP(t, d, mcpBobKey, "/mcp")
	failTool(t, bob, "file_read", map[string]any{"path": "notes/a.txt", "sandbox_id": a}, `not found`)
	if got := mustTool(t, bob, "sandbox_list", map[string]any{"all": true}); strings.Contains(got, a) || strings.Contains(got, b) {
		t.Errorf("bob sees alice's sandboxes: %s", got)
	}

	// sandbox_create makes the session's default; sandbox_kill of the
	// default leads to a fresh one.
	created := mustTool(t, cs2, "sandbox_create", map[string]any{"timeout": 600, "network": "none"})
	x := regexp.MustCompile(`Created sandbox (\S+)`).FindStringSubmatch(created)
	if x == nil {
		t.Fatalf("sandbox_create: %q", created)
	}
	if def := sessionSandbox(t, cs2); def != x[1] {
		t.Errorf("default after sandbox_create = %s, want %s", def, x[1])
	}
	if got := mustTool(t, cs2, "sandbox_list", nil); !strings.Contains(got, b) || !strings.Contains(got, x[1]) {
		t.Errorf("sandbox_list: %q", got)
	}
	failTool(t, cs2, "file_read", map[string]any{"path": "mine.txt"}, `does not exist`)
	if got := mustTool(t, cs2, "file_read", map[string]any{"path": "mine.txt", "sandbox_id": b}); got != "2" {
		t.Errorf("explicit sandbox_id: %q", got)
	}
	mustTool(t, cs2, "sandbox_kill", map[string]any{"sandbox_id": x[1]})
	waitSandboxGone(t, sdk, x[1])
	mustTool(t, cs2, "shell_exec", map[string]any{"command": "true"})
	if def := sessionSandbox(t, cs2); def == x[1] || def == b {
		t.Errorf("default after killing it = %s", def)
	}

	// Session end destroys its sandbox.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	waitSandboxGone(t, sdk, a)
	if _, err := sdk.Get(context.Background(), b); err != nil {
		t.Errorf("session 2's sandbox went with session 1: %v", err)
	}
}

func TestMCPStdio(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice")
	sdk := d.sdk(t, mcpAliceKey)
	cs := mcpStdio(t, d, mcpAliceKey)
	exerciseKit(t, cs, d.url)
	id := sessionSandbox(t, cs)
	cs2 := mcpStdio(t, d, mcpAliceKey)
	mustTool(t, cs2, "shell_exec", map[string]any{"command": "true"})
	if id2 := sessionSandbox(t, cs2); id2 == id {
		t.Fatalf("two stdio sessions share sandbox %s", id)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	waitSandboxGone(t, sdk, id)
}

// waitSandboxGone waits (bounded) until sandbox id no longer exists.
func waitSandboxGone(t *testing.T, sdk *client.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := sdk.Get(context.Background(), id)
		if client.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still exists a minute after its session ended (err %v)", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMCPSessionIdleTimeout: an MCP session idle for MCP_SESSION_TIMEOUT
// ends, and its sandbox is destroyed, without the client closing it.
func TestMCPSessionIdleTimeout(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice", "MCP_SESSION_TIMEOUT=3")
	cs := mcpHTTP(t, d, mcpAliceKey, "/mcp")
	// A sandbox with a life far longer than the session's idle timeout:
	// only the session's end can destroy it within the wait below.
	mustTool(t, cs, "sandbox_create", map[string]any{"timeout": 600})
	id := sessionSandbox(t, cs)
	waitSandboxGone(t, d.sdk(t, mcpAliceKey), id)
	// The session is gone too: calls on it are refused.
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_list", Arguments: map[string]any{}})
		cancel()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls on an expired session still succeed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fetchVia GETs url (following redirects, keeping cookies) with every
// connection made to the daemon at base, whatever the URL's host name.
func fetchVia(t *testing.T, base, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := strings.TrimPrefix(base, "http://")
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

// TestMCPBrowserGuard: a web page cannot drive /mcp on a keyless daemon
// (foreign Host, foreign or preview Origin, a form POST).
func TestMCPBrowserGuard(t *testing.T) {
	d := startDaemon(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	accept := "application/json, text/event-stream"
	for _, c := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"same origin", []string{"Accept", accept}, 200},
		{"foreign origin", []string{"Accept", accept, "Origin", "http://evil.example"}, 403},
		{"null origin", []string{"Accept", accept, "Origin", "null"}, 403},
		{"rebound host", []string{"Accept", accept, "Host", "evil.example"}, 403},
		{"form post", []string{"Accept", accept, "Content-Type", "text/plain"}, 400},
	} {
		code, body := d.call(t, "POST", "/mcp", "", init, c.hdr...)
		if code != c.want {
			t.Errorf("%s: %d, want %d: %s", c.name, code, c.want, body)
		}
	}
}
