package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShimHasChildren checks the one-syscall probe the shim uses to decide
// whether it can be reused against the /proc listing it replaced, with a
// running child, a stopped one, an unreaped zombie and none.
func TestShimHasChildren(t *testing.T) {
	agree := func(state string, want bool) {
		t.Helper()
		listed := len(shimChildren()) > 0
		if got := shimHasChildren(); got != listed || got != want {
			t.Errorf("%s: shimHasChildren() = %v, /proc lists children: %v, want %v", state, got, listed, want)
		}
	}
	if len(shimChildren()) > 0 {
		t.Skip("the test process has children of other tests")
	}
	agree("no children", false)

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	agree("running child", true)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	agree("stopped child", true)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	// A zombie until waited for: still a child.
	var zombie bool
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, err := procState(cmd.Process.Pid); err == nil && st == 'Z' {
			zombie = true
			break
		}
	}
	if !zombie {
		t.Fatal("the killed child did not become a zombie within 10s")
	}
	agree("zombie child", true)
	_ = cmd.Wait()
	agree("child reaped", false)
}

// procState is the state letter of pid in /proc/pid/stat.
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	return s[i+2], nil
}
