package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	pngpkg "image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/testutil"
)

// buildBrowserTemplate builds templates/base and templates/browser as
// `make templates` does, on a daemon whose TEMPLATE_DIR is the test
// cache's (so only a first run downloads Debian's and npm's packages),
// and returns that TEMPLATE_DIR. It holds the cache's lock until the test
// ends; the building daemon is stopped before it returns.
func buildBrowserTemplate(t *testing.T, ctx context.Context) string {
	t.Helper()
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	// RUN steps get a disk of MAX_DISK: a smaller one fits these steps and
	// a machine whose disk other tests are filling.
	d := startDaemon(t, "TEMPLATE_DIR="+tmplDir, "API_KEYS=k-alice:alice", "TEMPLATE_ADMIN_USERS=alice", "MAX_DISK=6G")
	defer d.stop()
	bin, _ := binaries(t)
	boot := exec.CommandContext(ctx, bin, "template", "bootstrap", "debian:bookworm")
	boot.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY=k-alice")
	if out, err := boot.CombinedOutput(); err != nil {
		t.Skipf("cannot bootstrap debian:bookworm on this host (no Debian mirror reachable through its apt settings?): %v\n%s", err, lastLines(string(out), 20))
	}
	for _, name := range []string{"base", "browser"} {
		args := append([]string{"template", "build", "-t", name}, builtinSecrets()...)
		args = append(args, templateContext(t, ctx, name))
		out, took := templateCLIAs(t, ctx, d, "k-alice", args...)
		t.Logf("build %s: %s, %d steps run, %d cached", name, took.Round(time.Millisecond),
			strings.Count(out, "---> Running in"), strings.Count(out, "---> Using cache"))
	}
	return tmplDir
}

// buildDesktopTemplate is buildBrowserTemplate with templates/desktop
// (FROM browser) as well (buildDesktop), for agentscope's gui type.
func buildDesktopTemplate(t *testing.T, ctx context.Context) string {
	t.Helper()
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	d := startDaemon(t, "TEMPLATE_DIR="+tmplDir, "API_KEYS=k-alice:alice", "TEMPLATE_ADMIN_USERS=alice", "MAX_DISK=6G")
	defer d.stop()
	buildDesktop(t, ctx, d, "k-alice")
	return tmplDir
}

// templateContext is the build context of built-in template name: the
// browser template's is staged in the test cache with its npm packages
// (scripts/stage-browser.sh, as `make templates` does); the caller holds
// the cache's lock.
func templateContext(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	if name != "browser" {
		return "templates/" + name
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(testCache(t), "browser-context")
	out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts", "stage-browser.sh"), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("stage the browser template (needs npm): %v\n%s", err, out)
	}
	return dir
}

// TestAgentscopeBrowser drives agentscope's browser and gui sandbox types
// the way agentscope-runtime's BrowserSandbox and GuiSandbox do (the
// Python suite test/compat/agentscope/browser_suite.py): the browser_*
// tools served by Playwright's MCP server in the sandbox, computer for
// gui on the desktop template (the default SANDBOX_TEMPLATES), the
// desktop URL the client builds (a noVNC page for both), opened in
// Chromium for a browser sandbox, where it shows the agent's page.
func TestAgentscopeBrowser(t *testing.T) {
	requireRootAndMmdebstrap(t)
	requirePythonRequests(t)
	ctx := waitCtx(t, 30*time.Minute)
	tmplDir := buildDesktopTemplate(t, ctx)
	d := startDaemon(t, "TEMPLATE_DIR="+tmplDir, "BEARER_TOKEN="+asToken, "API_KEYS="+asOtherToken+":bob",
		"CONTAINER_PREFIX_KEY="+asPrefix)
	t.Run("desktop_url_in_chromium", func(t *testing.T) { checkBrowserDesktopURL(t, d) })
	runPythonSuite(t, d, "browser_suite.py", "AGENTBOX_OTHER_TOKEN="+asOtherToken, "AGENTBOX_PREFIX="+asPrefix)
	checkMCPBrowserTools(t, d)
}

// The colours of checkBrowserDesktopURL's two pages: unlike anything
// Chromium, its window manager or an empty screen draws.
const (
	desktopURLGreen = "17bb5b"
	desktopURLPink  = "c9258e"
)

