package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// shim works wherever the agent does. Starting the agent binary costs
// about 2 ms, so one shim is started ahead of need and shims are reused
// (shimPool): a process costs one fork and exec as before, plus a few
// messages. A shim is a small Go process (about 1 MiB of its own memory
// and 4-5 tasks against the pids limit).
//
// Semantics are unchanged otherwise: the command is its own process group
// (or session with a PTY), reported with its own pid; when it exits on its
// own, the shim reports its status, and if the command left processes
// behind it exits, so they are re-parented to the agent and keep running
// (E2B's background processes); otherwise it waits for the next command.
// Only a timeout or SIGKILL through the API ends the whole tree.
//
// Protocol, on a unix stream socket that is the shim's fd 3, per command:
//
//	agent -> shim: uint32 length with the command's stdin, stdout and
//	               stderr attached (SCM_RIGHTS), then shimRequest (JSON)
//	shim -> agent: int32 pid, int32 errno (pid 0: the exec failed; the
//	               shim then waits for the next request)
//	agent -> shim: 'K' kills the tree; EOF (the agent is gone) does too
//	shim -> agent: uint32 wait status, byte 1 if the shim can take another
//	               command (nothing was left behind)
//	agent -> shim: 'D' when it takes the shim back; EOF ends it
//
// The shim runs as the agent's user and starts the command with the
// request's credentials, exactly as the agent did (a command of a user
// other than root without the capability bounding set: see
// forkThread). A sandbox process running as the shim's user (the agent's:
// root of the sandbox's user namespace where the agent is, so only
// commands run as root) can still SIGKILL the shim, and then its orphans
// go to the agent as before; the agent then kills the command's process
// group. That takes a deliberate attack on the supervisor, not just
// detaching.
const ShimArg = "--exec-shim"

const (
	shimFD   = 3
	shimKill = 'K'
	shimDone = 'D'
	// shimKillRounds bounds the kill loop against a tree that keeps
	// forking; the pids limit bounds how much each round finds.
	shimKillRounds = 10000
	// shimPoolSize is how many idle shims are kept when commands end;
	// shimPoolWarm how many Go shims are started ahead of need (one: an
	// idle sandbox pays about 1 MiB and 3-5 tasks of its pids limit for
	// it). agentbox-shim starts fast enough to be started on demand.
	shimPoolSize = 2
	shimPoolWarm = 1
	// shimTimeout bounds waiting for a shim to answer a request.
	shimTimeout = 10 * time.Second
	// shimMaxRequest bounds a request (argv and environment).
	shimMaxRequest = 16 << 20
)

// shimRequest is what a shim starts (on the wire: shimproto.go).
type shimRequest struct {
	Path   string
	Argv   []string
	Env    []string
	Dir    string
	PTY    bool // new session, fd 0 as controlling terminal
	Cred   bool
	UID    uint32
	GID    uint32
	Groups []uint32
	NoSetg bool
}

// RunShim is the shim's main (the arguments after ShimArg are unused). It
// returns the shim's exit code; the command's status goes to the agent.
func RunShim(_ []string) int {
	if err := runShim(); err != nil {
		fmt.Fprintln(os.Stderr, "agentbox exec shim:", err)
		return 127
	}
	return 0
}

func runShim() error {
	syscall.CloseOnExec(shimFD)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	// Requests carry other commands' environments: keep the shim's memory
	// out of reach of the sandbox's processes.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	// Inherited by the commands: the OOM killer picks them, not the agent.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte(childOOMScoreAdj), 0)

	r := newShimReaper()
	for {
		req, files, err := shimReceive()
		if errors.Is(err, errShimIdleEnd) {
			return nil // the agent let go of an idle shim
		}
		if err != nil {
			return err
		}
		again, err := shimRun(r, req, files)
		if err != nil || !again {
			return err
		}
	}
}

