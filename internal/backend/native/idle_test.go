package native

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestIdleSandboxesHoldNoThread checks that a running sandbox costs the
// daemon no OS thread: waiting for its init to exit parks a goroutine on
// the netpoller instead of a thread in waitid(2). With a thread each, 2,000
// idle sandboxes meant 2,000 daemon threads. The wait must still see the
// exit: killing an init is reported as a stopped sandbox.
func TestIdleSandboxesHoldNoThread(t *testing.T) {
	be := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := context.Background()
	const count = 8
	before := threads(t)
	var ids []sandbox.ID
	for i := 0; i < count; i++ {
		id := sandbox.NewID()
		if _, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	defer func() {
		for _, id := range ids {
			be.Destroy(ctx, id)
		}
	}()
	if grown := threads(t) - before; grown >= count {
		t.Errorf("%d idle sandboxes added %d OS threads to the daemon", count, grown)
	}
	// The netpoller wait still notices an init that dies.
	info, err := be.Inspect(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan string, 1)
	be.OnAgentExit(func(id sandbox.ID, reason string) {
		if id == ids[0] {
			exited <- reason
		}
	})
	p, err := os.FindProcess(info.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if reason := <-exited; !strings.Contains(reason, "agent exited") {
		t.Errorf("exit reason %q", reason)
	}
	if info, _ := be.Inspect(ctx, ids[0]); info.State != sandbox.StateStopped {
		t.Errorf("state after the init was killed: %s", info.State)
	}
}

func threads(t *testing.T) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads: in /proc/self/status")
	return 0
}

// TestParallelCreateDestroy runs creates and destroys side by side, as a
// busy pool or an RL run does: a loop device one sandbox's teardown just
// released is handed to the next create while the kernel may still hold
// the old filesystem's claim on it (mount: EBUSY for a moment). Every
// create must succeed and leave nothing behind.
func TestParallelCreateDestroy(t *testing.T) {
	dir := testutil.ShortTempDir(t)
	be := newTestBackend(t, dir)
	ctx := context.Background()
	const workers, cycles = 8, 4
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := 0; i < cycles; i++ {
				id := sandbox.NewID()
				if _, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
					errs <- err
					return
				}
				if err := be.Destroy(ctx, id); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// Sandbox disks are named <id>.img; the cached templates live apart.
	left, _ := filepath.Glob(filepath.Join(dir, "disks", "*.img"))
	for _, p := range left {
		if sandbox.ID(strings.TrimSuffix(filepath.Base(p), ".img")).Validate() == nil {
			t.Errorf("disk left behind: %s", p)
		}
	}
}
