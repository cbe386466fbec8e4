package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// testCache is the directory downloads and builds the tests reuse live in,
// outside the checkout: AGENTBOX_TEST_CACHE (scripts/test.sh exports it),
// else the same default scripts/test.sh uses.
func testCache(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("AGENTBOX_TEST_CACHE"); dir != "" {
		return dir
	}
	home, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no test cache directory: AGENTBOX_TEST_CACHE is unset and %v", err)
	}
	return filepath.Join(home, "agentbox-test")
}

// lockCache takes an exclusive lock on path for the rest of the test:
// one daemon at a time may own a template directory, so a second run
// sharing the cache (another checkout, a parallel CI job) waits its turn.
// Within this process the lock is counted: a test that took it may start
// daemons (which take it too, startDaemonArgs) without waiting for itself.
func lockCache(t testing.TB, ctx context.Context, path string) {
	t.Helper()
	cacheLocks.Lock()
	defer cacheLocks.Unlock()
	if l := cacheLocks.held[path]; l != nil {
		l.n++
		t.Cleanup(func() { releaseCache(path) })
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			t.Fatalf("lock %s: %v", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			t.Fatalf("%s stayed locked by another test run: %v", path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	if cacheLocks.held == nil {
		cacheLocks.held = map[string]*heldLock{}
	}
	cacheLocks.held[path] = &heldLock{f: f, n: 1}
	t.Cleanup(func() { releaseCache(path) })
}

// cacheLocks are the cache locks this process holds, by path.
var cacheLocks struct {
	sync.Mutex
	held map[string]*heldLock
}

type heldLock struct {
	f *os.File
	n int
}

func releaseCache(path string) {
	cacheLocks.Lock()
	defer cacheLocks.Unlock()
	l := cacheLocks.held[path]
	if l == nil {
		return
	}
	if l.n--; l.n == 0 {
		l.f.Close() // drops the flock
		delete(cacheLocks.held, path)
	}
}

// lockCachedTemplates takes the lock of a TEMPLATE_DIR among settings
// that lies in the test cache, so that no daemon a test starts opens the
// shared store while another run's daemon has it.
func lockCachedTemplates(t testing.TB, settings []string) {
	t.Helper()
	cache := os.Getenv("AGENTBOX_TEST_CACHE")
	if cache == "" {
		home, err := os.UserCacheDir()
		if err != nil {
			return
		}
		cache = filepath.Join(home, "agentbox-test")
	}
	for _, kv := range settings {
		dir, ok := strings.CutPrefix(kv, "TEMPLATE_DIR=")
		if !ok {
			continue
		}
		if rel, err := filepath.Rel(cache, dir); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			lockCache(t, ctx, filepath.Clean(dir)+".lock")
			cancel()
		}
	}
}

// templateCLI runs `agentbox ARGS` from the module root against d as
// `make templates` does, and returns its output and how long it took.
func templateCLI(t *testing.T, ctx context.Context, d *daemon, args ...string) (string, time.Duration) {
	t.Helper()
	bin, _ := binaries(t)
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = root
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY=")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("agentbox %s: %v\n%s", strings.Join(args, " "), err, lastLines(string(out), 60))
	}
	return string(out), took
}

// builtinSecrets are the build secrets of `make templates`: the host's
// Debian sources as apt-sources, when the host has that file.
func builtinSecrets() []string {
	const sources = "/etc/apt/sources.list.d/debian.sources"
	if _, err := os.Stat(sources); err != nil {
		return nil
	}
	return []string{"--secret", "id=apt-sources,src=" + sources}
}

// TestBuiltinTemplates builds the real built-in templates as `make
// templates` does (bootstrap debian:bookworm from the host's apt, build
// templates/base and templates/code-interpreter with the host's apt
// sources as a build secret) on a daemon whose TEMPLATE_DIR lives in the
// test cache, so a second run finds every layer and step cached, and
// checks E2B's base conventions and the warm code context in sandboxes
// made from them, VS Code through its preview link (code-server), and
// the coding agents (coding-agent: each one's --version offline, Claude
// Code editing a repository against a fake model API). Debian's packages come through the host's apt settings,
// as a machine that builds the templates gets them.
func TestBuiltinTemplates(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("needs mmdebstrap (apt-get install mmdebstrap) to bootstrap debian:bookworm")
	}
	ctx := waitCtx(t, 60*time.Minute)
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	d := startDaemon(t, "NETWORK=on", "NETWORK_BRIDGE=abxbuiltin", "NETWORK_SUBNET=10.86.0.0/16", "TEMPLATE_DIR="+tmplDir,
		// A build step's sandbox gets MAX_DISK (default 20G), which a shared
		// host's disk may not hold; no template needs more than a few.
		"MAX_DISK=8G")

	total := time.Now()
	bin, _ := binaries(t)
	boot := exec.CommandContext(ctx, bin, "template", "bootstrap", "debian:bookworm")
	boot.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY=")
	start := time.Now()
	if out, err := boot.CombinedOutput(); err != nil {
		t.Skipf("cannot bootstrap debian:bookworm on this host (no Debian mirror reachable through its apt settings?): %v\n%s", err, lastLines(string(out), 20))
	}
	t.Logf("bootstrap debian:bookworm: %s", time.Since(start).Round(time.Millisecond))

	build := func(name string) {
		t.Helper()
		args := append([]string{"template", "build", "-t", name}, builtinSecrets()...)
		args = append(args, "templates/"+name)
		out, took := templateCLI(t, ctx, d, args...)
		t.Logf("build %s: %s, %d steps run, %d cached", name, took.Round(time.Millisecond),
			strings.Count(out, "---> Running in"), strings.Count(out, "---> Using cache"))
		// An unchanged rebuild runs nothing (and keeps the digest).
		before := getTemplate(t, d, "", name)["digest"]
		out, took = templateCLI(t, ctx, d, args...)
		if strings.Contains(out, "---> Running in") || !strings.Contains(out, "---> Using cache") {
			t.Errorf("unchanged rebuild of %s ran steps:\n%s", name, out)
		}
		if after := getTemplate(t, d, "", name)["digest"]; after != before {
			t.Errorf("unchanged rebuild of %s changed its digest: %v -> %v", name, before, after)
		}
		t.Logf("unchanged rebuild of %s: %s", name, took.Round(time.Millisecond))
	}
	build("base")
	build("code-interpreter")
	build("data-science")
	size, _ := getTemplate(t, d, "", "data-science")["size"].(float64)
	t.Logf("data-science template: %.0f MB unpacked (all layers, code-interpreter's included)", size/1e6)
	buildStaged(t, ctx, d, "code-server")
	buildStaged(t, ctx, d, "coding-agent")
	t.Logf("bootstrap and builds: %s", time.Since(total).Round(time.Millisecond))

	t.Run("base", func(t *testing.T) { checkBase(t, d) })
	t.Run("code-interpreter", func(t *testing.T) { checkCodeInterpreter(t, d) })
	t.Run("data-science", func(t *testing.T) { checkDataScience(t, d) })
	t.Run("code-server", func(t *testing.T) { checkCodeServer(t, d) })
	t.Run("coding-agent", func(t *testing.T) { checkCodingAgent(t, d) })
	// Last: it restarts the daemon with pools.
	t.Run("pools", func(t *testing.T) { checkBuiltinPools(t, d) })
}