// shimRun starts one command, supervises it and reports its end. It
// returns whether the shim can take another request: not when the
// command left processes behind (they are the shim's children and must
// not be killed with a later command: the shim exits and they go to the
// agent), nor when the agent went away.
func shimRun(r *shimReaper, req shimRequest, files []uintptr) (bool, error) {
	sys := &syscall.SysProcAttr{Setpgid: true}
	if req.PTY {
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if req.Cred {
		sys.Credential = &syscall.Credential{Uid: req.UID, Gid: req.GID, Groups: req.Groups, NoSetGroups: req.NoSetg}
	}
	attr := &syscall.ProcAttr{Dir: req.Dir, Env: req.Env, Files: files, Sys: sys}
	// A command of a user other than root starts from a thread without
	// the shim's (the agent's) capability bounding set: see forkThread.
	pid, err := forkExec(req.Path, req.Argv, attr)
	for _, fd := range files {
		_ = unix.Close(int(fd))
	}
	var msg [8]byte
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		binary.LittleEndian.PutUint32(msg[4:], uint32(errno))
		_, err := unix.Write(shimFD, msg[:])
		return err == nil, nil
	}
	r.kick()
	binary.LittleEndian.PutUint32(msg[:4], uint32(pid))
	if _, err := unix.Write(shimFD, msg[:]); err != nil {
		_ = unix.Kill(-pid, unix.SIGKILL)
		return false, fmt.Errorf("report pid: %w", err)
	}

	var ended atomic.Bool
	kill := make(chan struct{})
	next := make(chan bool, 1) // true: 'D' (take another request), false: EOF
	go func() {
		killed := false
		var b [1]byte
		for {
			n, err := unix.Read(shimFD, b[:])
			if errors.Is(err, unix.EINTR) {
				continue
			}
			switch {
			case err != nil || n == 0:
				if !killed {
					close(kill)
				}
				next <- false
				return
			case b[0] == shimKill && !killed && !ended.Load():
				killed = true
				close(kill)
			case b[0] == shimDone:
				next <- true
				return
			}
		}
	}()
	ws := shimWait(r, pid, kill)
	ended.Store(true)
	reusable := !shimHasChildren()
	var st [5]byte
	binary.LittleEndian.PutUint32(st[:4], uint32(ws))
	if reusable {
		st[4] = 1
	}
	if _, err := unix.Write(shimFD, st[:]); err != nil || !reusable {
		return false, nil
	}
	return <-next, nil
}

// shimReaper owns waiting for the shim's children, across commands.
type shimReaper struct {
	exits chan shimExit
	more  chan struct{}
}

// shimExit is one reaped child; pid 0 means no child was left.
type shimExit struct {
	pid int
	ws  syscall.WaitStatus
}

func newShimReaper() *shimReaper {
	r := &shimReaper{exits: make(chan shimExit), more: make(chan struct{}, 1)}
	go func() {
		for {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case errors.Is(err, syscall.EINTR):
			case err != nil: // ECHILD: report it, then wait for a new child
				r.exits <- shimExit{}
				<-r.more
			default:
				r.exits <- shimExit{got, ws}
			}
		}
	}()
	return r
}

// kick tells the reaper that there may be children again.
func (r *shimReaper) kick() {
	select {
	case r.more <- struct{}{}:
	default:
	}
}

// shimWait reaps children until the command itself ends and returns its
// status. Once kill is closed it first ends every process below the shim.
func shimWait(r *shimReaper, pid int, kill <-chan struct{}) syscall.WaitStatus {
	var (
		status  syscall.WaitStatus
		killing bool
		stop    = make(chan struct{})
	)
	defer close(stop)
	startKill := func() {
		kill, killing = nil, true
		go killTree(stop)
	}
	for {
		select {
		case e := <-r.exits:
			switch {
			case e.pid == pid:
				status = e.ws
				select {
				case <-kill: // a kill that raced with the exit still counts
					startKill()
				default:
				}
				if !killing {
					return status // what it left behind lives on
				}
			case e.pid == 0 && killing:
				if len(shimChildren()) == 0 {
					return status // everything below the shim is gone
				}
				r.kick()
			case e.pid == 0:
				r.kick() // left over from an earlier command
			}
		case <-kill:
			startKill()
		}
	}
}

// killTree sends SIGKILL to every child of the shim, round after round,
// until stop: the children of a killed process are re-parented to the
// shim (a subreaper) and found in the next round. The rounds are bounded.
func killTree(stop <-chan struct{}) {
	for range shimKillRounds {
		for _, pid := range shimChildren() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

var errShimIdleEnd = errors.New("closed while idle")

// shimReceive waits for the request and its three descriptors.
func shimReceive() (shimRequest, []uintptr, error) {
	var req shimRequest
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(shimFD, hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return req, nil, fmt.Errorf("receive request: %w", err)
	}
	if n == 0 {
		return req, nil, errShimIdleEnd
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return req, nil, fmt.Errorf("request without descriptors (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 3 {
		return req, nil, fmt.Errorf("request with %d descriptors, want 3 (%v)", len(fds), err)
	}
	if err := shimReadFull(hdr[n:]); err != nil {
		return req, nil, err
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	if size > shimMaxRequest {
		return req, nil, fmt.Errorf("request of %d bytes", size)
	}
	buf := make([]byte, size)
	if err := shimReadFull(buf); err != nil {
		return req, nil, err
	}
	if req, err = decodeShimRequest(buf); err != nil {
		return req, nil, err
	}
	return req, []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}, nil
}

// shimReadFull fills b from the agent's socket.
func shimReadFull(b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(shimFD, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
		if n == 0 {
			return errors.New("read request: unexpected EOF")
		}
		b = b[n:]
	}
	return nil
}

// shimChildren lists the shim's children from /proc.
// shimHasChildren reports whether any process (running, stopped or a
// zombie not yet reaped) is still a child of the shim: one waitid that
// consumes nothing, where listing them (shimChildren) reads a /proc file
// per thread. It runs between the command's end and its report, so on
// every exec's path. When in doubt (an unexpected error) it says yes: the
// shim then exits instead of being reused, which is always safe.
func shimHasChildren() bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WSTOPPED|unix.WCONTINUED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return false
		default:
			return true
		}
	}
}

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

