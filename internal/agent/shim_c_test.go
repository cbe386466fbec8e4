package agent_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestShimRunsTheCommand: with agentbox-shim, every command's parent is
// agentbox-shim, none is started ahead of need (an idle agent has no
// child), and after a command one idle shim is kept for the next.
func TestShimRunsTheCommand(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	if kids := childrenOf(a.Pid()); len(kids) != 0 {
		t.Fatalf("an idle agent has children %v: a shim was started ahead of need", kids)
	}
	for i := range 2 {
		var out strings.Builder
		if _, err := c.Run(testCtx(t), sh(`cat /proc/$PPID/comm`), nil, &out, nil); err != nil {
			t.Fatal(err)
		}
		if out.String() != "agentbox-shim\n" {
			t.Fatalf("command %d: parent %q, want agentbox-shim", i, out.String())
		}
	}
	if kids := childrenOf(a.Pid()); len(kids) != 1 {
		t.Fatalf("after two commands the agent has children %v, want one idle shim", kids)
	}
}

// childrenOf lists the children of every thread of pid.
func childrenOf(pid int) []string {
	var out []string
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, tk := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, tk.Name()))
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// TestShimRefusesMalformedRequests talks to agentbox-shim directly: a
// request whose counts or strings do not fit its size, or that comes
// without its descriptors, ends the shim (exit 127) before anything is
// started, and a well-formed one runs.
func TestShimRefusesMalformedRequests(t *testing.T) {
	shim := testutil.ShimBinary(t)
	le := binary.LittleEndian
	header := func(argc, envc, ngroups uint32) []byte {
		b := make([]byte, 24)
		b[0] = 1
		le.PutUint32(b[12:], ngroups)
		le.PutUint32(b[16:], argc)
		le.PutUint32(b[20:], envc)
		return b
	}
	strs := func(b []byte, s ...string) []byte {
		for _, x := range s {
			b = append(append(b, x...), 0)
		}
		return b
	}
	marker := t.TempDir() + "/ran"
	good := strs(header(3, 0, 0), "/bin/sh", "/", "sh", "-c", "echo > "+marker)
	for _, c := range []struct {
		name  string
		body  []byte
		fds   bool
		works bool
	}{
		{"well formed", good, true, true},
		{"no descriptors", good, false, false},
		{"bad version", append([]byte{9}, good[1:]...), true, false},
		{"argc past the end", strs(header(50, 0, 0), "/bin/sh", "/", "sh"), true, false},
		{"huge argc", strs(header(1<<30, 0, 0), "/bin/sh", "/", "sh"), true, false},
		{"huge group count", strs(header(1, 0, 1<<31), "/bin/sh", "/", "sh"), true, false},
		{"no argv", strs(header(0, 0, 0), "/bin/sh", "/"), true, false},
		{"unterminated string", append(strs(header(1, 0, 0), "/bin/sh", "/"), "sh"...), true, false},
		{"trailing bytes", append(strs(header(1, 0, 0), "/bin/true", "/", "true"), 'x', 0), true, false},
		{"short", []byte{1, 0, 0}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(marker)
			fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			ours := os.NewFile(uintptr(fds[0]), "agent")
			theirs := os.NewFile(uintptr(fds[1]), "shim")
			defer ours.Close()
			cmd := exec.Command(shim)
			cmd.ExtraFiles = []*os.File{theirs}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			theirs.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			hdr := make([]byte, 4)
			le.PutUint32(hdr, uint32(len(c.body)))
			var rights []byte
			if c.fds {
				null, err := os.Open(os.DevNull)
				if err != nil {
					t.Fatal(err)
				}
				defer null.Close()
				n := int(null.Fd())
				rights = syscall.UnixRights(n, n, n)
			}
			conn := ours
			if err := syscall.Sendmsg(int(conn.Fd()), hdr, rights, nil, 0); err != nil {
				t.Fatal(err)
			}
			_, _ = conn.Write(c.body)
			if c.works {
				ans := make([]byte, 8)
				if _, err := conn.Read(ans); err != nil || le.Uint32(ans) == 0 {
					t.Fatalf("pid report %v, %v", ans, err)
				}
				st := make([]byte, 5)
				if _, err := conn.Read(st); err != nil || le.Uint32(st) != 0 {
					t.Fatalf("status %v, %v", st, err)
				}
				if _, err := os.Stat(marker); err != nil {
					t.Fatalf("the command did not run: %v", err)
				}
				conn.Close() // an idle shim let go of ends
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("shim exit: %v", err)
					}
				case <-time.After(10 * time.Second):
					cmd.Process.Kill()
					t.Fatal("shim did not end when the agent let go")
				}
				return
			}
			select {
			case err := <-done:
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 127 {
					t.Fatalf("shim ended with %v, want exit 127", err)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatal("the shim waited on a malformed request")
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("a malformed request started the command")
			}
		})
	}
}
