package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Reaper owns all waiting for child processes of the agent.
//
// PID 1 inherits every orphan in the sandbox, and a wait4(-1) loop would
// steal exit statuses from exec.Cmd.Wait (and the other way round), so a
// single reaper waits for everything: on SIGCHLD it calls wait4(-1,
// WNOHANG) until nothing is left, hands each status to the waiter
// registered for that pid and discards the rest (orphans).
//
// Children must be started through Spawn, which holds the reaper's lock
// across fork and registration: the reaper cannot wait for a pid before its
// waiter exists, so no status is ever lost.
type Reaper struct {
	log *slog.Logger

	mu      sync.Mutex
	waiters map[int]chan<- unix.WaitStatus
	orphans int
}

var (
	reaperOnce sync.Once
	reaper     *Reaper
)

// safetyReapInterval bounds how long a zombie can linger if a SIGCHLD is
// ever missed; signals coalesce but are not lost, so this is belt and
// braces. It is the one timer of an idle agent: every idle sandbox wakes
// its agent this often (at 5 s, 1,000 idle sandboxes woke the host 200
// times a second).
const safetyReapInterval = time.Minute

// StartReaper starts the process-wide reaper (once) and returns it. When
// the agent is not PID 1 it makes itself a child subreaper so orphaned
// grandchildren are re-parented to it and still reaped.
//
// After this call nothing else in the process may wait for children.
func StartReaper(log *slog.Logger) *Reaper {
	reaperOnce.Do(func() {
		if log == nil {
			log = slog.Default()
		}
		if os.Getpid() != 1 {
			if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
				log.Warn("cannot become child subreaper", "err", err)
			}
		}
		r := &Reaper{log: log, waiters: make(map[int]chan<- unix.WaitStatus)}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, unix.SIGCHLD)
		go r.loop(sigs)
		reaper = r
	})
	return reaper
}

func (r *Reaper) loop(sigs <-chan os.Signal) {
	t := time.NewTicker(safetyReapInterval)
	defer t.Stop()
	for {
		select {
		case <-sigs:
		case <-t.C:
		}
		r.reap()
	}
}

// reap collects every exited child that is ready.
func (r *Reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD (no children) or none ready
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- ws // buffered, never blocks
			continue
		}
		r.orphans++
	}
}

// Spawn runs start (which must fork exactly one child and return its pid)
// while holding the reaper lock, and registers the child so that its exit
// status is delivered on the returned channel exactly once.
func (r *Reaper) Spawn(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	if _, dup := r.waiters[pid]; dup {
		// Cannot happen: a pid is not reused before its status is reaped.
		return 0, nil, fmt.Errorf("pid %d already registered", pid)
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = ch
	return pid, ch, nil
}

// Orphans returns how many exit statuses of unregistered processes
// (re-parented orphans) have been discarded so far.
func (r *Reaper) Orphans() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}