// shim is the agent's handle on one shim process.
type shim struct {
	pid  int
	conn *net.UnixConn
	exit <-chan unix.WaitStatus // from the reaper

	// mu orders kill requests with the end of a command: once the shim
	// reported the end, it may take the next command, which a late kill
	// of the old one must not reach.
	mu   sync.Mutex
	busy bool
}

// kill asks the shim to end the command's whole tree. The command must
// not be killed before the shim has the request: the shim would take the
// command's death for an ordinary exit and let the rest run on.
func (sh *shim) kill() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.busy {
		return nil // the command has ended already
	}
	// A shim stopped by a sandbox process could not act on the request.
	_ = unix.Kill(sh.pid, unix.SIGCONT)
	_ = sh.conn.SetWriteDeadline(time.Now().Add(shimTimeout))
	_, err := sh.conn.Write([]byte{shimKill})
	return err
}

// release ends the shim's current command on the agent's side; a shim
// that can take another command goes back to pool.
func (sh *shim) release(pool *shimPool, reusable bool) {
	sh.mu.Lock()
	sh.busy = false
	sh.mu.Unlock()
	if reusable {
		_ = sh.conn.SetWriteDeadline(time.Now().Add(shimTimeout))
		if _, err := sh.conn.Write([]byte{shimDone}); err == nil {
			pool.put(sh)
			return
		}
	}
	sh.close()
}

// close lets go of the shim; an idle or supervising shim reads EOF and
// kills what it started (nothing, once the command has ended).
func (sh *shim) close() { sh.conn.Close() }

// shimPool keeps idle shims started ahead of need, so that starting a
// process does not wait for the agent binary to start.
type shimPool struct {
	s    *Server
	path string
	// external: path is agentbox-shim, not the agent (see Config).
	external bool
	// warm is how many idle shims the refiller keeps ready.
	warm int

	mu     sync.Mutex
	idle   []*shim
	closed bool
	// starting is set while prestart starts one.
	starting bool
	refill   chan struct{}
}

func newShimPool(s *Server, path string, external bool) *shimPool {
	p := &shimPool{s: s, path: path, external: external, warm: shimPoolWarm, refill: make(chan struct{}, 1)}
	if external {
		p.warm = 0
	}
	go p.refiller()
	return p
}

func (p *shimPool) poke() {
	select {
	case p.refill <- struct{}{}:
	default:
	}
}

// refiller starts shims in the background until warm are idle.
func (p *shimPool) refiller() {
	for range p.refill {
		for {
			p.mu.Lock()
			closed := p.closed
			done := closed || len(p.idle) >= p.warm
			p.mu.Unlock()
			if closed {
				// A warm reset drops a generation's pool: its
				// refiller must not outlive it.
				return
			}
			if done {
				break
			}
			sh, err := p.start()
			if err != nil {
				p.s.log.Warn("start an exec shim", "err", err)
				break // the next get starts one itself and reports why
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				sh.close()
				return
			}
			p.idle = append(p.idle, sh)
			p.mu.Unlock()
		}
	}
}

// prestart starts one shim in the background if none is idle: for an
// agent about to get its first command (a warm pool's sandbox being handed
// out), so that command does not wait for it.
func (p *shimPool) prestart() {
	if p.warm > 0 {
		return // the refiller keeps shims ready already
	}
	p.mu.Lock()
	busy := p.closed || len(p.idle) > 0 || p.starting
	p.starting = !busy
	p.mu.Unlock()
	if busy {
		return
	}
	go func() {
		sh, err := p.start()
		p.mu.Lock()
		p.starting = false
		if err != nil || p.closed || len(p.idle) >= shimPoolSize {
			p.mu.Unlock()
			if sh != nil {
				sh.close()
			}
			return
		}
		p.idle = append(p.idle, sh)
		p.mu.Unlock()
	}()
}

