package native

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

const crashChildEnv = "AGENTBOX_TEST_CRASH_CHILD"

// crashChild is a stand-in daemon: it creates sandboxes, reports their ids
// on stdout and waits to be SIGKILLed by TestCrashRecovery.
func crashChild() {
	dir, agent := os.Getenv(crashChildEnv), os.Getenv("AGENTBOX_AGENT_PATH")
	b, err := New(Config{Root: dir, AgentPath: agent})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	ctx := context.Background()
	var ids []sandbox.ID
	for i := 0; i < 3; i++ {
		id := sandbox.NewID()
		if _, err := b.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		ids = append(ids, id)
	}
	if err := b.Stop(ctx, ids[2]); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	out, _ := json.Marshal(ids)
	fmt.Println("READY", string(out))
	select {}
}

func TestCrashRecovery(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.ShortTempDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, "AGENTBOX_AGENT_PATH="+testutil.AgentBinary(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []sandbox.ID
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line := <-lines:
		rest, ok := strings.CutPrefix(line, "READY ")
		if !ok || json.Unmarshal([]byte(rest), &ids) != nil {
			cmd.Process.Kill()
			t.Fatalf("crash child: %q", line)
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("crash child did not get ready")
	}
	// The daemon dies without any chance to clean up.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Leftovers of a create that crashed half-way, and of one that never
	// wrote its record.
	halfID := sandbox.NewID()
	halfDir := filepath.Join(dir, "state", "sb", string(halfID))
	if err := os.MkdirAll(filepath.Join(halfDir, "disk"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", filepath.Join(halfDir, "disk"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	orphanCgroup := filepath.Join("/sys/fs/cgroup/pids", cgroupParentFor(dir), string(sandbox.NewID()))
	if !isCgroup2() {
		if err := os.MkdirAll(orphanCgroup, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	b := newTestBackend(t, dir)
	infos, err := b.Recover(ctxT(t))
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	states := map[sandbox.ID]sandbox.State{}
	for _, in := range infos {
		states[in.ID] = in.State
	}
	if states[ids[0]] != sandbox.StateRunning || states[ids[1]] != sandbox.StateRunning || states[ids[2]] != sandbox.StateStopped {
		t.Fatalf("recovered states = %v, want %s,%s running and %s stopped", states, ids[0], ids[1], ids[2])
	}
	if _, ok := states[halfID]; ok {
		t.Fatalf("half-created sandbox was recovered: %v", states)
	}
	if _, err := os.Stat(halfDir); !os.IsNotExist(err) {
		t.Fatalf("half-created sandbox dir left: %v", err)
	}
	if _, err := os.Stat(orphanCgroup); !isCgroup2() && !os.IsNotExist(err) {
		t.Fatalf("orphan cgroup left: %v", err)
	}
	for _, id := range ids[:2] {
		info, err := b.Inspect(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if r := backendtest.Exec(t, backendtest.Client(t, info, ""), "echo survived"); r.Stdout != "survived\n" {
			t.Fatalf("recovered sandbox %s: %+v", id, r)
		}
	}
	// A recovered sandbox whose agent dies is noticed (pidfd watch).
	info, _ := b.Inspect(ctxT(t), ids[1])
	if err := unix.Kill(info.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		in, err := b.Inspect(context.Background(), ids[1])
		return err == nil && in.State == sandbox.StateStopped
	})

	for _, id := range ids {
		if err := b.Destroy(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, dir, ids...)
}

// assertNothingLeft checks that no sandbox of the backend at dir left a
// mount, container state or a directory behind, and that the given
// sandboxes left no cgroup.
func assertNothingLeft(t *testing.T, dir string, ids ...sandbox.ID) {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		t.Errorf("mount left: %s", m.Mountpoint)
	}
	for _, sub := range []string{"state/sb", "state/libcontainer", "disks"} {
		if entries, _ := os.ReadDir(filepath.Join(dir, sub)); len(entries) > 0 {
			t.Errorf("%s left: %d entries", sub, len(entries))
		}
	}
	for _, root := range (&Backend{cgroupParent: cgroupParentFor(dir)}).cgroupHierarchyRoots() {
		for _, id := range ids {
			if _, err := os.Stat(filepath.Join(root, string(id))); err == nil {
				t.Errorf("cgroup left: %s/%s", root, id)
			}
		}
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
