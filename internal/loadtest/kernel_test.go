package loadtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestRemovedSandboxCgroupKiB: page cache charged to a removed cgroup
// below agentbox's is counted, and no longer once the parent is reclaimed.
// A child cgroup reads a file nobody has cached, exits and is removed
// without a reclaim — as a sandbox's was before teardown reclaimed it —
// so its pages keep it dying; force_empty (v1) or memory.reclaim (v2) on
// the task-free parent reaches the removed child's pages too.
func TestRemovedSandboxCgroupKiB(t *testing.T) {
	testutil.RequireRoot(t)
	root := agentboxMemoryCgroup()
	if _, err := os.Stat(filepath.Dir(root)); err != nil {
		t.Skipf("no memory cgroup hierarchy: %v", err)
	}
	made := false
	if _, err := os.Stat(root); os.IsNotExist(err) {
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		made = true
	}
	parent := filepath.Join(root, fmt.Sprintf("t%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reclaimCgroup(parent)
		if err := os.Remove(parent); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
		if made {
			_ = os.Remove(root)
		}
	})
	if occgroups.IsCgroup2UnifiedMode() {
		for _, dir := range []string{filepath.Dir(root), root, parent} {
			// Already on for agentbox's own cgroups; needed for a fresh one.
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0)
		}
	}
	child := filepath.Join(parent, "child")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}

	const size = 16 << 20
	const most = size / 1024 * 3 / 4 // KiB
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	f.Close()

	before := removedSandboxCgroupKiB()
	if before < 0 {
		t.Fatal("/proc/kpagecgroup or /proc/kpageflags unreadable as root")
	}
	// The shell moves itself into the child, then reads the file there.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec cat "$2" >/dev/null`, "sh", child, file)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("read in the child cgroup: %v: %s", err, out)
	}
	if err := os.Remove(child); err != nil {
		t.Fatalf("remove the child cgroup: %v", err)
	}
	held := removedSandboxCgroupKiB()
	t.Logf("held by removed sandbox cgroups: %d KiB before, %d KiB after the child read %d KiB and was removed", before, held, size>>10)
	// Other agentbox cgroups on the machine may free pages meanwhile, not
	// 12 MiB of them in this moment.
	if held-before < most {
		t.Fatalf("held %d KiB more after a removed cgroup read %d KiB; want most of it", held-before, size>>10)
	}

	reclaimCgroup(parent)
	deadline := time.Now().Add(5 * time.Second)
	after := removedSandboxCgroupKiB()
	for ; held-after < most && time.Now().Before(deadline); after = removedSandboxCgroupKiB() {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after reclaiming the parent: %d KiB", after)
	if held-after < most {
		t.Errorf("reclaiming the parent left %d KiB of %d held", after, held)
	}
}

// reclaimCgroup empties a task-free memory cgroup of what it can.
func reclaimCgroup(dir string) {
	if occgroups.IsCgroup2UnifiedMode() {
		_ = os.WriteFile(filepath.Join(dir, "memory.reclaim"), []byte("1G"), 0)
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "memory.force_empty"), []byte("0"), 0)
}