// checkBrowserDesktopURL is a person opening the desktop URL of
// agentscope's BrowserSandbox (GUIMixin.desktop_url) while an agent drives
// it: a browser sandbox from create_from_pool navigates, with
// browser_navigate, to a page of one colour served on the sandbox's
// loopback; the URL, opened in the host's Chromium, redirects to the noVNC
// page, which connects and shows that colour over most of the screen; the
// agent then navigates to a page of another colour, and the open page
// shows that one (it is the live screen, not a picture taken once).
func checkBrowserDesktopURL(t *testing.T, d *daemon) {
	mods := playwrightDir(t)
	if _, err := os.Stat(chromiumPath()); err != nil {
		failOrSkip(t, "needs Chromium on the host (apt-get install chromium): %v", err)
	}
	call := func(method string, body map[string]any) any {
		t.Helper()
		status, m := asCall(t, d, method, asToken, body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %v", method, status, m)
		}
		return m["data"]
	}
	start := time.Now()
	id, _ := call("create_from_pool", map[string]any{"sandbox_type": "browser", "meta": map[string]any{"session_ctx_id": "desktop-url"}}).(string)
	if id == "" {
		t.Fatal("create_from_pool gave no sandbox")
	}
	defer call("release", map[string]any{"identity": id})
	tool := func(name string, args map[string]any) string {
		t.Helper()
		res, _ := call("call_tool", map[string]any{"identity": id, "tool_name": name, "arguments": args}).(map[string]any)
		content, _ := res["content"].([]any)
		var text []string
		for _, c := range content {
			if c, _ := c.(map[string]any); c["type"] == "text" {
				text = append(text, fmt.Sprint(c["text"]))
			}
		}
		if res["isError"] != false {
			t.Fatalf("%s: %v", name, res)
		}
		return strings.Join(text, "\n")
	}
	const port = 8767
	page := func(name, colour string) string {
		return fmt.Sprintf(`<!doctype html><title>%s page</title><body style="margin:0;background:#%s"><h1>agentbox desktop_url: %s</h1>`, name, colour, name)
	}
	tool("run_shell_command", map[string]any{"command": fmt.Sprintf(`mkdir -p /tmp/colours && cd /tmp/colours && printf '%%s' '%s' > green.html && printf '%%s' '%s' > pink.html && (setsid nohup python3 -m http.server %d --bind 127.0.0.1 >/tmp/colours.log 2>&1 </dev/null &) && for i in $(seq 50); do curl -sf -o /dev/null http://127.0.0.1:%d/green.html && echo up && break; sleep 0.2; done`,
		page("green", desktopURLGreen), page("pink", desktopURLPink), port, port)})
	navigate := func(name string) {
		t.Helper()
		if text := tool("browser_navigate", map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/%s.html", port, name)}); !strings.Contains(text, name+" page") {
			t.Fatalf("browser_navigate to the %s page: %s", name, text)
		}
	}
	navigate("green")
	t.Logf("created and navigated: %s", time.Since(start).Round(time.Millisecond))

	// GUIMixin.desktop_url: {base_url}/desktop/{id}/vnc/vnc_relay.html?password={runtime_token}.
	info, _ := call("get_info", map[string]any{"identity": id}).(map[string]any)
	token, _ := info["runtime_token"].(string)
	desktopURL := d.url + "/desktop/" + id + "/vnc/vnc_relay.html?" + url.Values{"password": {token}}.Encode()

	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	shot := filepath.Join(t.TempDir(), "desktop.png")
	cmd := exec.CommandContext(ctx, "node", filepath.Join(root, "test", "e2e", "testdata", "desktop_colours.cjs"),
		desktopURL, shot, desktopURLGreen, desktopURLPink)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods, "CHROMIUM="+chromiumPath())
	// Past the deadline, SIGTERM: Playwright then closes its Chromium.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Closing its stdin ends the script early (it closes its Chromium).
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil && !t.Failed() {
			t.Errorf("desktop page: %v\n%s", err, lastLines(stderr.String(), 30))
		}
	}()
	lines := make(chan map[string]any, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("the desktop page ended before %s:\n%s", what, lastLines(stderr.String(), 30))
			}
			return m
		case <-ctx.Done():
			t.Fatalf("the desktop page: no %s: %v", what, ctx.Err())
		}
		return nil
	}

	head := next("the page")
	if head["status"] != 200.0 {
		t.Fatalf("desktop_url of a browser sandbox in Chromium: %v", head)
	}
	// The redirect to the sandbox's signed, interactive noVNC link.
	if u := fmt.Sprint(head["url"]); !strings.HasPrefix(u, d.url+"/v1/sandboxes/"+strings.TrimPrefix(id, asPrefix)+"/desktop?") || !strings.Contains(u, "mode=interactive") {
		t.Errorf("desktop_url led to %s, want the sandbox's interactive desktop link", u)
	}
	if head["state"] != "connected" || head["label"] != "interactive" {
		t.Fatalf("the desktop page in Chromium: %v", head)
	}
	seen := next("the green page")
	if seen["seen"] != desktopURLGreen {
		t.Fatalf("the desktop page never showed the browser's green page: %v", seen)
	}
	t.Logf("the desktop page shows the green page (%.0f%% of the screen): %s", 100*seen["share"].(float64), time.Since(start).Round(time.Millisecond))
	navigate("pink")
	if _, err := io.WriteString(stdin, "next\n"); err != nil {
		t.Fatal(err)
	}
	if seen = next("the pink page"); seen["seen"] != desktopURLPink {
		t.Fatalf("the desktop page never showed the page the agent went to next: %v", seen)
	}
	t.Logf("then the pink page (%.0f%%): %s", 100*seen["share"].(float64), time.Since(start).Round(time.Millisecond))
	if done := next("the end"); done["done"] != true || len(done["problems"].([]any)) > 0 {
		t.Errorf("the desktop page: %v", done)
	}
}