// buildStaged stages templates/NAME with its npm packages into the test
// cache (scripts/stage-NAME.sh, as make templates does) and builds it on
// d, logging how long each part took and the template's size.
func buildStaged(t *testing.T, ctx context.Context, d *daemon, name string) {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(testCache(t), name+"-context")
	script := "stage-" + name + ".sh"
	start := time.Now()
	if out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts", script), dir).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, lastLines(string(out), 30))
	}
	t.Logf("stage %s (host npm): %s", name, time.Since(start).Round(time.Millisecond))
	args := append([]string{"template", "build", "-t", name}, builtinSecrets()...)
	out, took := templateCLI(t, ctx, d, append(args, dir)...)
	t.Logf("build %s: %s, %d steps run, %d cached", name, took.Round(time.Millisecond),
		strings.Count(out, "---> Running in"), strings.Count(out, "---> Using cache"))
	size, _ := getTemplate(t, d, "", name)["size"].(float64)
	t.Logf("%s template: %.0f MB unpacked (all layers, base's included)", name, size/1e6)
}

// builtinBase names the built `base` template: with the default
// SANDBOX_TEMPLATES the bare name "base" is agentscope's base sandbox
// type, which maps to the host template (templates/README.md).
const builtinBase = "base:latest"

// sbRun runs script with /bin/sh -c in sandbox id and returns its output
// and exit code.
func sbRun(t *testing.T, d *daemon, id, script string) (string, int) {
	t.Helper()
	body := map[string]any{"cmd": []string{"/bin/sh", "-c", script}, "timeout": 60}
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", body)
	if status != http.StatusOK {
		t.Fatalf("exec %q: %d %s", script, status, data)
	}
	m := mustJSON(t, data)
	code, _ := m["exit_code"].(float64)
	return strings.TrimSpace(m["stdout"].(string) + m["stderr"].(string)), int(code)
}

