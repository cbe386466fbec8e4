// Package agenttest runs the real agentbox-agent binary for tests: it
// builds it once per test binary (CGO_ENABLED=0, like production) and
// starts it on a unix socket in a private directory.
package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/testutil"
)

// Binary returns the path of the agent binary under test: the one the
// Makefile built (AGENTBOX_AGENT_PATH) or one built once per test binary.
func Binary(tb testing.TB) string { return testutil.AgentBinary(tb) }

// Cleanup removes a binary Binary built; call it from TestMain after m.Run.
func Cleanup() { testutil.Cleanup() }

// Options configure a test agent.
type Options struct {
	Token      string              // AGENTBOX_ACCESS_TOKEN
	Env        []string            // extra environment (KEY=VALUE)
	Workdir    string              // --workdir; default: a fresh directory
	Credential *syscall.Credential // run the agent as another user
	User       string              // --user UID:GID: who requests naming no user act as
	LogLevel   string              // --log-level; default debug
	// PIDNamespace runs the agent as PID 1 of a new PID namespace (via
	// unshare(1); needs root), like in a real sandbox.
	PIDNamespace bool
	// ListenAlso is --listen-also (tcp://HOST:PORT), a second listener
	// as on an agentbox node's pod IP.
	ListenAlso string
	// GoShim starts commands below the agent's own binary as exec shim
	// (the fallback where agentbox-shim is not mounted) instead of
	// agentbox-shim, as the backends run it.
	GoShim bool
}

// Shims are the two exec shims, for tests that run against each: "c" is
// agentbox-shim, "go" the agent's own fallback.
var Shims = []struct {
	Name string
	Go   bool
}{{"c", false}, {"go", true}}

// Agent is a running agent subprocess.
type Agent struct {
	Dir      string // private, world-accessible directory holding the socket
	Socket   string
	Workdir  string
	Endpoint agentclient.Endpoint
	Cmd      *exec.Cmd
	Stderr   *SyncBuffer
	pid      int // the agent's pid as seen from the test
	pid1     bool
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type SyncBuffer = testutil.SyncBuffer

// Pid returns the agent's process id (as seen from the test, also when
// the agent is PID 1 of its own namespace).
func (a *Agent) Pid() int { return a.pid }

// Client returns a client for the agent, closed at the end of the test.
func (a *Agent) Client(tb testing.TB, token string) *agentclient.Client {
	c := agentclient.New(a.Endpoint, token)
	tb.Cleanup(func() { c.Close() })
	return c
}

// Start builds (once) and starts an agent; it is stopped with SIGTERM
// (which makes it terminate its children) when the test ends.
func Start(tb testing.TB, opts Options) *Agent {
	tb.Helper()
	bin := Binary(tb)
	dir, err := os.MkdirTemp("", "agentbox-agent-test-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	a := &Agent{Dir: dir, Socket: filepath.Join(dir, "agent.sock"), Workdir: opts.Workdir, Stderr: &SyncBuffer{}, pid1: opts.PIDNamespace}
	if a.Workdir == "" {
		a.Workdir = filepath.Join(dir, "workspace")
		if err := os.Mkdir(a.Workdir, 0o777); err != nil {
			tb.Fatal(err)
		}
		// World-writable (the umask narrowed it) so agents and users other
		// than root can work there.
		if err := os.Chmod(a.Workdir, 0o777); err != nil {
			tb.Fatal(err)
		}
	}
	a.Endpoint = agentclient.Endpoint{Network: "unix", Address: a.Socket}

	ready, readyW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	defer ready.Close()
	level := opts.LogLevel
	if level == "" {
		level = "debug"
	}
	args := []string{bin, "--listen", "unix://" + a.Socket, "--workdir", a.Workdir, "--ready-fd", "3", "--log-level", level}
	if opts.ListenAlso != "" {
		args = append(args, "--listen-also", opts.ListenAlso)
	}
	if opts.User != "" {
		args = append(args, "--user", opts.User)
	}
	if !opts.GoShim {
		args = append(args, "--shim", testutil.ShimBinary(tb))
	}
	if opts.PIDNamespace {
		args = append([]string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), opts.Env...)
	if opts.Token != "" {
		cmd.Env = append(cmd.Env, "AGENTBOX_ACCESS_TOKEN="+opts.Token)
	}
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.Stderr = a.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: opts.Credential, Setpgid: true}
	if err := cmd.Start(); err != nil {
		readyW.Close()
		tb.Fatal(err)
	}
	readyW.Close()
	a.Cmd = cmd
	a.pid = cmd.Process.Pid
	tb.Cleanup(func() { a.Stop(tb) })

	got := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := ready.Read(b)
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			tb.Fatalf("agent did not signal readiness: %v\n%s", err, a.Stderr.String())
		}
	case <-time.After(10 * time.Second):
		tb.Fatalf("agent not ready after 10s\n%s", a.Stderr.String())
	}
	if opts.PIDNamespace {
		// The agent is unshare's only child.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", a.pid, a.pid))
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := fmt.Sscan(string(b), &a.pid); err != nil {
			tb.Fatalf("agent pid from %q: %v", b, err)
		}
	}
	return a
}

// Stop terminates the agent (SIGTERM, then SIGKILL of its whole process
// group after 5s) and waits for it. As PID 1 the agent ignores every
// signal but SIGKILL, which is what the backend sends too, and its
// namespace dies with it.
func (a *Agent) Stop(tb testing.TB) {
	if a.Cmd == nil || a.Cmd.ProcessState != nil {
		return
	}
	sig := syscall.SIGTERM
	if a.pid1 {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(a.pid, sig)
	done := make(chan struct{})
	go func() { _ = a.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		tb.Errorf("agent ignored SIGTERM for 5s; killing it\n%s", a.Stderr.String())
		_ = syscall.Kill(-a.Cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
