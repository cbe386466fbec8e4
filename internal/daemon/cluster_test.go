package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/config"
)

// With the records in Redis a lock file keeps a second daemon off a data
// dir (bbolt's lock did that before); it is free again once released.
func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir); err == nil {
		t.Fatal("second lock of a data dir succeeded")
	}
	release()
	release2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release2()
}

// The default node id is stable for a data dir and differs between two;
// once chosen it is kept in the data dir, so a new host name (a pod's, at
// every rollout) does not change it.
func TestNodeID(t *testing.T) {
	cfg := &config.Config{}
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := nodeID(cfg, dirA), nodeID(cfg, dirB)
	if a == b || a != nodeID(cfg, dirA) || a == "" {
		t.Fatalf("node ids %q %q", a, b)
	}
	if kept, err := os.ReadFile(filepath.Join(dirA, nodeIDFile)); err != nil || strings.TrimSpace(string(kept)) != a {
		t.Fatalf("kept node id %q, %v; want %q", kept, err, a)
	}
	// What an earlier start on another host name kept wins.
	if err := os.WriteFile(filepath.Join(dirA, nodeIDFile), []byte("agentbox-7d9f-0-1a2b3c4d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := nodeID(cfg, dirA); got != "agentbox-7d9f-0-1a2b3c4d" {
		t.Fatalf("node id after a host name change = %q, want the kept one", got)
	}
	// A data dir that does not exist yet gets the computed id, and nothing is written.
	missing := filepath.Join(dirB, "not-yet")
	if got := nodeID(cfg, missing); got == "" || got == a {
		t.Fatalf("node id of a missing dir = %q", got)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("the missing data dir was made: %v", err)
	}
	cfg.NodeID = "replica-1"
	if got := nodeID(cfg, dirA); got != "replica-1" {
		t.Fatalf("NODE_ID ignored: %q", got)
	}
}
