package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// execIn runs a shell script in sandbox id through the API and returns its
// stdout.
func execIn(t *testing.T, d *daemon, key, id, script string) string {
	t.Helper()
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key,
		map[string]any{"cmd": []string{"/bin/sh", "-c", script}, "timeout": 20})
	if status != 200 {
		t.Fatalf("exec: %d %s", status, data)
	}
	return mustJSON(t, data)["stdout"].(string)
}

// TestSecurityEgressSandboxUserNamespace: a sandbox with networking also
// runs in its own user namespace, mapped to a private host range, and its
// /sys shows its own network namespace, not the host's interfaces.
func TestSecurityEgressSandboxUserNamespace(t *testing.T) {
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1"})
	d := networkDaemon(t, inet)
	const key = "net-key"
	id := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress"}})
	if got := fetchInSandbox(t, d, key, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
		t.Fatalf("egress from a user-namespaced sandbox: %s", got)
	}
	out := execIn(t, d, key, id, "id -u; head -1 /proc/self/uid_map; ls /sys/class/net | tr '\\n' ' '")
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || lines[0] != "1000" {
		t.Fatalf("unexpected output %q", out)
	}
	f := strings.Fields(lines[1])
	if len(f) != 3 || f[0] != "0" || f[2] != "65536" {
		t.Fatalf("uid_map %q: want 0 <host base> 65536", lines[1])
	}
	if base, _ := strconv.ParseUint(f[1], 10, 32); base < 1<<30 {
		t.Fatalf("sandbox ids map to host %d, below the default range", base)
	}
	ifaces := strings.Fields(lines[2])
	bridge := "abxb" + inet.hostIf[len(inet.hostIf)-6:]
	if !contains(ifaces, "lo") || contains(ifaces, bridge) || len(ifaces) > 2 {
		t.Fatalf("/sys/class/net in the sandbox lists %v: want its own interfaces only", ifaces)
	}
}

func ownerOf(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSecurityMountDirOwnedBySandbox: DEFAULT_MOUNT_DIR workspaces belong to
// the sandbox's own host uid (not 1000, not root), the sandbox user can
// write them, and a file the host put there is readable by the daemon.
func TestSecurityMountDirOwnedBySandbox(t *testing.T) {
	mounts := filepath.Join(testutil.ShortTempDir(t), "mounts")
	d := startDaemon(t, "BEARER_TOKEN=k", "DEFAULT_MOUNT_DIR="+mounts)
	id := createRaw(t, d, "k", map[string]any{})
	if out := execIn(t, d, "k", id, "id -u; echo data > /workspace/f && echo ok"); out != "1000\nok\n" {
		t.Fatalf("sandbox user in its mounted workspace: %q", out)
	}
	data, err := os.ReadFile(filepath.Join(mounts, id, "f"))
	if err != nil || string(data) != "data\n" {
		t.Fatalf("host copy of the workspace file: %q %v", data, err)
	}
	uid := ownerOf(t, filepath.Join(mounts, id, "f"))
	if uid < 1<<30 {
		t.Fatalf("workspace file owned by host uid %d, not the sandbox's private range", uid)
	}
	if dirUID := ownerOf(t, filepath.Join(mounts, id)); dirUID != uid {
		t.Fatalf("workspace dir owned by %d, its files by %d", dirUID, uid)
	}
}

// TestSecurityIDRangeRefused: the daemon refuses to start when the sandbox
// id ranges overlap a host account, and says which.
func TestSecurityIDRangeRefused(t *testing.T) {
	testutil.RequireRoot(t)
	daemonBin, agentBin := binaries(t)
	dir := testutil.ShortTempDir(t)
	cmd := execCommand(daemonBin, "serve", "--set", "AGENTBOX_DATA_DIR="+dir, "--set", "AGENT_PATH="+agentBin,
		"--set", "NETWORK=off", "--set", "SANDBOX_ID_BASE=65536", "--set", "SANDBOX_ID_RANGES=1", "--set", fmt.Sprintf("PORT=%d", freePort(t)))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("daemon started with sandbox ids overlapping host accounts")
	}
	if !strings.Contains(string(out), "SANDBOX_ID_BASE") || !strings.Contains(string(out), "overlap") {
		t.Fatalf("error does not explain the overlap: %s", out)
	}
}
