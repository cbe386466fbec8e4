//go:build linux && cgo

package usernsholder

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartStopsInNewUserNamespace: the holder is in a user namespace of
// its own, stopped at its exec (it never runs the program: /bin/sh -c
// would otherwise exit at once), and dies with SIGKILL.
func TestStartStopsInNewUserNamespace(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := Start("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { proc.Kill(); proc.Wait() }()
	mine, _ := os.Readlink("/proc/self/ns/user")
	var theirs, state string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		theirs, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/user")
		status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
			}
		}
		if strings.HasPrefix(state, "t") {
			break
		}
	}
	if !strings.HasPrefix(state, "t") {
		t.Fatalf("holder state %q, want stopped by its tracer at the exec", state)
	}
	if theirs == "" || theirs == mine {
		t.Fatalf("holder user namespace %q, the test's %q: want a new one", theirs, mine)
	}
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if !strings.HasSuffix(exe, "sh") && !strings.HasSuffix(exe, "dash") && !strings.HasSuffix(exe, "bash") {
		t.Fatalf("holder executes %q, want /bin/sh", exe)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestStartReportsExecFailure: a program that cannot be executed is an
// error, and no child is left behind.
func TestStartReportsExecFailure(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if pid, err := Start("/nonexistent/agentbox-holder"); err == nil {
		t.Fatalf("started pid %d from a missing program", pid)
	} else if !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("error %v, want the exec's ENOENT", err)
	}
}
