package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every process started through the process API runs below a shim: the
// agent binary re-executed with ShimArg, a child subreaper that starts
// the command and waits for it.
//
// Why: a process group is not a process tree. A command can leave its
// group with setsid, or leave its parent by a double fork (the orphan is
// re-parented to PID 1, the agent, which then cannot tell whose it was),
// so a timeout or a kill that signals the group let such processes run
// on. Orphans are re-parented to the nearest ancestor that is a child
// subreaper instead, so every process the command starts stays below its
// shim however it detaches, and the shim can end all of them.
//
// Cgroups would do the same, but the agent has no cgroup of its own to
// manage on every backend (and cgroup v1 hosts make nesting awkward); the
// shim works wherever the agent does. It costs one exec of the agent
// binary per process (see docs/benchmarks.md) and a small Go process for
// as long as the command runs.
//
// Semantics are unchanged otherwise: the command is its own process group
// (or session with a PTY), reported with its own pid; when it exits on its
// own, the shim reports its status and exits too, so whatever it left in
// the background is re-parented to the agent and keeps running (E2B's
// background processes). Only a timeout or SIGKILL through the API ends
// the whole tree.
//
// Protocol, on two pipes the agent passes as fds 3 and 4:
//
//	fd 3, shim -> agent: int32 pid, int32 errno (pid 0: exec failed), then
//	                     uint32 wait status when the command ends.
//	fd 4, agent -> shim: one byte 'K' kills the tree; EOF (the agent is
//	                     gone) does too.
//
// A process of the sandbox running as the same user can still SIGKILL
// the shim itself, and then its orphans go to the agent as before; that
// takes a deliberate attack on the supervisor, not just detaching.
const ShimArg = "--exec-shim"

const (
	shimStatusFD  = 3
	shimControlFD = 4
	shimKill      = 'K'
	// shimKillRounds bounds the kill loop against a tree that keeps
	// forking; the pids limit bounds how much each round finds.
	shimKillRounds = 10000
)

// RunShim is the shim's main: args are the command's path and argv. It
// returns the shim's exit code (the command's status goes to fd 3).
func RunShim(args []string) int {
	if err := runShim(args); err != nil {
		fmt.Fprintln(os.Stderr, "agentbox exec shim:", err)
		return 127
	}
	return 0
}

func runShim(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: " + ShimArg + " [--pty] PATH ARGV0 [ARG...]")
	}
	pty := false
	if args[0] == "--pty" {
		pty, args = true, args[1:]
	}
	status := os.NewFile(shimStatusFD, "shim-status")
	control := os.NewFile(shimControlFD, "shim-control")
	if status == nil || control == nil {
		return errors.New("started without its pipes")
	}
	syscall.CloseOnExec(shimStatusFD)
	syscall.CloseOnExec(shimControlFD)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	// Inherited by the command: the OOM killer picks it, not the agent.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte(childOOMScoreAdj), 0)

	sys := &syscall.SysProcAttr{Setpgid: true}
	if pty {
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: sys}
	pid, err := syscall.ForkExec(args[0], args[1:], attr)
	var msg [8]byte
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		binary.LittleEndian.PutUint32(msg[4:], uint32(errno))
		_, _ = status.Write(msg[:])
		return nil
	}
	binary.LittleEndian.PutUint32(msg[:4], uint32(pid))
	if _, err := status.Write(msg[:]); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return fmt.Errorf("report pid: %w", err)
	}
	// Let go of the command's stdio: its output ends (EOF) with the
	// command and whatever it started, not with the shim.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}

	kill := make(chan struct{})
	go func() {
		var b [1]byte
		for {
			n, err := control.Read(b[:])
			if err != nil || (n == 1 && b[0] == shimKill) {
				close(kill)
				return
			}
		}
	}()
	ws := shimWait(pid, kill)
	var st [4]byte
	binary.LittleEndian.PutUint32(st[:], uint32(ws))
	_, _ = status.Write(st[:])
	return nil
}

