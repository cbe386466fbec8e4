package e2e

import (
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
