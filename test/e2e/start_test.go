package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// runServe runs `agentbox serve` with settings until it exits, for at most
// a minute, and returns its exit error and output.
func runServe(t *testing.T, env []string, settings ...string) (string, error) {
	t.Helper()
	daemonBin, agentBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, daemonBin, "serve")
	cmd.Env = append(append(env, "AGENT_PATH="+agentBin, "HOST=127.0.0.1", "LOG_LEVEL=debug"), settings...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("serve did not exit within a minute:\n%s", out)
	}
	return string(out), err
}

// TestFailedStartLeavesNothing: a serve whose port is taken fails after
// its backend and sandbox network are up; it says why and leaves no mount
// under the data dir, no cgroup, no bridge, no nftables table, and the
// data dir starts again.
func TestFailedStartLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	dataDir := testutil.ShortTempDir(t)
	out, err := runServe(t, cleanEnv(), "AGENTBOX_DATA_DIR="+dataDir, fmt.Sprintf("PORT=%d", port), "NETWORK=on")
	if err == nil || !strings.Contains(out, "listen: listen tcp 127.0.0.1:"+fmt.Sprint(port)+": bind: address already in use") {
		t.Fatalf("serve on a taken port: %v\n%s", err, out)
	}
	// It got as far as the network (and the backend before the listener).
	m := networkReadyLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no network came up before the listener:\n%s", out)
	}
	assertNoLeftovers(t, dataDir)
	assertBridgeGone(t, m[1])
	// The data dir serves on a free port.
	startDaemonIn(t, dataDir)
}

// TestServeRefusesMissingRequirement: a host without something the native
// backend needs (mkfs.ext4, out of PATH here) is refused at start with
// agentbox doctor's words and fix, before anything is set up; the fake
// path (no native backend) is not checked.
func TestServeRefusesMissingRequirement(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 is not installed here")
	}
	// PATH without mkfs.ext4 (the test's own tools dir only).
	bin := t.TempDir()
	var env []string
	for _, kv := range cleanEnv() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin)
	dataDir := testutil.ShortTempDir(t)
	out, err := runServe(t, env, "AGENTBOX_DATA_DIR="+dataDir, fmt.Sprintf("PORT=%d", freePort(t)))
	if err == nil {
		t.Fatalf("serve started without mkfs.ext4:\n%s", out)
	}
	want := "a host requirement is missing (agentbox doctor shows every check):\n  mkfs.ext4: mkfs.ext4 is not in PATH: it formats the sandboxes' disk images — fix: apt install e2fsprogs"
	if !strings.Contains(out, want) {
		t.Fatalf("serve's error lacks doctor's words %q:\n%s", want, out)
	}
	if regexp.MustCompile(`sandbox network ready|agentbox serving`).MatchString(out) {
		t.Errorf("serve set things up before refusing:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "native")); !os.IsNotExist(err) {
		t.Errorf("the native backend's state dir was made (%v)", err)
	}
	assertNoLeftovers(t, dataDir)
}
