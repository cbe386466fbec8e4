package agent

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// do runs fn with u's filesystem permissions and returns its error.
//
// For the agent's own identity fn simply runs. Otherwise (the agent is
// root and acts for another user) fn runs on an OS thread whose
// filesystem uid/gid and supplementary groups are u's and, for a user
// other than root, which holds no capability at all. Linux keeps these
// credentials per thread, so the kernel enforces u's permissions exactly
// (the agent's CAP_DAC_OVERRIDE and friends do not apply) and new files
// and directories are owned by u without chown. Such a thread never runs
// anything else: the default user's are kept for its next calls
// (credThreads), any other user's ends with fn (its goroutine exits still
// locked to it, which makes the Go runtime destroy the thread instead of
// reusing it with foreign credentials).
//
// fn must do its path-based work itself (open, mkdir, rename, ...); file
// descriptors it returns stay usable from any goroutine afterwards.
func (u *User) do(fn func() error) error {
	if u.self {
		return fn()
	}
	if u.threads != nil {
		return u.threads.run(fn)
	}
	jobs, err := startCredThread(u)
	if err != nil {
		return err
	}
	defer close(jobs)
	return runJob(jobs, fn)
}

// credThreads keeps a few idle OS threads with one user's credentials
// (setThreadCreds) for its next calls of do: starting a thread for every
// file operation of the default user would cost more than the operation.
// Each thread counts against the sandbox's pids limit, hence the few.
type credThreads struct {
	idle chan chan func()
	u    *User
}

// credThreadsKept bounds the idle threads of one user.
const credThreadsKept = 2

var (
	credThreadsMu  sync.Mutex
	credThreadsAll = map[string]*credThreads{}
)

// credThreadsFor returns the process's threads for u's credentials: a
// warm reset's new server generation shares its predecessor's.
func credThreadsFor(u *User) *credThreads {
	key := fmt.Sprint(u.UID, u.GID, u.Groups)
	credThreadsMu.Lock()
	defer credThreadsMu.Unlock()
	p := credThreadsAll[key]
	if p == nil {
		p = &credThreads{idle: make(chan chan func(), credThreadsKept), u: u}
		credThreadsAll[key] = p
	}
	return p
}

// run runs fn on an idle thread, or on a new one when none is idle.
func (p *credThreads) run(fn func() error) error {
	var jobs chan func()
	select {
	case jobs = <-p.idle:
	default:
		var err error
		if jobs, err = startCredThread(p.u); err != nil {
			return err
		}
	}
	err := runJob(jobs, fn)
	select {
	case p.idle <- jobs:
	default:
		close(jobs) // enough are kept: this thread ends
	}
	return err
}

func runJob(jobs chan<- func(), fn func() error) error {
	errc := make(chan error, 1)
	jobs <- func() { errc <- fn() }
	return <-errc
}

// startCredThread starts an OS thread with u's credentials that runs the
// functions sent on the returned channel, one at a time, until it is
// closed; then the thread ends.
func startCredThread(u *User) (chan func(), error) {
	jobs := make(chan func())
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see User.do.
		if err := setThreadCreds(u); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for job := range jobs {
			job()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return jobs, nil
}

// setThreadCreds switches the calling thread's fs credentials to u and,
// for a user other than root, clears the thread's capabilities. It uses
// raw syscalls because the syscall/unix wrappers apply set*id to every
// thread of the process.
func setThreadCreds(u *User) error {
	groups := u.Groups
	if len(groups) == 0 {
		groups = []uint32{u.GID}
	}
	if !setgroupsDenied() {
		_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0)
		if e != 0 {
			return fmt.Errorf("setgroups for %s: %w", u.Name, e)
		}
	}
	_, _, _ = unix.RawSyscall(unix.SYS_SETFSGID, uintptr(u.GID), 0, 0)
	if _, _, e := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(u.UID), 0, 0); e == unix.ENOSYS {
		// gVisor's kernel has no fs ids (gvisor.dev/issue/260). The
		// thread is the user's for good (it is never handed back to the
		// runtime: see User.do), so it takes all of the user's ids: raw
		// set*id calls change the calling thread only.
		return setThreadIDs(u)
	}
	// setfsuid reports no errors; asking again returns the value in force.
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(u.UID), 0, 0); uint32(got) != u.UID {
		return fmt.Errorf("setfsuid %d failed (still %d)", u.UID, got)
	}
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, uintptr(u.GID), 0, 0); uint32(got) != u.GID {
		return fmt.Errorf("setfsgid %d failed (still %d)", u.GID, got)
	}
	if u.UID != 0 {
		// A non-zero fsuid already drops the file capabilities from the
		// effective set; the rest (CAP_SETFCAP, CAP_KILL, ...) go too, so
		// the thread has exactly the user's rights. Pid 0: this thread.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("drop the capabilities of a thread acting as %s: %w", u.Name, err)
		}
	}
	return nil
}

