package native

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The agent's process attributes and the warm reset.
//
// Sandbox code runs as the agent's uid (or, in a root sandbox, as root of
// the same user namespace), so the kernel lets it lower what the agent
// runs with: resource limits (prlimit on the agent's pid or any of its
// thread ids), each thread's nice value, scheduling policy, CPU affinity
// and I/O priority (setpriority, sched_setattr, sched_setaffinity,
// ioprio_set), and in a root sandbox the OOM score adjustment and the nice
// value of the agent's scheduling autogroup. Every
// command the agent starts afterwards inherits them, and the agent itself
// cannot raise a lowered hard limit or a raised nice value again.
//
// Resource limits: the seccomp profile refuses prlimit on any process but
// the caller (seccompprofile). They could not be set back anyway: raising
// a hard limit takes CAP_SYS_RESOURCE, which a daemon in a container often
// lacks. So a warm reset only checks them against what they were at boot,
// and a difference sends the sandbox through the full reset.
//
// The per-thread attributes are what ordinary programs set on their own
// threads, by thread id, so they stay allowed: changing them on the agent
// only hurts the sandbox that does it, until a warm reset hands the same
// agent to the next user. The daemon records them when the agent is ready
// (nothing of the sandbox has run yet) and sets them back at every warm
// reset (CAP_SYS_NICE), with the OOM score adjustment and the autogroup's
// nice value, after every other
// process is dead and before the agent starts anything for the next user.

// ioprioWhoProcess is IOPRIO_WHO_PROCESS (linux/ioprio.h): the "who" of
// ioprio_get/ioprio_set is one thread id.
const ioprioWhoProcess = 1

// agentAttrs is what the agent ran with at boot.
type agentAttrs struct {
	// limits is /proc/PID/limits as read.
	limits []byte
	// Per thread, read from the main thread: the agent sets none of its
	// own, so every thread started with these.
	sched  unix.SchedAttr
	cpus   unix.CPUSet
	ioprio uintptr
	// oomScoreAdj is /proc/PID/oom_score_adj as read.
	oomScoreAdj []byte
	// autogroupNice is the nice value of the agent's scheduling
	// autogroup (/proc/PID/autogroup), which a root sandbox may change;
	// empty where the kernel has no autogroups.
	autogroupNice string
}

// readAgentAttrs reads the attributes of process pid from the host.
func readAgentAttrs(pid int) (*agentAttrs, error) {
	a := &agentAttrs{}
	var err error
	if a.limits, err = os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid)); err != nil {
		return nil, fmt.Errorf("read resource limits: %w", err)
	}
	sched, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("read scheduling attributes of pid %d: %w", pid, err)
	}
	a.sched = *sched
	if err := unix.SchedGetaffinity(pid, &a.cpus); err != nil {
		return nil, fmt.Errorf("read CPU affinity of pid %d: %w", pid, err)
	}
	prio, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(pid), 0)
	if e != 0 {
		return nil, fmt.Errorf("read I/O priority of pid %d: %w", pid, e)
	}
	a.ioprio = prio
	if a.oomScoreAdj, err = os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid)); err != nil {
		return nil, fmt.Errorf("read OOM score adjustment: %w", err)
	}
	switch ag, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pid)); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read scheduling autogroup: %w", err)
	default:
		// "/autogroup-N nice V"
		_, nice, ok := strings.Cut(strings.TrimSpace(string(ag)), " nice ")
		if !ok {
			return nil, fmt.Errorf("scheduling autogroup: unexpected %q", ag)
		}
		a.autogroupNice = nice
	}
	return a, nil
}

// restore checks that process pid's resource limits are still a's and sets
// its other attributes back to a: its OOM score adjustment, and the
// scheduling attributes, CPU affinity and I/O priority of every one of its
// threads. The caller makes sure nothing
// else runs in the sandbox, so nothing can change them again meanwhile;
// threads the agent starts while this runs are found by listing again.
func (a *agentAttrs) restore(pid int) error {
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return fmt.Errorf("read resource limits: %w", err)
	}
	if !bytes.Equal(limits, a.limits) {
		return errors.New("the agent's resource limits changed")
	}
	// A new thread inherits the attributes of the thread that started it:
	// once every listed thread is set, one more listing that finds no new
	// thread means none can have started from a thread not yet set.
	done := map[int]bool{}
	for pass := 0; ; pass++ {
		if pass == 100 {
			return fmt.Errorf("pid %d keeps starting threads", pid)
		}
		tids, err := threadIDs(pid)
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh++
			done[tid] = true
			if err := a.restoreThread(tid); err != nil {
				if errors.Is(err, unix.ESRCH) && tid != pid {
					continue // the thread ended meanwhile
				}
				return err
			}
		}
		if fresh == 0 {
			break
		}
	}
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), a.oomScoreAdj, 0); err != nil {
		return fmt.Errorf("restore OOM score adjustment of pid %d: %w", pid, err)
	}
	if a.autogroupNice != "" {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/autogroup", pid), []byte(a.autogroupNice), 0); err != nil {
			return fmt.Errorf("restore the scheduling autogroup's nice value of pid %d: %w", pid, err)
		}
	}
	return nil
}

func (a *agentAttrs) restoreThread(tid int) error {
	sched := a.sched
	// sched_getattr reports the utilization clamps but sets them only with
	// these flags; a kernel without clamping refuses the flags.
	sched.Flags |= unix.SCHED_FLAG_UTIL_CLAMP
	err := unix.SchedSetAttr(tid, &sched, 0)
	if errors.Is(err, unix.EOPNOTSUPP) {
		sched = a.sched
		err = unix.SchedSetAttr(tid, &sched, 0)
	}
	if err != nil {
		return fmt.Errorf("restore scheduling attributes of thread %d: %w", tid, err)
	}
	cpus := a.cpus
	if err := unix.SchedSetaffinity(tid, &cpus); err != nil {
		return fmt.Errorf("restore CPU affinity of thread %d: %w", tid, err)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), a.ioprio); e != 0 {
		return fmt.Errorf("restore I/O priority of thread %d: %w", tid, e)
	}
	return nil
}

// threadIDs lists the threads of process pid.
func threadIDs(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("list the threads of pid %d: %w", pid, err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
