package daemon

import (
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

// The default node id is stable for a data dir and differs between two.
func TestNodeID(t *testing.T) {
	cfg := &config.Config{}
	a, b := nodeID(cfg, "/var/lib/a"), nodeID(cfg, "/var/lib/b")
	if a == b || a != nodeID(cfg, "/var/lib/a") || a == "" {
		t.Fatalf("node ids %q %q", a, b)
	}
	cfg.NodeID = "replica-1"
	if got := nodeID(cfg, "/var/lib/a"); got != "replica-1" {
		t.Fatalf("NODE_ID ignored: %q", got)
	}
}