func checkBase(t *testing.T, d *daemon) {
	start := time.Now()
	id := createRaw(t, d, "", map[string]any{"template": builtinBase})
	t.Logf("create from base: %s", time.Since(start).Round(time.Millisecond))
	defer deleteSandbox(t, d, "", id)
	checks := []struct{ script, want string }{
		{`id -un; id -u; id -gn`, "user\n1000\nuser"},
		{`pwd; echo "$HOME"`, "/workspace\n/home/user"},
		{`echo "$LANG"`, "C.UTF-8"},
		{`case ":$PATH:" in *:/home/user/.local/bin:*) echo yes;; *) echo "no: $PATH";; esac`, "yes"},
		{`python3 -c 'import IPython, numpy, pandas, matplotlib; print("ok")'`, "ok"},
		{`node -e 'console.log([1, 2].map(v => v * 2).join(","))'`, "2,4"},
		{`npm --version >/dev/null && echo ok`, "ok"},
		{`git --version >/dev/null && curl --version >/dev/null && echo ok`, "ok"},
		{`echo hello > /workspace/f.txt && cat /workspace/f.txt && stat -c %U /workspace/f.txt`, "hello\nuser"},
		{`pip install --help >/dev/null && echo ok`, "ok"},
		{`touch /home/user/.local/bin/mine && echo ok`, "ok"},
	}
	for _, c := range checks {
		if got, code := sbRun(t, d, id, c.script); got != c.want || code != 0 {
			t.Errorf("%s: got %q (exit %d), want %q", c.script, got, code, c.want)
		}
	}
	// sudo is there and configured (passwordless for user) but, as
	// templates/README.md says, never elevates in an agentbox sandbox:
	// no_new_privs is always set, so a setuid binary grants nothing.
	if got, code := sbRun(t, d, id, `sudo -n true`); code == 0 || !strings.Contains(got, "no new privileges") {
		t.Errorf("sudo -n true as user: exit %d: %q, want a refusal naming no_new_privs", code, got)
	}
	// What one sandbox writes stays there: not in another, not in the template.
	other := createRaw(t, d, "", map[string]any{"template": builtinBase})
	defer deleteSandbox(t, d, "", other)
	if got, _ := sbRun(t, d, other, `ls /workspace /home/user/.local/bin`); got != "/home/user/.local/bin:\n\n/workspace:" {
		t.Errorf("files of one sandbox in another: %q", got)
	}
}

func checkCodeInterpreter(t *testing.T, d *daemon) {
	const cell = "import numpy as np, pandas as pd\nimport matplotlib.pyplot as plt\n(np.__name__, pd.__name__, plt.__name__)"
	const want = "('numpy', 'pandas', 'matplotlib.pyplot')"

	start := time.Now()
	id := createRaw(t, d, "", map[string]any{"template": "code-interpreter"})
	t.Logf("create from code-interpreter (returns once the context is warm): %s", time.Since(start).Round(time.Millisecond))
	defer deleteSandbox(t, d, "", id)

	// Create returned with the default python context already running.
	status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/code/contexts", "", nil)
	list, _ := mustJSON(t, data)["contexts"].([]any)
	if status != http.StatusOK || len(list) == 0 || list[0].(map[string]any)["language"] != "python" {
		t.Fatalf("contexts before the first run_code: %d %s", status, data)
	}
	// The first cell finds the warm-up's names (the Dockerfile's label).
	start = time.Now()
	x := mustRun(t, d, "", id, map[string]any{"code": "(np.__name__, pd.__name__, plt.__name__)"})
	warm := time.Since(start)
	if x.text() != want || x.err != nil {
		t.Fatalf("first cell: %q %+v stderr %q", x.text(), x.err, x.stderr)
	}
	if x = mustRun(t, d, "", id, map[string]any{"code": "import os\nos.getuid(), os.getcwd()"}); x.text() != "(1000, '/workspace')" {
		t.Errorf("context user and cwd: %q %+v", x.text(), x.err)
	}
	// The same first cell in a base sandbox pays for the interpreter and
	// the imports.
	cold := createRaw(t, d, "", map[string]any{"template": builtinBase})
	defer deleteSandbox(t, d, "", cold)
	start = time.Now()
	x = mustRun(t, d, "", cold, map[string]any{"code": cell})
	coldTook := time.Since(start)
	if x.text() != want || x.err != nil {
		t.Fatalf("first cell in base: %q %+v stderr %q", x.text(), x.err, x.stderr)
	}
	start = time.Now()
	x = mustRun(t, d, "", id, map[string]any{"code": cell})
	if x.text() != want {
		t.Errorf("importing again in the warm context: %q %+v", x.text(), x.err)
	}
	t.Logf("first cell: warm (code-interpreter) %s; cold (base, the same imports) %s; the full import cell warm %s",
		warm.Round(time.Millisecond), coldTook.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
