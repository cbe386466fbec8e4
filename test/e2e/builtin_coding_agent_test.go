package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// codingAgentVersions are the agents' versions pinned by
// templates/coding-agent/app/package.json, by command.
func codingAgentVersions(t *testing.T) map[string]string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "templates", "coding-agent", "app", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		t.Fatalf("templates/coding-agent/app/package.json: %v", err)
	}
	byCmd := map[string]string{
		"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex",
		"gemini": "@google/gemini-cli", "opencode": "opencode-ai",
	}
	out := map[string]string{}
	for cmd, name := range byCmd {
		if out[cmd] = pkg.Dependencies[name]; out[cmd] == "" {
			t.Fatalf("templates/coding-agent/app/package.json does not pin %s", name)
		}
	}
	return out
}

// fakeAnthropic is a strict stand-in for Anthropic's Messages API, just
// enough for one headless Claude Code task: asked with the Read and Edit
// tools, it answers (streamed as server-sent events, as the API does) a
// Read of file, then, once the Read's result holds oldLine, an Edit of
// oldLine into newLine, then, once the Edit's result came back without an
// error, a final text. A request without those tools (a side request of
// the agent's) gets a short text. Anything malformed is refused, and it
// answers at most maxRequests requests, so no agent loop can run on.
type fakeAnthropic struct {
	key, file, oldLine, newLine, prompt string

	mu       sync.Mutex
	requests int
	log      []string // one line per request: what was asked, what was answered
	readOK   bool     // the Read's result held the file's text
	editOK   bool     // the Edit's result came back without is_error
}

const (
	fakeMaxRequests = 20
	fakeReadID      = "toolu_agentbox_read"
	fakeEditID      = "toolu_agentbox_edit"
	fakeDone        = "Done: the greeting in hello.py is changed."
)

// anthropicBlock is a content block of a request's message.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string or text blocks
	IsError   bool            `json:"is_error"`
}

func (f *fakeAnthropic) note(format string, args ...any) {
	f.log = append(f.log, fmt.Sprintf(format, args...))
}

