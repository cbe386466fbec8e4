package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// Security regressions of issue 10 owned by the "misc" slice: agentscope
// workspace storage bound to its owner.

const (
	secAliceKey = "sec-alice-key"
	secBobKey   = "sec-bob-key"
)

// asShell runs command in the agentscope sandbox id as the key's user and
// returns its stdout text.
func asShell(t *testing.T, d *daemon, key, id, command string) string {
	t.Helper()
	status, body := asCall(t, d, "call_tool", key, map[string]any{"identity": id,
		"tool_name": "run_shell_command", "arguments": map[string]any{"command": command}})
	if status != 200 {
		t.Fatalf("run_shell_command %q: %d %v", command, status, body)
	}
	res, _ := body["data"].(map[string]any)
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, _ := c.(map[string]any); m["description"] == "stdout" {
			s, _ := m["text"].(string)
			return s
		}
	}
	return ""
}

// TestSecurityAgentscopeStorageOwner: tenant A cannot name tenant B's
// stored workspace as its storage_path — not by B's absolute path, not
// by a relative path climbing out of A's area — so A neither reads B's
// files nor overwrites B's copy when it releases.
func TestSecurityAgentscopeStorageOwner(t *testing.T) {
	storage := filepath.Join(testutil.ShortTempDir(t), "storage")
	d := startDaemon(t, "API_KEYS="+secAliceKey+":alice,"+secBobKey+":bob", "STORAGE_FOLDER="+storage,
		"DEFAULT_SANDBOX_TYPE=base")

	// Bob stores a workspace.
	status, body := asCall(t, d, "create", secBobKey, map[string]any{"sandbox_type": "base"})
	bobID, _ := body["data"].(string)
	if status != 200 || bobID == "" {
		t.Fatalf("bob create: %d %v", status, body)
	}
	asShell(t, d, secBobKey, bobID, "echo bob-secret > /workspace/secret.txt")
	_, body = asCall(t, d, "get_info", secBobKey, map[string]any{"identity": bobID})
	info, _ := body["data"].(map[string]any)
	bobPath, _ := info["storage_path"].(string)
	if bobPath == "" {
		t.Fatalf("bob's sandbox has no storage_path: %v", info)
	}
	if status, body = asCall(t, d, "release", secBobKey, map[string]any{"identity": bobID}); status != 200 || body["data"] != true {
		t.Fatalf("bob release: %d %v", status, body)
	}
	secret := filepath.Join(bobPath, "secret.txt")
	if b, err := os.ReadFile(secret); err != nil || string(b) != "bob-secret\n" {
		t.Fatalf("bob's stored copy: %q %v", b, err)
	}
	rel, err := filepath.Rel(storage, bobPath)
	if err != nil {
		t.Fatal(err)
	}

	// Alice names Bob's copy: absolute, relative to the folder, and
	// climbing out of her own area.
	for _, p := range []string{bobPath, rel, "../" + rel, "../../" + rel, bobPath + "/../" + filepath.Base(bobPath)} {
		status, body := asCall(t, d, "create", secAliceKey, map[string]any{"sandbox_type": "base", "storage_path": p})
		id, _ := body["data"].(string)
		if status != 200 || id == "" {
			t.Logf("alice create with storage_path %q refused: %d %v", p, status, body)
			continue
		}
		if got := asShell(t, d, secAliceKey, id, "cat /workspace/secret.txt 2>/dev/null; true"); strings.Contains(got, "bob-secret") {
			t.Errorf("alice read bob's stored file through storage_path %q", p)
		}
		asShell(t, d, secAliceKey, id, "echo alice-was-here > /workspace/secret.txt; echo x > /workspace/alice.txt")
		if status, body := asCall(t, d, "release", secAliceKey, map[string]any{"identity": id}); status != 200 {
			t.Fatalf("alice release: %d %v", status, body)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "bob-secret\n" {
		t.Errorf("bob's stored copy changed by alice: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(bobPath, "alice.txt")); err == nil {
		t.Errorf("alice's file landed in bob's stored copy")
	}

	// Bob still gets his own copy back by its storage_path.
	status, body = asCall(t, d, "create", secBobKey, map[string]any{"sandbox_type": "base", "storage_path": bobPath})
	id, _ := body["data"].(string)
	if status != 200 || id == "" {
		t.Fatalf("bob restore: %d %v", status, body)
	}
	if got := asShell(t, d, secBobKey, id, "cat /workspace/secret.txt"); got != "bob-secret\n" {
		t.Errorf("bob's restored workspace: %q", got)
	}
	asCall(t, d, "release", secBobKey, map[string]any{"identity": id})
}

// TestSecurityAgentscopeWorkspaceSymlink: the /workspace-only file routes
// and filesystem tools do not follow a symlink out of /workspace, while
// links that stay inside still work.
func TestSecurityAgentscopeWorkspaceSymlink(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+secAliceKey+":alice")
	status, body := asCall(t, d, "create", secAliceKey, map[string]any{"sandbox_type": "filesystem"})
	id, _ := body["data"].(string)
	if status != 200 || id == "" {
		t.Fatalf("create: %d %v", status, body)
	}
	defer asCall(t, d, "release", secAliceKey, map[string]any{"identity": id})
	asShell(t, d, secAliceKey, id, "cd /workspace && ln -s /etc etc && ln -s /home/user home && ln -s /etc/hostname hn && "+
		"mkdir -p d/e && ln -s ../.. d/e/up && ln -s d dl && ln -s ../outside-new dangling && echo in > d/f.txt")

	// Routes: every way out through a link is 403.
	for _, p := range []string{"hn", "etc/hostname", "/workspace/etc/passwd", "d/e/up/etc/hostname", "dl/e/up/hn"} {
		if status, data := d.call(t, "GET", "/proxy/"+id+"/workspace/file?path="+p, secAliceKey, nil); status != 403 {
			t.Errorf("read %s: %d %.80q", p, status, data)
		}
	}
	for _, p := range []string{"etc", "d/e/up/home"} {
		if status, data := d.call(t, "GET", "/proxy/"+id+"/workspace/list?path="+p, secAliceKey, nil); status != 403 {
			t.Errorf("list %s: %d %.80q", p, status, data)
		}
	}
	for _, p := range []string{"home/planted.txt", "dangling", "d/e/up/home/planted2.txt"} {
		if status, data := d.call(t, "PUT", "/proxy/"+id+"/workspace/file?path="+p, secAliceKey, "x"); status != 403 {
			t.Errorf("write %s: %d %.80q", p, status, data)
		}
	}
	if status, data := d.call(t, "POST", "/proxy/"+id+"/workspace/mkdir", secAliceKey, map[string]any{"path": "home/newdir"}); status != 403 {
		t.Errorf("mkdir through a link: %d %s", status, data)
	}
	if status, data := d.call(t, "POST", "/proxy/"+id+"/workspace/move", secAliceKey,
		map[string]any{"source": "d/f.txt", "destination": "home/moved.txt"}); status != 403 {
		t.Errorf("move through a link: %d %s", status, data)
	}
	if got := asShell(t, d, secAliceKey, id, "ls /home/user /outside-new 2>&1; true"); strings.Contains(got, "planted") ||
		strings.Contains(got, "newdir") || strings.Contains(got, "moved") || !strings.Contains(got, "outside-new': No such file") {
		t.Errorf("a route wrote outside /workspace: %q", got)
	}

	// Filesystem tools: the same.
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "hn"}},
		{"read_file", map[string]any{"path": "d/e/up/etc/hostname"}},
		{"write_file", map[string]any{"path": "home/tool.txt", "content": "x"}},
		{"list_directory", map[string]any{"path": "etc"}},
		{"create_directory", map[string]any{"path": "home/tooldir"}},
		{"move_file", map[string]any{"source": "d/f.txt", "destination": "home/toolmoved.txt"}},
	} {
		status, body := asCall(t, d, "call_tool", secAliceKey, map[string]any{"identity": id, "tool_name": tc.tool, "arguments": tc.args})
		res, _ := body["data"].(map[string]any)
		text := fmt.Sprint(res["content"])
		if status != 200 || res["isError"] != true || !strings.Contains(text, "Access denied") {
			t.Errorf("%s %v: %d %.200s", tc.tool, tc.args, status, text)
		}
	}
	if got := asShell(t, d, secAliceKey, id, "ls /home/user"); strings.Contains(got, "tool") {
		t.Errorf("a tool wrote outside /workspace: %q", got)
	}

	// Links that stay inside /workspace keep working; a link itself can
	// be tested for and removed.
	if status, data := d.call(t, "PUT", "/proxy/"+id+"/workspace/file?path=dl/g.txt", secAliceKey, "via link"); status != 200 {
		t.Errorf("write through an inside link: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/proxy/"+id+"/workspace/file?path=d/g.txt", secAliceKey, nil); status != 200 || string(data) != "via link" {
		t.Errorf("read back: %d %q", status, data)
	}
	if status, data := d.call(t, "GET", "/proxy/"+id+"/workspace/exists?path=etc", secAliceKey, nil); status != 200 || !strings.Contains(string(data), "true") {
		t.Errorf("exists of a link: %d %s", status, data)
	}
	if status, data := d.call(t, "DELETE", "/proxy/"+id+"/workspace/entry?path=home", secAliceKey, nil); status != 204 {
		t.Errorf("remove a link: %d %s", status, data)
	}
	if got := asShell(t, d, secAliceKey, id, "test -L /workspace/home || test -d /home/user && echo ok"); got != "ok\n" {
		t.Errorf("removing the link: %q", got)
	}
}

