package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/codeinterp"
)

// codeHost gives package codeinterp the agent's users, environment and
// reaper-safe process creation.
type codeHost struct {
	s *Server
}

var _ codeinterp.Host = (*codeHost)(nil)

func newCodeHost(s *Server) *codeHost {
	return &codeHost{s: s}
}

// Resolve implements codeinterp.Host.
func (h *codeHost) Resolve(user, cwd string) (string, string, error) {
	u, err := h.s.resolveUser(user)
	if err != nil {
		return "", "", err
	}
	var dir string
	if cwd == "" {
		dir, err = h.s.processDir(u, nil)
	} else {
		dir, err = u.resolvePath(cwd)
	}
	if err != nil {
		return "", "", err
	}
	if err := u.do(func() error { return checkDir(dir) }); err != nil {
		return "", "", err
	}
	return u.Name, dir, nil
}

// Env implements codeinterp.Host.
func (h *codeHost) Env(user string) (map[string]string, error) {
	u, err := h.s.resolveUser(user)
	if err != nil {
		return nil, err
	}
	env := h.s.processEnv(u, nil, false)
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m, nil
}

// LookPath implements codeinterp.Host.
func (h *codeHost) LookPath(name string, env map[string]string) (string, error) {
	return lookPath(name, "/", env["PATH"])
}

// Spawn implements codeinterp.Host: like spawn (own process group, the
// user's credentials, registered with the reaper, preferred by the OOM
// killer) plus the extra pipes on fds 3 and 4.
func (h *codeHost) Spawn(spec codeinterp.SpawnSpec) (codeinterp.Proc, *codeinterp.Pipes, error) {
	u, err := h.s.resolveUser(spec.User)
	if err != nil {
		return nil, nil, err
	}
	parent := &codeinterp.Pipes{}
	var child [5]*os.File
	defer func() {
		for _, f := range child {
			if f != nil {
				f.Close() // the child has its copies (or was never started)
			}
		}
	}()
	fail := func(err error) (codeinterp.Proc, *codeinterp.Pipes, error) {
		parent.Close()
		return nil, nil, err
	}
	// Parent ends are registered with the poller (deadlines work); the
	// child's ends are put back in blocking mode by Fd below.
	pipe := func(childReads bool, parentEnd **os.File, fd int) error {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("pipe for fd %d: %w", fd, err)
		}
		if childReads {
			*parentEnd, child[fd] = w, r
		} else {
			*parentEnd, child[fd] = r, w
		}
		return nil
	}
	devNull := func(fd int) error {
		f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		child[fd] = f
		return nil
	}
	steps := []func() error{
		func() error {
			if spec.StdinPipe {
				return pipe(true, &parent.Stdin, 0)
			}
			return devNull(0)
		},
		func() error { return pipe(false, &parent.Stdout, 1) },
		func() error { return pipe(false, &parent.Stderr, 2) },
		func() error {
			if spec.Control {
				return pipe(true, &parent.Control, 3)
			}
			return devNull(3)
		},
		func() error {
			if spec.Events {
				return pipe(false, &parent.Events, 4)
			}
			return devNull(4)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fail(err)
		}
	}
	fds := make([]uintptr, len(child))
	for i, f := range child {
		fds[i] = f.Fd()
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if !u.self {
		sys.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups, NoSetGroups: setgroupsDenied()}
	}
	attr := &syscall.ProcAttr{Dir: spec.Dir, Env: spec.Env, Files: fds, Sys: sys}

	var (
		pid  int
		exit <-chan unix.WaitStatus
	)
	// On a fork thread (see forkThread), which lives as long as the agent
	// from the first interpreter on: interpreters get
	// PR_SET_PDEATHSIG=SIGKILL so they never outlive an agent that is not
	// PID 1 (tests, or a crash), and the kernel sends that signal when the
	// forking *thread* exits, which the Go runtime may do to ordinary
	// threads at any time.
	terr := forkThreadFor(credUID(attr)).run(func() {
		pid, exit, err = h.s.reaper.Spawn(func() (int, error) {
			return syscall.ForkExec(spec.Path, spec.Argv, attr)
		})
	})
	if terr != nil {
		err = terr
	}
	if err != nil {
		return fail(startError(spec.Path, err))
	}
	// Keep write ends of the output pipes: the agent appends the
	// end-of-execution markers itself, so the interpreter (and so the
	// sandbox) never learns their nonce (see codeinterp's marker.go).
	parent.StdoutMark, parent.StderrMark = child[1], child[2]
	child[1], child[2] = nil, nil
	// Like every process the agent starts: the OOM killer takes the
	// interpreter, not the agent.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(childOOMScoreAdj), 0)
	p := &codeProc{pid: pid, done: make(chan struct{})}
	go p.wait(exit)
	h.s.log.Debug("interpreter spawned", "pid", pid, "path", spec.Path, "user", u.Name, "dir", spec.Dir)
	return p, parent, nil
}

// codeProc is an interpreter process; its status comes from the reaper.
type codeProc struct {
	pid    int
	exited atomic.Bool
	status string
	done   chan struct{}
}

func (p *codeProc) wait(exit <-chan unix.WaitStatus) {
	ws := <-exit
	p.status = endEvent(ws, false, 0).GetStatus()
	p.exited.Store(true)
	close(p.done)
}

func (p *codeProc) Pid() int              { return p.pid }
func (p *codeProc) Done() <-chan struct{} { return p.done }

// Status implements codeinterp.Proc; valid once Done is closed.
func (p *codeProc) Status() string {
	select {
	case <-p.done:
		return p.status
	default:
		return "running"
	}
}

// Signal implements codeinterp.Proc: the whole process group, unless the
// leader was reaped (its pid may be reused).
func (p *codeProc) Signal(sig syscall.Signal) error {
	if p.exited.Load() {
		return nil
	}
	err := unix.Kill(-p.pid, sig)
	if err == nil || err == unix.ESRCH {
		return nil
	}
	return fmt.Errorf("signal process group %d: %w", p.pid, err)
}