// shimWait reaps children until the command itself ends and returns its
// status. Once kill is closed it first ends every process below the shim.
func shimWait(pid int, kill <-chan struct{}) syscall.WaitStatus {
	type exit struct {
		pid int
		ws  syscall.WaitStatus
	}
	exits := make(chan exit)
	go func() {
		defer close(exits)
		for {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return // ECHILD: nothing is left below the shim
			}
			exits <- exit{got, ws}
		}
	}()
	var (
		status  syscall.WaitStatus
		killing bool
	)
	for {
		select {
		case e, ok := <-exits:
			if !ok {
				return status
			}
			if e.pid == pid {
				status = e.ws
				if !killing {
					return status // what it left behind lives on
				}
			}
		case <-kill:
			kill, killing = nil, true
			go killTree()
		}
	}
}

// killTree sends SIGKILL to every child of the shim, round after round:
// the children of a killed process are re-parented to the shim (a
// subreaper) and found in the next round. It runs until the shim exits
// (wait4 found nothing left), or for a bounded number of rounds.
func killTree() {
	for range shimKillRounds {
		for _, pid := range shimChildren() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// shimChildren lists the shim's children from /proc.
func shimChildren() []int {
	self := strconv.Itoa(os.Getpid())
	tasks, _ := filepath.Glob("/proc/" + self + "/task/*/children")
	var out []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// shimStartTimeout bounds how long the agent waits for a shim to report
// the command's pid (it only has to start and fork).
const shimStartTimeout = 10 * time.Second

// spawnShimmed starts argv below a shim (see ShimArg). attr describes the
// command (its files, directory, environment, credentials); the shim runs
// with the same, and the command gets its own process group, or a session
// with the terminal on fd 0 when pty is set. It returns the command's pid
// and a channel with its wait status; parent.shim gets the control pipe.
func (s *Server) spawnShimmed(path string, argv []string, attr *syscall.ProcAttr, pty bool, parent *childIO) (int, <-chan unix.WaitStatus, error) {
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return 0, nil, fmt.Errorf("shim status pipe: %w", err)
	}
	defer statusW.Close()
	controlR, controlW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		return 0, nil, fmt.Errorf("shim control pipe: %w", err)
	}
	defer controlR.Close()

	shimArgv := []string{s.cfg.Shim, ShimArg}
	if pty {
		shimArgv = append(shimArgv, "--pty")
	}
	shimArgv = append(append(shimArgv, path), argv...)
	// The shim stays in the agent's process group: signals for the
	// command's group must not end its supervisor.
	sys := &syscall.SysProcAttr{Credential: attr.Sys.Credential}
	shimAttr := &syscall.ProcAttr{Dir: attr.Dir, Env: attr.Env, Sys: sys,
		Files: append(append([]uintptr(nil), attr.Files...), statusW.Fd(), controlR.Fd())}
	shimPid, shimExit, err := s.reaper.Spawn(func() (int, error) {
		return syscall.ForkExec(s.cfg.Shim, shimArgv, shimAttr)
	})
	if err != nil {
		statusR.Close()
		controlW.Close()
		return 0, nil, fmt.Errorf("start exec shim %s: %w", s.cfg.Shim, err)
	}
	statusW.Close()
	controlR.Close()

	fail := func(err error) (int, <-chan unix.WaitStatus, error) {
		statusR.Close()
		controlW.Close() // EOF: the shim kills whatever it started
		_ = unix.Kill(shimPid, unix.SIGKILL)
		return 0, nil, err
	}
	var msg [8]byte
	_ = statusR.SetReadDeadline(time.Now().Add(shimStartTimeout))
	if _, err := io.ReadFull(statusR, msg[:]); err != nil {
		return fail(fmt.Errorf("exec shim did not report the process: %w", err))
	}
	_ = statusR.SetReadDeadline(time.Time{})
	pid := int(int32(binary.LittleEndian.Uint32(msg[:4])))
	if pid <= 0 {
		return fail(syscall.Errno(binary.LittleEndian.Uint32(msg[4:])))
	}
	parent.shim = controlW
	exit := make(chan unix.WaitStatus, 1)
	go func() {
		defer statusR.Close()
		var st [4]byte
		if _, err := io.ReadFull(statusR, st[:]); err == nil {
			exit <- unix.WaitStatus(binary.LittleEndian.Uint32(st[:]))
			return
		}
		// The shim died before the command (something killed it): end the
		// command's group rather than leave it unsupervised.
		ws := <-shimExit
		s.log.Warn("exec shim died; killing its process group", "pid", pid, "shim_pid", shimPid, "shim_status", ws)
		_ = unix.Kill(-pid, unix.SIGKILL)
		exit <- ws
	}()
	return pid, exit, nil
}
