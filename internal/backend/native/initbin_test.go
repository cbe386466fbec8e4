package native

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

const sealedInitLink = "/memfd:runc_cloned:agentbox-init (deleted)"

// TestSandboxInitBinary checks which binary each sandbox's init runs from:
// the sealed in-memory agentbox-init next to the agent (package fastinit),
// or, when there is none or it does not match the daemon's libcontainer,
// the daemon binary as before. In every case the sandbox starts, and
// neither the init nor the agent keeps a descriptor of the binary.
func TestSandboxInitBinary(t *testing.T) {
	testutil.RequireRoot(t)
	agent := testutil.AgentBinary(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(agent), initBinaryName)); err != nil {
		t.Fatalf("%s is not next to the agent %s (make build builds both): %v", initBinaryName, agent, err)
	}
	t.Run("AgentboxInit", func(t *testing.T) {
		exe := initExeOfSandbox(t, agent)
		if exe != sealedInitLink {
			t.Errorf("the sandbox's init ran from %q, want %q", exe, sealedInitLink)
		}
	})
	t.Run("NoneNextToAgent", func(t *testing.T) {
		exe := initExeOfSandbox(t, agentCopy(t, ""))
		if exe == sealedInitLink || !strings.HasPrefix(exe, "/memfd:runc_cloned:") {
			t.Errorf("without agentbox-init the init ran from %q, want the daemon's sealed copy", exe)
		}
	})
	t.Run("NotBuiltWithLibcontainer", func(t *testing.T) {
		// A binary that is not agentbox-init (here: the agent itself) is
		// refused by its module versions, not run.
		exe := initExeOfSandbox(t, agentCopy(t, agent))
		if exe == sealedInitLink {
			t.Errorf("a foreign %s was used as the init", initBinaryName)
		}
	})
}

// initExeOfSandbox creates a sandbox with the agent at agentPath and
// returns the link of its init's /proc/<pid>/exe, read while the init
// waits to execute the agent. It fails the test when the init or the
// running agent holds a descriptor of a sealed init binary.
func initExeOfSandbox(t *testing.T, agentPath string) string {
	t.Helper()
	be, err := New(Config{Root: testutil.ShortTempDir(t), AgentPath: agentPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	var (
		mu  sync.Mutex
		exe string
	)
	initStartedHook = func(pid int) {
		link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil {
			t.Errorf("init's exe: %v", err)
		}
		checkNoInitFd(t, "the init", pid)
		mu.Lock()
		exe = link
		mu.Unlock()
	}
	t.Cleanup(func() { initStartedHook = nil })
	ctx := context.Background()
	id := sandbox.NewID()
	info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Destroy(ctx, id)
	checkNoInitFd(t, "the agent", info.Pid)
	mu.Lock()
	defer mu.Unlock()
	if exe == "" {
		t.Fatal("the init was never seen")
	}
	return exe
}

func checkNoInitFd(t *testing.T, who string, pid int) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		link, _ := os.Readlink(filepath.Join(dir, e.Name()))
		if strings.Contains(link, initBinaryName) {
			t.Errorf("%s holds fd %s -> %s", who, e.Name(), link)
		}
	}
}

// agentCopy copies the agent into a directory of its own, with a copy of
// init (if not empty) as agentbox-init next to it.
func agentCopy(t *testing.T, init string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentbox-init-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Sandboxes' mapped uids reach the agent's bind-mount source through it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "agentbox-agent")
	if err := copyFile(testutil.AgentBinary(t), dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if init != "" {
		if err := copyFile(init, filepath.Join(dir, initBinaryName), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