func (f *fakeAnthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	fail := func(status int, msg string) {
		f.note("%s %s -> %d %s", r.Method, r.URL.Path, status, msg)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"type": "error",
			"error": map[string]string{"type": "invalid_request_error", "message": msg}})
	}
	switch {
	case f.requests > fakeMaxRequests:
		fail(http.StatusBadRequest, "too many requests for one task")
		return
	case r.Method != http.MethodPost || r.URL.Path != "/v1/messages":
		fail(http.StatusNotFound, "no such route")
		return
	case r.Header.Get("X-Api-Key") != f.key:
		fail(http.StatusUnauthorized, "wrong x-api-key")
		return
	case r.Header.Get("Anthropic-Version") == "":
		fail(http.StatusBadRequest, "no anthropic-version header")
		return
	}
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&req); err != nil {
		fail(http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if req.Model == "" || req.MaxTokens <= 0 || len(req.Messages) == 0 {
		fail(http.StatusBadRequest, "model, max_tokens and messages are required")
		return
	}
	tools := map[string]bool{}
	for _, tool := range req.Tools {
		tools[tool.Name] = true
	}
	// The blocks of every message (a string content is one text block).
	var blocks []anthropicBlock
	var text strings.Builder
	for _, m := range req.Messages {
		var bs []anthropicBlock
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			bs = []anthropicBlock{{Type: "text", Text: s}}
		} else if err := json.Unmarshal(m.Content, &bs); err != nil {
			fail(http.StatusBadRequest, "message content: "+err.Error())
			return
		}
		for _, b := range bs {
			text.WriteString(b.Text)
		}
		blocks = append(blocks, bs...)
	}
	result := func(id string) (string, bool, bool) {
		for _, b := range blocks {
			if b.Type == "tool_result" && b.ToolUseID == id {
				var s string
				if json.Unmarshal(b.Content, &s) != nil {
					var parts []anthropicBlock
					json.Unmarshal(b.Content, &parts)
					for _, p := range parts {
						s += p.Text
					}
				}
				return s, b.IsError, true
			}
		}
		return "", false, false
	}

	var answer []map[string]any // the answer's content blocks
	stop := "end_turn"
	readOut, _, read := result(fakeReadID)
	editOut, editErr, edited := result(fakeEditID)
	switch {
	case !tools["Read"] || !tools["Edit"]:
		answer = []map[string]any{{"type": "text", "text": "ok"}}
	case !strings.Contains(text.String(), f.prompt):
		fail(http.StatusBadRequest, "the task's prompt is not in the conversation")
		return
	case edited:
		f.editOK = !editErr
		answer = []map[string]any{{"type": "text", "text": fakeDone}}
		if editErr {
			answer[0]["text"] = "The edit failed: " + editOut
		}
	case read:
		if f.readOK = strings.Contains(readOut, f.oldLine); !f.readOK {
			answer = []map[string]any{{"type": "text", "text": "The file does not hold the line to change."}}
			break
		}
		answer = []map[string]any{{"type": "tool_use", "id": fakeEditID, "name": "Edit",
			"input": map[string]any{"file_path": f.file, "old_string": f.oldLine, "new_string": f.newLine}}}
		stop = "tool_use"
	default:
		answer = []map[string]any{{"type": "tool_use", "id": fakeReadID, "name": "Read",
			"input": map[string]any{"file_path": f.file}}}
		stop = "tool_use"
	}
	var kinds []string
	for _, b := range answer {
		kinds = append(kinds, fmt.Sprint(b["type"], ":", b["name"]))
	}
	f.note("%s model=%s tools=%d messages=%d stream=%v -> %s %s", r.URL.Path, req.Model, len(req.Tools),
		len(req.Messages), req.Stream, strings.Join(kinds, ","), stop)

	msg := map[string]any{"id": fmt.Sprintf("msg_agentbox_%d", f.requests), "type": "message", "role": "assistant",
		"model": req.Model, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 10, "output_tokens": 10}}
	if !req.Stream {
		msg["content"], msg["stop_reason"] = answer, stop
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(msg)
		return
	}
	// The Messages API's stream: message_start, each block as start, one
	// delta and stop, then message_delta with the stop reason and
	// message_stop.
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	bw := bufio.NewWriter(w)
	event := func(name string, data map[string]any) {
		data["type"] = name
		b, _ := json.Marshal(data)
		fmt.Fprintf(bw, "event: %s\ndata: %s\n\n", name, b)
	}
	msg["content"], msg["stop_reason"] = []any{}, nil
	event("message_start", map[string]any{"message": msg})
	for i, b := range answer {
		switch b["type"] {
		case "text":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		case "tool_use":
			input, _ := json.Marshal(b["input"])
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{
				"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": 10}})
	event("message_stop", map[string]any{})
	bw.Flush()
}

