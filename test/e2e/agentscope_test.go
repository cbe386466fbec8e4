package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// The agentscope front-end, end to end: the Python suite in
// test/compat/agentscope (which speaks the protocol as agentscope's
// client does) against a real daemon, plus a few direct checks in Go.

const (
	asToken      = "as-token"
	asOtherToken = "as-bob-key"
	asPrefix     = "asr-"
	asHeartbeat  = 4 // seconds: short, so the suite can watch a recycle
	asMax        = 8
)

// requirePythonRequests skips unless /usr/bin/python3 with requests is
// installed (Debian: python3-requests).
func requirePythonRequests(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import requests").Run(); err != nil {
		t.Skipf("needs /usr/bin/python3 with requests (apt-get install python3-requests): %v", err)
	}
}

// runPythonSuite runs the suite (unittest discovery with pattern) against
// d with env, failing the test on a non-zero exit.
func runPythonSuite(t *testing.T, d *daemon, pattern string, env ...string) string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "unittest", "discover",
		"-s", filepath.Join(root, "test", "compat", "agentscope"), "-p", pattern, "-v")
	cmd.Env = append(cleanEnv(), append([]string{"AGENTBOX_URL=" + d.url, "AGENTBOX_TOKEN=" + asToken,
		"PYTHONDONTWRITEBYTECODE=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	t.Logf("python suite (%s):\n%s", pattern, out)
	if err != nil {
		t.Fatalf("python suite failed: %v\ndaemon log tail:\n%s", err, tail(d.logs.String(), 60))
	}
	return string(out)
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

func TestAgentscopePythonSuite(t *testing.T) {
	requirePythonRequests(t)
	storage := filepath.Join(testutil.ShortTempDir(t), "storage")
	d := startDaemon(t, "BEARER_TOKEN="+asToken, "API_KEYS="+asOtherToken+":bob", "CONTAINER_PREFIX_KEY="+asPrefix,
		fmt.Sprintf("HEARTBEAT_TIMEOUT=%d", asHeartbeat), fmt.Sprintf("MAX_SANDBOX_INSTANCES=%d", asMax),
		"POOL_SIZE=1", "DEFAULT_SANDBOX_TYPE=base", "STORAGE_FOLDER="+storage)
	runPythonSuite(t, d, "test*.py", "AGENTBOX_OTHER_TOKEN="+asOtherToken, "AGENTBOX_PREFIX="+asPrefix,
		fmt.Sprintf("AGENTBOX_MAX_INSTANCES=%d", asMax), fmt.Sprintf("AGENTBOX_HEARTBEAT=%d", asHeartbeat),
		"AGENTBOX_STORAGE="+storage)
}

// TestAgentscopePersistencePythonSuite runs the persistence and session
// tests with DEFAULT_MOUNT_DIR: workspaces are host directories that
// outlive their sandboxes and carry a session across a recycle.
func TestAgentscopePersistencePythonSuite(t *testing.T) {
	requirePythonRequests(t)
	dir := testutil.ShortTempDir(t)
	mounts, storage := filepath.Join(dir, "mounts"), filepath.Join(dir, "storage")
	d := startDaemon(t, "BEARER_TOKEN="+asToken, "DEFAULT_MOUNT_DIR="+mounts, "STORAGE_FOLDER="+storage,
		fmt.Sprintf("HEARTBEAT_TIMEOUT=%d", asHeartbeat))
	runPythonSuite(t, d, "test_[ps]*.py", "AGENTBOX_MOUNT_DIR="+mounts, "AGENTBOX_STORAGE="+storage,
		fmt.Sprintf("AGENTBOX_HEARTBEAT=%d", asHeartbeat))
}

// asCall calls a manager route and decodes the answer.
func asCall(t *testing.T, d *daemon, method, token string, body any) (int, map[string]any) {
	t.Helper()
	status, data := d.call(t, "POST", "/"+method, token, body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: bad JSON %q: %v", method, data, err)
	}
	return status, m
}

func TestAgentscopeProtocol(t *testing.T) {
	d := startDaemon(t, "BEARER_TOKEN="+asToken, "MAX_SANDBOX_INSTANCES=1", "CONTAINER_PREFIX_KEY="+asPrefix)

	// Auth: agentscope's exact bodies and header; /health is open.
	status, body := asCall(t, d, "create", "", map[string]any{})
	if status != http.StatusUnauthorized || body["detail"] != "Authentication required" {
		t.Fatalf("no token: %d %v", status, body)
	}
	status, body = asCall(t, d, "create", "wrong", map[string]any{})
	if status != http.StatusUnauthorized || body["detail"] != "Invalid authentication credentials" {
		t.Fatalf("wrong token: %d %v", status, body)
	}
	if status, data := d.call(t, "GET", "/health", "", nil); status != 200 || !strings.Contains(string(data), `"status":"healthy"`) {
		t.Fatalf("health: %d %s", status, data)
	}

	status, body = asCall(t, d, "create", asToken, map[string]any{"sandbox_type": "base"})
	id, _ := body["data"].(string)
	if status != 200 || !strings.HasPrefix(id, asPrefix) {
		t.Fatalf("create: %d %v", status, body)
	}
	// The instance limit answers null, not an error.
	if status, body = asCall(t, d, "create_from_pool", asToken, map[string]any{}); status != 200 || body["data"] != nil {
		t.Fatalf("create over the limit: %d %v", status, body)
	}

	status, body = asCall(t, d, "call_tool", asToken, map[string]any{"identity": strings.TrimPrefix(id, asPrefix),
		"tool_name": "run_shell_command", "arguments": map[string]any{"command": "echo hi; echo oops >&2; exit 2"}})
	res, _ := body["data"].(map[string]any)
	want := `{"content":[{"annotations":null,"description":"stdout","text":"hi\n","type":"text"},` +
		`{"annotations":null,"description":"stderr","text":"oops\n","type":"text"},` +
		`{"annotations":null,"description":"returncode","text":"2","type":"text"}],"isError":true,"meta":null}`
	if got, _ := json.Marshal(res); status != 200 || string(got) != want {
		t.Fatalf("run_shell_command: %d\n got %s\nwant %s", status, got, want)
	}

	// The sandbox API behind /proxy: a workspace round trip.
	if status, data := d.call(t, "PUT", "/proxy/"+id+"/workspace/file?path=a/b.txt", asToken, "payload"); status != 200 {
		t.Fatalf("proxy write: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/proxy/"+id+"/workspace/file?path=/workspace/a/b.txt", asToken, nil); status != 200 || string(data) != "payload" {
		t.Fatalf("proxy read: %d %q", status, data)
	}
	if status, data := d.call(t, "GET", "/proxy/"+id+"/workspace/file?path=/etc/passwd", asToken, nil); status != 403 {
		t.Fatalf("proxy outside /workspace: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/proxy/nope/healthz", asToken, nil); status != 404 || string(data) != "{\"detail\":\"sandbox not found: nope\"}\n" {
		t.Fatalf("proxy unknown sandbox: %d %q", status, data)
	}

	if status, body = asCall(t, d, "release", asToken, map[string]any{"identity": id}); status != 200 || body["data"] != true {
		t.Fatalf("release: %d %v", status, body)
	}
	status, body = asCall(t, d, "get_info", asToken, map[string]any{"identity": id})
	info, _ := body["data"].(map[string]any)
	if status != 200 || info["state"] != "released" || info["released_at"] == nil {
		t.Fatalf("get_info after release: %d %v", status, body)
	}
	status, body = asCall(t, d, "get_info", asToken, map[string]any{"identity": "missing"})
	if status != 500 || body["detail"] != "Error in get_info: No container found with id: missing." {
		t.Fatalf("get_info unknown: %d %v", status, body)
	}
}

// TestAgentscopePythonSuiteGVisor runs the whole agentscope Python suite
// (as TestAgentscopePythonSuite) with its sandbox types on the built-in
// base template of the test cache's store at isolation gvisor
// (TEMPLATE_ISOLATION): base is the stored template of its name, the
// filesystem type is mapped to it. One test skips, by the capability it
// needs: an HTTP MCP server inside the sandbox (no_ports: the daemon
// cannot dial into gVisor's network stack); a pooled gVisor sandbox is
// destroyed after its one use (no_recycle), which the suite does not see.
// Before the suite, a sandbox of each type shows it runs on gVisor's
// kernel as the sandbox user, and an HTTP MCP server URL is refused
// naming the level.
func TestAgentscopePythonSuiteGVisor(t *testing.T) {
	requirePythonRequests(t)
	testutil.RequireRoot(t)
	runsc := testutil.Runsc(t)
	ctx := waitCtx(t, 20*time.Minute)
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	storage := filepath.Join(testutil.ShortTempDir(t), "storage")
	d := startDaemon(t, "BEARER_TOKEN="+asToken, "API_KEYS="+asOtherToken+":bob", "CONTAINER_PREFIX_KEY="+asPrefix,
		fmt.Sprintf("HEARTBEAT_TIMEOUT=%d", asHeartbeat), fmt.Sprintf("MAX_SANDBOX_INSTANCES=%d", asMax),
		"POOL_SIZE=1", "DEFAULT_SANDBOX_TYPE=base", "STORAGE_FOLDER="+storage,
		"TEMPLATE_DIR="+tmplDir, `SANDBOX_TEMPLATES={"base":"host","filesystem":"base"}`,
		"RUNSC_PATH="+runsc, `TEMPLATE_ISOLATION={"base":"gvisor","filesystem":"gvisor"}`)
	ensureBuiltinTemplates(t, ctx, d, asToken)
	for _, typ := range []string{"base", "filesystem"} {
		status, body := asCall(t, d, "create", asToken, map[string]any{"sandbox_type": typ})
		id, _ := body["data"].(string)
		if status != 200 || id == "" {
			t.Fatalf("create %s: %d %v", typ, status, body)
		}
		_, out, isErr := asTool(t, d, asToken, id, "run_shell_command", map[string]any{"command": "cat /proc/sys/kernel/osrelease; id -u; test -e /etc/debian_version && echo debian"})
		if isErr || !strings.Contains(out, "gvisor") || !strings.Contains(out, "1000\ndebian\n") {
			t.Errorf("a %s sandbox: %q (error %v), want gVisor's kernel, uid 1000, the base template's Debian", typ, out, isErr)
		}
		if typ == "base" {
			// An HTTP MCP server "inside" a gVisor sandbox is refused by
			// name: the host pid of the sandbox is runsc's, in the host's
			// network namespace, where a dial would reach the host's own
			// loopback (here the daemon).
			port := d.url[strings.LastIndex(d.url, ":")+1:]
			cfg := map[string]any{"mcpServers": map[string]any{"host": map[string]any{"type": "sse", "url": "http://127.0.0.1:" + port + "/health"}}}
			status, body := asCall(t, d, "add_mcp_servers", asToken, map[string]any{"identity": id, "server_configs": cfg})
			if detail, _ := body["detail"].(string); status != 500 || !strings.Contains(detail, "isolation gvisor") {
				t.Errorf("an HTTP MCP server of a gVisor sandbox: %d %v, want refused naming the level", status, body)
			}
		}
		asCall(t, d, "release", asToken, map[string]any{"identity": id})
	}
	runPythonSuite(t, d, "test*.py", "AGENTBOX_OTHER_TOKEN="+asOtherToken, "AGENTBOX_PREFIX="+asPrefix,
		fmt.Sprintf("AGENTBOX_MAX_INSTANCES=%d", asMax), fmt.Sprintf("AGENTBOX_HEARTBEAT=%d", asHeartbeat),
		"AGENTBOX_STORAGE="+storage, "AGENTBOX_LACKS="+strings.Join(gvisorLacks(t, d, asToken), ","))
}