// checkMCPBrowserTools drives the MCP kit's browser_open and screenshot
// on a browser sandbox through its per-sandbox MCP endpoint, and checks
// that a sandbox without a desktop answers a tool error saying so.
func checkMCPBrowserTools(t *testing.T, d *daemon) {
	id := createRaw(t, d, asToken, map[string]any{"template": "browser"})
	defer deleteSandbox(t, d, asToken, id)
	page := `<title>mcp browser page</title><h1>opened by browser_open</h1>`
	script := fmt.Sprintf(`mkdir -p /tmp/site && printf '%%s' '%s' > /tmp/site/index.html && cd /tmp/site && (setsid nohup python3 -m http.server 8766 --bind 127.0.0.1 >/tmp/mcp-http.log 2>&1 </dev/null &) && echo started`, page)
	if out, code := sbRunAs(t, d, asToken, id, script); code != 0 {
		t.Fatalf("start the page server: %d %s", code, out)
	}
	waitForN(t, 100, "the page server in the sandbox", func() (bool, string) {
		out, _ := sbRunAs(t, d, asToken, id, `curl -sf -o /dev/null http://127.0.0.1:8766/ && echo up`)
		return out == "up", out
	})
	cs := mcpHTTP(t, d, asToken, "/v1/sandboxes/"+id+"/mcp")
	text := mustTool(t, cs, "browser_open", map[string]any{"url": "http://127.0.0.1:8766/index.html"})
	if !strings.Contains(text, "Title: mcp browser page") || !strings.Contains(text, "URL: http://127.0.0.1:8766/index.html") {
		t.Errorf("browser_open: %s", text)
	}
	// The page was fetched by the browser inside the sandbox.
	if out, _ := sbRunAs(t, d, asToken, id, `grep -c 'GET /index.html' /tmp/mcp-http.log`); out != "1" {
		t.Errorf("the page server saw %s requests for the page, want 1", out)
	}
	failTool(t, cs, "browser_open", map[string]any{"url": "javascript:alert(1)"}, "must be an http")
	failTool(t, cs, "browser_open", map[string]any{"url": "http://127.0.0.1:1/"}, "could not open")

	res, text := callTool(t, cs, "screenshot", nil)
	if res.IsError || len(res.Content) != 2 {
		t.Fatalf("screenshot: %v %s", res.IsError, text)
	}
	img, ok := res.Content[1].(*mcp.ImageContent)
	if !ok || img.MIMEType != "image/png" {
		t.Fatalf("screenshot content: %#v", res.Content[1])
	}
	cfg, err := pngpkg.DecodeConfig(bytes.NewReader(img.Data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	size := mustComputer(t, d, asToken, id, map[string]any{"action": "screen_size"})
	if float64(cfg.Width) != size["width"] || float64(cfg.Height) != size["height"] || !strings.Contains(text, fmt.Sprintf("%dx%d", cfg.Width, cfg.Height)) {
		t.Errorf("screenshot %dx%d (%s), screen %v", cfg.Width, cfg.Height, text, size)
	}

	// A sandbox without a desktop: the tools say what to do.
	plain := createRaw(t, d, asToken, map[string]any{})
	defer deleteSandbox(t, d, asToken, plain)
	cs2 := mcpHTTP(t, d, asToken, "/v1/sandboxes/"+plain+"/mcp")
	failTool(t, cs2, "screenshot", nil, "no desktop.*browser template")
	failTool(t, cs2, "browser_open", map[string]any{"url": "http://127.0.0.1:8766/"}, "no browser.*browser template")
}

func requireRootAndMmdebstrap(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("needs mmdebstrap (apt-get install mmdebstrap) to bootstrap debian:bookworm")
	}
}

// TestAgentscopeBrowserBench measures create-to-first-screenshot of
// agentscope's browser type (create_from_pool, then browser_navigate to
// about:blank, which starts the sandbox's Playwright MCP server, and
// browser_take_screenshot): a pool hit against a
// cold create, with the native /computer screenshot after a pool hit as
// the reference, in the same run (docs/benchmarks.md). Not part of `make
// test`: AGENTBOX_BENCH=1 (scripts/bench.sh) runs it.
func TestAgentscopeBrowserBench(t *testing.T) {
	if os.Getenv("AGENTBOX_BENCH") == "" {
		t.Skip("a benchmark: AGENTBOX_BENCH=1 runs it (scripts/bench.sh)")
	}
	requireRootAndMmdebstrap(t)
	ctx := waitCtx(t, 25*time.Minute)
	tmplDir := buildBrowserTemplate(t, ctx)
	d := startDaemon(t, "TEMPLATE_DIR="+tmplDir, "BEARER_TOKEN="+asToken, "DEFAULT_SANDBOX_TYPE=browser", "POOL_SIZE=1")
	level := func() float64 {
		_, data := d.call(t, "GET", "/v1/info", asToken, nil)
		pools, _ := mustJSON(t, data)["pools"].(map[string]any)
		n, _ := pools["browser"].(float64)
		return n
	}
	asData := func(method string, body map[string]any) any {
		status, m := asCall(t, d, method, asToken, body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %v", method, status, m)
		}
		return m["data"]
	}
	// Playwright's MCP server takes a screenshot of a page it has seen
	// (navigated to or snapshotted): an agent's first screenshot follows
	// its first browser_navigate.
	shot := func(id string) {
		nav, _ := asData("call_tool", map[string]any{"identity": id, "tool_name": "browser_navigate",
			"arguments": map[string]any{"url": "about:blank"}}).(map[string]any)
		if nav["isError"] != false {
			t.Fatalf("browser_navigate: %v", nav)
		}
		res, _ := asData("call_tool", map[string]any{"identity": id, "tool_name": "browser_take_screenshot",
			"arguments": map[string]any{"raw": true, "filename": "", "element": "", "ref": ""}}).(map[string]any)
		if res["isError"] != false {
			t.Fatalf("browser_take_screenshot: %v", res)
		}
	}
	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("AGENTBOX_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	var hit, cold, ref, think []time.Duration
	for i := 0; i < rounds; i++ {
		// "think": a pool hit whose first browser call comes 3 s after the
		// create (an agent's model thinking), timed from that call.
		for _, kind := range []string{"hit", "ref", "cold", "think"} {
			if kind != "cold" {
				waitForN(t, 600, "a warm browser sandbox in the pool", func() (bool, string) { return level() == 1, fmt.Sprint(level()) })
			}
			start := time.Now()
			method := map[bool]string{true: "create", false: "create_from_pool"}[kind == "cold"]
			id, _ := asData(method, map[string]any{"sandbox_type": "browser"}).(string)
			if kind == "think" {
				time.Sleep(3 * time.Second)
				start = time.Now()
			}
			if kind == "ref" {
				if status, data := computer(t, d, asToken, id, map[string]any{"action": "screenshot"}); status != http.StatusOK {
					t.Fatalf("screenshot: %d %s", status, data)
				}
			} else {
				shot(id)
			}
			took := time.Since(start)
			switch kind {
			case "hit":
				hit = append(hit, took)
			case "cold":
				cold = append(cold, took)
			case "think":
				think = append(think, took)
			default:
				ref = append(ref, took)
			}
			asData("release", map[string]any{"identity": id})
		}
	}
	t.Logf("create to first screenshot, agentscope browser type (create_from_pool + browser_navigate + browser_take_screenshot):\n  pool hit: %v\n  cold:     %v\n  pool hit, first call 3 s after the create (timed from the call): %v\n  reference, pool hit + native /computer screenshot: %v", hit, cold, think, ref)
}