// Processes that run as a user other than root are forked from a thread
// whose capability bounding set is empty (the child inherits the forking
// thread's), so they hold no capability and can never gain one, exactly
// as if the agent itself ran as that user: an agent running as root of
// its sandbox's user namespace keeps the small root set in its own
// bounding set, for the requests that ask for root.
//
// The threads are long-lived and locked: a child's parent-death signal
// (the code interpreters' Pdeathsig) fires when the thread that forked
// it ends, which must not happen while the agent runs.

// forkThread is a locked OS thread that runs the functions sent to it.
type forkThread struct {
	once sync.Once
	jobs chan func()
	err  error
	// unprivileged: the thread's capability bounding set is emptied first.
	unprivileged bool
}

var (
	plainForks        = &forkThread{}
	unprivilegedForks = &forkThread{unprivileged: true}
)

// forkThreadFor returns the fork thread for a child that gets cred
// (nil: the agent's own identity).
func forkThreadFor(uid *uint32) *forkThread {
	if uid != nil && *uid != 0 {
		return unprivilegedForks
	}
	return plainForks
}

// run runs fn on the thread and waits for it; an error means the thread
// could not be set up and fn did not run.
func (f *forkThread) run(fn func()) error {
	f.once.Do(func() {
		f.jobs = make(chan func())
		ready := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: see above
			if f.unprivileged {
				if err := dropBoundingSet(); err != nil {
					ready <- err
					return
				}
			}
			ready <- nil
			for job := range f.jobs {
				job()
			}
		}()
		f.err = <-ready
	})
	if f.err != nil {
		return f.err
	}
	done := make(chan struct{})
	f.jobs <- func() { defer close(done); fn() }
	<-done
	return nil
}

// dropBoundingSet empties the calling thread's capability bounding set.
// A capability the thread cannot drop (no CAP_SETPCAP) is an error unless
// it is not in the set anyway.
func dropBoundingSet() error {
	for c := 0; ; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("read the capability bounding set: %w", err)
		}
		if in == 1 {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
}

// forkExec is syscall.ForkExec from the fork thread the child's
// credentials call for (see forkThread).
func forkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	t := forkThreadFor(credUID(attr))
	if t == plainForks {
		return syscall.ForkExec(path, argv, attr)
	}
	var pid int
	var err error
	if terr := t.run(func() { pid, err = syscall.ForkExec(path, argv, attr) }); terr != nil {
		return 0, terr
	}
	return pid, err
}

// credUID is the uid a child of attr switches to, nil when none.
func credUID(attr *syscall.ProcAttr) *uint32 {
	if attr.Sys == nil || attr.Sys.Credential == nil {
		return nil
	}
	return &attr.Sys.Credential.Uid
}

// setThreadIDs gives the calling thread u's real, effective and saved
// ids, where the kernel has no fs ids. For a user other than root the
// kernel clears the thread's capabilities with its last root id.
func setThreadIDs(u *User) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(u.GID), uintptr(u.GID), uintptr(u.GID)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", u.GID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(u.UID), uintptr(u.UID), uintptr(u.UID)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", u.UID, e)
	}
	return nil
}
