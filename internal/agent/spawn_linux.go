package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// spawnRequest describes one process to fork.
type spawnRequest struct {
	cmd   string
	args  []string
	env   []string
	dir   string
	user  *User
	stdin bool // keep a stdin pipe (ignored with a PTY)
	pty   bool
	cols  uint16
	rows  uint16
}

// childIO holds the agent's ends of a child's standard streams.
type childIO struct {
	stdout *os.File // read end; nil with a PTY
	stderr *os.File // read end; nil with a PTY
	stdin  *os.File // write end; nil unless a stdin pipe was asked for
	pty    *os.File // PTY master; nil without a PTY
	// shim supervises the process (see ShimArg); nil without one.
	shim *shim
}

func (c *childIO) closeAll() {
	if c.shim != nil {
		c.shim.close()
	}
	for _, f := range []*os.File{c.stdout, c.stderr, c.stdin, c.pty} {
		if f != nil {
			f.Close()
		}
	}
}

// childOOMScoreAdj is the OOM score adjustment of every started process.
const childOOMScoreAdj = "500"

// spawn forks and execs req through the reaper. The child gets its own
// process group (a new session with the PTY as controlling terminal when
// req.pty) so signals can be sent to everything it starts.
func (s *Server) spawn(req spawnRequest) (int, <-chan unix.WaitStatus, *childIO, error) {
	if s.closing.Load() {
		// Shutting down or being reset: whatever started now would
		// outlive the kill of everything.
		return 0, nil, nil, errors.New("the agent is shutting down or being reset")
	}
	var path string
	err := req.user.do(func() error {
		if err := checkDir(req.dir); err != nil {
			return err
		}
		var err error
		path, err = lookPath(req.cmd, req.dir, envValue(req.env, "PATH"))
		return err
	})
	if err != nil {
		return 0, nil, nil, err
	}

	parent := &childIO{}
	// The child's ends of its streams: raw descriptors, never registered
	// with the netpoller (os.Pipe would register both ends, and Fd() then
	// switch the child's back to blocking: four epoll and fcntl calls per
	// process for descriptors the agent only hands on). Closed once the
	// child has its copies (or was never started).
	var childFDs, owned []int
	var childFiles []*os.File
	defer func() {
		for _, fd := range owned {
			unix.Close(fd)
		}
		for _, f := range childFiles {
			f.Close()
		}
	}()
	sys := &syscall.SysProcAttr{}
	if req.pty {
		master, tty, err := openPTY(req.cols, req.rows)
		if err != nil {
			return 0, nil, nil, connect.NewError(connect.CodeInternal, err)
		}
		parent.pty = master
		childFiles = []*os.File{tty}
		childFDs = []int{int(tty.Fd())}
		sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
	} else {
		in, own, err := s.childStdin(req.stdin, parent)
		if err != nil {
			parent.closeAll()
			return 0, nil, nil, connect.NewError(connect.CodeInternal, err)
		}
		childFDs = append(childFDs, in)
		if own {
			owned = append(owned, in)
		}
		for _, dst := range []**os.File{&parent.stdout, &parent.stderr} {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				parent.closeAll()
				return 0, nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("output pipe: %w", err))
			}
			owned = append(owned, p[1])
			childFDs = append(childFDs, p[1])
			if *dst, err = pollable(p[0], "|0"); err != nil {
				parent.closeAll()
				return 0, nil, nil, connect.NewError(connect.CodeInternal, fmt.Errorf("output pipe: %w", err))
			}
		}
		sys.Setpgid = true
	}
	if !req.user.self {
		sys.Credential = &syscall.Credential{
			Uid: req.user.UID, Gid: req.user.GID, Groups: req.user.Groups,
			NoSetGroups: setgroupsDenied(),
		}
	}
	fds := make([]uintptr, 3)
	for i := range fds {
		fds[i] = uintptr(childFDs[min(i, len(childFDs)-1)])
	}
	attr := &syscall.ProcAttr{Dir: req.dir, Env: req.env, Files: fds, Sys: sys}
	argv := append([]string{req.cmd}, req.args...)

	if s.shims != nil {
		pid, exit, err := s.spawnShimmed(path, argv, attr, req.pty, parent)
		if err != nil {
			parent.closeAll()
			return 0, nil, nil, startError(req.cmd, err)
		}
		return pid, exit, parent, nil
	}
	pid, exit, err := s.reaper.Spawn(func() (int, error) {
		return forkExec(path, argv, attr)
	})
	if err != nil {
		parent.closeAll()
		return 0, nil, nil, startError(req.cmd, err)
	}
	// Make the sandbox's processes, not the agent, the OOM killer's first
	// choice. Raising a score needs no privilege; the window before this
	// write is a few microseconds of a process that has barely started.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(childOOMScoreAdj), 0)
	return pid, exit, parent, nil
}

// childStdin returns the child's stdin: the read end of a pipe whose write
// end goes to parent.stdin (own: the caller closes it once the child has
// its copy), or the agent's one descriptor of /dev/null, shared by every
// child (reads of it are all EOF, whoever else holds it).
func (s *Server) childStdin(pipe bool, parent *childIO) (fd int, own bool, err error) {
	if !pipe {
		s.devNullOnce.Do(func() {
			s.devNull, s.devNullErr = os.Open(os.DevNull)
		})
		if s.devNullErr != nil {
			return -1, false, fmt.Errorf("open %s: %w", os.DevNull, s.devNullErr)
		}
		return int(s.devNull.Fd()), false, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, false, fmt.Errorf("stdin pipe: %w", err)
	}
	if parent.stdin, err = pollable(p[1], "|1"); err != nil {
		unix.Close(p[0])
		return -1, false, fmt.Errorf("stdin pipe: %w", err)
	}
	return p[0], true, nil
}

// pollable makes fd, the agent's end of a pipe, a non-blocking *os.File
// served by the netpoller (read deadlines: see pump), like os.Pipe's ends.
// fd is closed on error.
func pollable(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

func startError(cmd string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return executableNotFound(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start %q: executable not found: %w", cmd, err)))
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("start %q: %w", cmd, err))
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOMEM):
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("start %q: %w", cmd, err))
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("start %q: %w", cmd, err))
	}
}

// checkDir verifies that dir is an existing directory the caller may enter.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("working directory %q does not exist", dir))
	}
	if err != nil {
		return fsError(fmt.Sprintf("working directory %q", dir), err)
	}
	if !fi.IsDir() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("working directory %q is not a directory", dir))
	}
	if err := unix.Access(dir, unix.X_OK); err != nil {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("working directory %q: %w", dir, err))
	}
	return nil
}

// lookPath finds cmd like execvp does, but in the child's PATH rather than
// the agent's. Names with a slash are used as given (relative ones resolve
// against the child's working directory dir).
func lookPath(cmd, dir, pathEnv string) (string, error) {
	if cmd == "" {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("cmd is empty"))
	}
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, nil
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = dir
		}
		p := filepath.Join(d, cmd)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", executableNotFound(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("executable %q not found in PATH: %w", cmd, fs.ErrNotExist)))
}
