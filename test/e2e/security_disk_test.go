package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecurityDiskAdmission: sparse sandbox disks cannot promise more space
// than the data dir's filesystem has. On a data dir of 1.5 GiB, a 4 GiB
// disk is refused with a clear quota error that leaves nothing behind, and
// so is a second 1 GiB disk once the first one is provisioned.
func TestSecurityDiskAdmission(t *testing.T) {
	testutil.RequireRoot(t)
	dataDir := testutil.ShortTempDir(t)
	// A small filesystem of the test's own as the data dir (tmpfs holds sparse
	// files and backs loop devices). Unmounted after the daemon stopped:
	// cleanups run last-registered first.
	if err := unix.Mount("tmpfs", dataDir, "tmpfs", 0, "size=1536m,mode=0711"); err != nil {
		t.Fatalf("mount a small data dir: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dataDir, 0); err != nil {
			t.Errorf("unmount the test's data dir: %v", err)
			_ = unix.Unmount(dataDir, unix.MNT_DETACH)
		}
	})
	const key = "disk-key"
	d := startDaemon(t, "BEARER_TOKEN="+key, "AGENTBOX_DATA_DIR="+dataDir, "DISK_RESERVE=64M")
	d.dataDir = dataDir // the harness checks this data dir for leftovers

	status, data := d.call(t, "POST", "/v1/sandboxes", key, map[string]any{"resources": map[string]any{"disk": 4 << 30}})
	body := mustJSON(t, data)
	if id, _ := body["id"].(string); id != "" {
		d.call(t, "DELETE", "/v1/sandboxes/"+id, key, nil)
	}
	msg, _ := body["message"].(string)
	if status != 429 || body["code"] != "quota_exceeded" || !strings.Contains(msg, "4.0 GiB") {
		t.Fatalf("4 GiB disk on a 1.5 GiB data dir: %d %s, want 429 quota_exceeded naming the size", status, data)
	}
	t.Logf("refused: %s", msg)
	assertNoDisksLeft(t, dataDir)
	cache, _ := filepath.Glob(filepath.Join(dataDir, "native", "cache", "ext4-4294967296*"))
	if len(cache) > 0 {
		t.Errorf("a refused create left a cached disk template: %v", cache)
	}

	// The default 1 GiB fits once, not twice.
	status, data = d.call(t, "POST", "/v1/sandboxes", key, map[string]any{})
	if status != 201 && status != 200 {
		t.Fatalf("1 GiB disk: %d %s", status, data)
	}
	first, _ := mustJSON(t, data)["id"].(string)
	status, data = d.call(t, "POST", "/v1/sandboxes", key, map[string]any{})
	body = mustJSON(t, data)
	if id, _ := body["id"].(string); id != "" {
		d.call(t, "DELETE", "/v1/sandboxes/"+id, key, nil)
	}
	if status != 429 || body["code"] != "quota_exceeded" {
		t.Errorf("second 1 GiB disk: %d %s, want 429 quota_exceeded", status, data)
	}
	if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+first, key, nil); status >= 300 {
		t.Errorf("delete: %d %s", status, data)
	}
	assertNoDisksLeft(t, dataDir)
}

func assertNoDisksLeft(t *testing.T, dataDir string) {
	t.Helper()
	for _, sub := range []string{"native/disks", "native/state/sb"} {
		entries, _ := os.ReadDir(filepath.Join(dataDir, sub))
		for _, e := range entries {
			t.Errorf("%s left behind: %s", sub, e.Name())
		}
	}
}
