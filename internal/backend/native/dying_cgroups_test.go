package native

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestTeardownLeavesNoDyingCgroups: a destroyed sandbox's memory cgroup
// goes with it. Before teardown reclaimed the page cache charged to it,
// the kernel kept a removed sandbox's memory cgroup alive ("dying") for as
// long as those pages stayed cached: about one per three `agentbox run`s,
// 333 of them after a 30-minute soak, and the service slowed as they piled
// up. Over many create/exec/destroy cycles the count of dying memory
// cgroups (the kernel's count minus the directories that exist) must not
// grow with the cycles (the short form, in make test, of a long soak).
func TestTeardownLeavesNoDyingCgroups(t *testing.T) {
	dir := testutil.ShortTempDir(t)
	be := newTestBackend(t, dir)
	ctx := context.Background()
	// A file no one has read since its cache was dropped: the sandbox's
	// read charges its pages to the sandbox's memory cgroup, as reading a
	// template's files does. One per cycle, so every cycle charges pages.
	data := testutil.ShortTempDir(t)
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	uncached := func(name string) {
		t.Helper()
		p := filepath.Join(data, name)
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_ = f.Sync()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
	}
	// charge creates a sandbox on b that reads a fresh file.
	charge := func(b *Backend, i int) sandbox.ID {
		t.Helper()
		id := sandbox.NewID()
		name := fmt.Sprintf("f%d", i)
		uncached(name)
		// The limits `agentbox run` gives: a disk of its own, memory, tmp.
		info, err := b.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), Resources: sandbox.Resources{
			MemoryBytes: 512 << 20, CPUs: 1, PIDs: 256, DiskBytes: 1 << 30, TmpBytes: 64 << 20},
			Mounts: []sandbox.Mount{{Source: data, Target: "/data", ReadOnly: true}}})
		if err != nil {
			t.Fatal(err)
		}
		c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
		res, err := backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "cat /data/" + name + " >/dev/null"}})
		if err != nil || res.Exit.ExitCode != 0 {
			b.Destroy(ctx, id)
			t.Fatalf("sandbox %d: exec: %v %+v", i, err, res)
		}
		return id
	}
	const cycles = 60
	settle()
	before := dyingMemoryCgroups(t)
	for i := 0; i < cycles; i++ {
		if err := be.Destroy(ctx, charge(be, i)); err != nil {
			t.Fatalf("cycle %d: destroy: %v", i, err)
		}
	}
	settle()
	after := dyingMemoryCgroups(t)
	t.Logf("dying memory cgroups: %d before, %d after %d cycles", before, after, cycles)
	// Other processes on the host may remove cgroups meanwhile; a leak of
	// even one in ten cycles is well past that.
	if grown := after - before; grown > cycles/10 {
		t.Errorf("%d create/destroy cycles left %d more dying memory cgroups (%d → %d)", cycles, grown, before, after)
	}

	// Sandboxes reattached by a restarted daemon: their destroy has no
	// exit to wait for, so the reclaim must wait for the killed tasks.
	const kept = 10
	var ids []sandbox.ID
	for i := 0; i < kept; i++ {
		ids = append(ids, charge(be, cycles+i))
	}
	// The daemon stops (its sandboxes left running, its descriptors
	// closed as its process's would be) and a new one takes over.
	be.abandoned.Store(true)
	for _, id := range ids {
		bx, err := be.lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		bx.mu.Lock()
		bx.closeDisk()
		bx.mu.Unlock()
	}
	b2 := newTestBackend(t, dir)
	if _, err := b2.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	settle()
	before = dyingMemoryCgroups(t)
	for _, id := range ids {
		if err := b2.Destroy(ctx, id); err != nil {
			t.Fatalf("destroy %s after the restart: %v", id, err)
		}
	}
	settle()
	after = dyingMemoryCgroups(t)
	t.Logf("dying memory cgroups: %d before, %d after destroying %d reattached sandboxes", before, after, kept)
	if grown := after - before; grown > kept/10 {
		t.Errorf("destroying %d reattached sandboxes left %d more dying memory cgroups (%d → %d)", kept, grown, before, after)
	}
}

// settle gives cgroups whose last references are going a moment to go: a
// removal completes asynchronously (RCU), so a count taken at once would
// include cgroups that die cleanly a few milliseconds later.
func settle() { time.Sleep(500 * time.Millisecond) }

// dyingMemoryCgroups is the memory controller's cgroup count in
// /proc/cgroups (which includes removed cgroups not yet freed) minus the
// cgroup directories that exist for it.
func dyingMemoryCgroups(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/cgroups")
	if err != nil {
		t.Skipf("no /proc/cgroups: %v", err)
	}
	defer f.Close()
	counted := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[0] == "memory" {
			counted, _ = strconv.Atoi(fields[2])
		}
	}
	if counted < 0 {
		t.Skip("no memory controller in /proc/cgroups")
	}
	root := "/sys/fs/cgroup/memory"
	if isCgroup2() {
		root = "/sys/fs/cgroup"
	}
	dirs := 0
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs++
		}
		return nil
	})
	return counted - dirs
}