// checkCodingAgent: the four agents start in a coding-agent sandbox
// without any network, and no API key is in the image; then Claude Code,
// run headless (`claude -p`) in another sandbox with its documented
// ANTHROPIC_BASE_URL pointed at a fake Messages API served by this test
// (on the test internet's loopback address, so the sandbox's egress
// reaches it as it would reach a provider), reads and edits a file of a
// git repository in /workspace as the fake tells it to, and the change
// comes back as `git diff` through the Go SDK's exec.
func checkCodingAgent(t *testing.T, d *daemon) {
	versions := codingAgentVersions(t)
	inet := newTestInternet(t, nil)
	fake := &fakeAnthropic{key: "sk-ant-agentbox-test-" + fmt.Sprint(time.Now().UnixNano()),
		file: "/workspace/repo/hello.py", oldLine: `print("hello")`, newLine: `print("hello from the agent")`,
		prompt: "agentbox task: make hello.py greet from the agent"}
	l := inet.listen(t, "tcp", inet.addr+":8080")
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	baseURL := "http://" + inet.addr + ":8080"

	start := time.Now()
	offline := createRaw(t, d, "", map[string]any{"template": "coding-agent"})
	t.Logf("create from coding-agent (returns once its start set git up): %s", time.Since(start).Round(time.Millisecond))
	defer deleteSandbox(t, d, "", offline)
	// No network at all: not even the test's endpoint answers.
	if got := fetchInSandbox(t, d, "", offline, baseURL+"/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("the sandbox without network reached %s: %s", baseURL, got)
	}
	for cmd, want := range versions {
		start := time.Now()
		got, code := sbRun(t, d, offline, cmd+" --version")
		if code != 0 || !strings.Contains(got, want) {
			t.Errorf("%s --version without network: exit %d: %q, want %s", cmd, code, got, want)
		}
		t.Logf("%s --version: %q in %s", cmd, got, time.Since(start).Round(time.Millisecond))
	}
	if got, code := sbRun(t, d, offline, `cat ~/.cache/agentbox/coding-agent-ready; rg --version | head -1; cc --version | head -1; git config --global user.name; grep -c '"usageStatisticsEnabled": false' ~/.gemini/settings.json`); code != 0 ||
		!strings.HasPrefix(got, "claude codex gemini opencode\nripgrep") || !strings.Contains(got, "cc (Debian") || !strings.HasSuffix(got, "agentbox coding agent\n1") {
		t.Errorf("the start's file, ripgrep, cc, git's identity, Gemini CLI's statistics off: exit %d: %q", code, got)
	}
	// No key or credential comes with the image: they are the secrets
	// broker's (docs/secrets.md).
	// (The agents' own credential files: Claude Code's, Codex's, Gemini
	// CLI's, opencode's.)
	if got, _ := sbRun(t, d, offline, `env | grep -iE '^[A-Z_]*(API_KEY|TOKEN)=' ; ls ~/.claude/.credentials.json ~/.codex/auth.json ~/.gemini/oauth_creds.json ~/.local/share/opencode/auth.json 2>/dev/null`); got != "" {
		t.Errorf("credentials in a fresh coding-agent sandbox: %q", got)
	}

	c := d.sdk(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, client.CreateRequest{Template: "coding-agent", Network: &client.Network{Mode: "egress"}})
	if err != nil {
		t.Fatalf("create a coding-agent sandbox with egress: %v", err)
	}
	defer deleteSandbox(t, d, "", sb.ID)
	run := func(cmd []string, env map[string]string, timeout time.Duration) *client.ExecResult {
		t.Helper()
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: cmd, Env: env, Cwd: "/workspace/repo", Timeout: timeout})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return res
	}
	if out, code := sbRun(t, d, sb.ID, `mkdir -p /workspace/repo && cd /workspace/repo && git init -q && echo '`+fake.oldLine+`' > hello.py && git add hello.py && git commit -qm 'hello' && git status --short | wc -l`); code != 0 || out != "0" {
		t.Fatalf("set up the repository: exit %d: %q", code, out)
	}
	start = time.Now()
	res := run([]string{"claude", "-p", fake.prompt, "--permission-mode", "acceptEdits", "--allowedTools", "Read,Edit", "--max-turns", "5"},
		map[string]string{"ANTHROPIC_BASE_URL": baseURL, "ANTHROPIC_API_KEY": fake.key, "ANTHROPIC_MODEL": "agentbox-fake-model",
			"ANTHROPIC_SMALL_FAST_MODEL": "agentbox-fake-small-model"}, 4*time.Minute)
	fake.mu.Lock()
	log, readOK, editOK := strings.Join(fake.log, "\n"), fake.readOK, fake.editOK
	fake.mu.Unlock()
	t.Logf("claude -p against the fake Messages API: exit %d in %s; requests:\n%s", res.ExitCode, time.Since(start).Round(time.Millisecond), log)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, fakeDone) {
		t.Fatalf("claude -p: exit %d (%s)\nstdout: %s\nstderr: %s", res.ExitCode, res.Status, lastLines(res.Stdout, 20), lastLines(res.Stderr, 20))
	}
	if !readOK || !editOK {
		t.Errorf("the agent's tool calls: read the file %v, edited it %v", readOK, editOK)
	}
	diff := run([]string{"git", "diff"}, nil, 30*time.Second)
	if diff.ExitCode != 0 || !strings.Contains(diff.Stdout, "-"+fake.oldLine+"\n") || !strings.Contains(diff.Stdout, "+"+fake.newLine+"\n") ||
		!strings.Contains(diff.Stdout, "a/hello.py") {
		t.Errorf("git diff after the agent: exit %d: %q %q", diff.ExitCode, diff.Stdout, diff.Stderr)
	}
	t.Logf("the agent's diff, through the SDK:\n%s", diff.Stdout)
}