// get returns an idle shim, or starts one when none is left. Shims come
// back after their command (see shim.release), so the pool is refilled
// only once it ran empty.
func (p *shimPool) get() (*shim, error) {
	p.mu.Lock()
	var sh *shim
	if n := len(p.idle); n > 0 {
		sh, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	empty := len(p.idle) == 0
	p.mu.Unlock()
	if empty {
		p.poke()
	}
	if sh != nil {
		return sh, nil
	}
	return p.start()
}

// put returns a shim that finished a command to the idle ones.
func (p *shimPool) put(sh *shim) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= shimPoolSize {
		p.mu.Unlock()
		sh.close()
		return
	}
	p.idle = append(p.idle, sh)
	p.mu.Unlock()
}

// close ends the idle shims and the refiller.
func (p *shimPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, sh := range idle {
		sh.close()
	}
	p.poke() // the refiller sees closed and returns
}

// start starts one idle shim, as the agent's own user, in /, with an
// empty environment (the command's comes with the request).
func (p *shimPool) start() (*shim, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shim socket: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "shim")
	defer child.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer null.Close()
	attr := &syscall.ProcAttr{Dir: "/", Env: []string{"GOMAXPROCS=1"},
		Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), child.Fd()}}
	argv := []string{"agentbox-agent", ShimArg}
	if p.external {
		attr.Env, argv = []string{}, []string{"agentbox-shim"}
	}
	pid, exit, err := p.s.reaper.Spawn(func() (int, error) {
		return syscall.ForkExec(p.path, argv, attr)
	})
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("start exec shim %s: %w", p.path, err)
	}
	f := os.NewFile(uintptr(fds[0]), "shim")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return nil, fmt.Errorf("shim socket: %w", err)
	}
	return &shim{pid: pid, conn: c.(*net.UnixConn), exit: exit}, nil
}

// spawnShimmed starts argv below a shim (see ShimArg). attr describes the
// command (its files, directory, environment, credentials); the command
// gets its own process group, or a session with the terminal on fd 0
// when pty is set. It returns the command's pid and a channel with its
// wait status; parent.shim gets the shim.
func (s *Server) spawnShimmed(path string, argv []string, attr *syscall.ProcAttr, pty bool, parent *childIO) (int, <-chan unix.WaitStatus, error) {
	req := shimRequest{Path: path, Argv: argv, Env: attr.Env, Dir: attr.Dir, PTY: pty}
	if c := attr.Sys.Credential; c != nil {
		req.Cred, req.UID, req.GID, req.Groups, req.NoSetg = true, c.Uid, c.Gid, c.Groups, c.NoSetGroups
	}
	msg, err := req.encode()
	if err != nil {
		return 0, nil, err
	}
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(len(msg)))
	rights := unix.UnixRights(int(attr.Files[0]), int(attr.Files[1]), int(attr.Files[2]))
	var sh *shim
	// An idle shim may have been killed meanwhile: try another once.
	for try := 0; ; try++ {
		if sh, err = s.shims.get(); err != nil {
			return 0, nil, err
		}
		_ = sh.conn.SetDeadline(time.Now().Add(shimTimeout))
		if _, _, err = sh.conn.WriteMsgUnix(hdr[:], rights, nil); err == nil {
			if _, err = sh.conn.Write(msg); err == nil {
				break
			}
		}
		sh.close()
		if try == 1 {
			return 0, nil, fmt.Errorf("hand the process to its shim: %w", err)
		}
	}
	fail := func(err error) (int, <-chan unix.WaitStatus, error) {
		sh.close()
		_ = unix.Kill(sh.pid, unix.SIGKILL)
		return 0, nil, err
	}
	var ans [8]byte
	if _, err := io.ReadFull(sh.conn, ans[:]); err != nil {
		return fail(fmt.Errorf("exec shim did not report the process: %w", err))
	}
	_ = sh.conn.SetDeadline(time.Time{})
	pid := int(int32(binary.LittleEndian.Uint32(ans[:4])))
	if pid <= 0 {
		s.shims.put(sh) // nothing started: it waits for the next request
		return 0, nil, syscall.Errno(binary.LittleEndian.Uint32(ans[4:]))
	}
	sh.mu.Lock()
	sh.busy = true
	sh.mu.Unlock()
	parent.shim = sh
	exit := make(chan unix.WaitStatus, 1)
	go func() {
		var st [5]byte
		if _, err := io.ReadFull(sh.conn, st[:]); err == nil {
			sh.release(s.shims, st[4] == 1)
			exit <- unix.WaitStatus(binary.LittleEndian.Uint32(st[:4]))
			return
		}
		sh.release(s.shims, false)
		// The shim died before the command (something killed it): end the
		// command's group rather than leave it unsupervised.
		ws := <-sh.exit
		s.log.Warn("exec shim died; killing its process group", "pid", pid, "shim_pid", sh.pid, "shim_status", ws)
		_ = unix.Kill(-pid, unix.SIGKILL)
		exit <- ws
	}()
	return pid, exit, nil
}