// TestSecurityEgressHostLAN: an egress sandbox cannot reach the networks
// the host is directly connected to, even on public addresses — here the
// test LAN and its gateway — while the internet behind that gateway stays
// reachable; NETWORK_ALLOW_PRIVATE opens the LAN.
func TestSecurityEgressHostLAN(t *testing.T) {
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1"})
	const key = "net-key"
	egress := map[string]any{"network": map[string]any{"mode": "egress"}}
	lan := "http://" + testLANGateway + "/"

	d := networkDaemon(t, inet)
	id := createRaw(t, d, key, egress)
	if got := fetchInSandbox(t, d, key, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
		t.Fatalf("the internet via the gateway: %s", got)
	}
	if got := fetchInSandbox(t, d, key, id, lan); !strings.HasPrefix(got, "ERR") {
		t.Errorf("the host's LAN (gateway %s) reachable: %s", testLANGateway, got)
	}
	d.stop()

	d = networkDaemon(t, inet, "NETWORK_ALLOW_PRIVATE=198.19.77.0/24")
	id = createRaw(t, d, key, egress)
	if got := fetchInSandbox(t, d, key, id, lan); !strings.HasPrefix(got, "OK hello") {
		t.Errorf("the LAN with NETWORK_ALLOW_PRIVATE: %s", got)
	}
}
