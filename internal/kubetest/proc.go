package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one control-plane process, its output in <dir>/<name>.log.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done closes
}

func startProc(dir, name, bin string, args []string, env []string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so Stop reaches any child; killed with the test
	// process if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// The parent-death signal fires when the *thread* that forked the child
// ends, not the process. Go ends threads whose goroutine locked them and
// returned (the sandbox code does, after entering namespaces), so every
// control-plane process is forked from one thread that is locked for the
// life of the test binary and never ends.
var (
	spawnOnce sync.Once
	spawnReq  chan spawnCall
)

type spawnCall struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReq = make(chan spawnCall)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives on
			for c := range spawnReq {
				c.done <- c.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReq <- spawnCall{cmd: cmd, done: done}
	return <-done
}

// exited reports whether the process has ended, with its error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop ends the process: SIGTERM to its group, SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if done, _ := p.exited(); done {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// routineLogLines mark log lines that say nothing about a failure: the
// apiserver's cache and client chatter, the scheduler's configuration dump.
var routineLogLines = [][]byte{
	[]byte("addrConn.createTransport failed"),
	[]byte("cacher.go:"),
	[]byte("handler.go:"),
	[]byte("reflector.go:"),
	[]byte("quota admission added evaluator"),
}

// tail returns the last n lines of the process's log that are not
// routine.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	kept := make([][]byte, 0, n)
	for i := len(lines) - 1; i >= 0 && len(kept) < n; i-- {
		if !isRoutine(lines[i]) {
			kept = append(kept, lines[i])
		}
	}
	slices.Reverse(kept)
	return string(bytes.Join(kept, []byte("\n")))
}

func isRoutine(line []byte) bool {
	// A multi-line configuration dump's indented body.
	if len(line) > 0 && (line[0] == '\t' || line[0] == ' ') {
		return true
	}
	for _, r := range routineLogLines {
		if bytes.Contains(line, r) {
			return true
		}
	}
	return false
}

// errExited is returned while waiting on a process that has ended.
var errExited = errors.New("exited")

// waitFor polls ready until it succeeds, the process exits or the timeout
// passes; the error carries the log's tail.
func (p *proc) waitFor(timeout time.Duration, what string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if done, err := p.exited(); done {
			return fmt.Errorf("kubetest: %s %w (%v) before %s:\n%s", p.name, errExited, err, what, p.tail(30))
		}
		if last = ready(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: %s not %s after %s: %v\n%s", p.name, what, timeout, last, p.tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePorts returns n distinct loopback ports free at the time of the call.
// Another process may take one before ours binds it: callers retry a
// start-up that fails with the port in use.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kubetest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portInUse reports whether a process's log says it could not bind.
func portInUse(p *proc) bool {
	t := p.tail(50)
	return strings.Contains(t, "address already in use")
}
