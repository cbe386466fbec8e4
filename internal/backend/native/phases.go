package native

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// PhaseSample is the cost of one step of a create or destroy: wall time,
// the CPU the daemon process spent (all its threads) and the CPU of child
// processes reaped meanwhile. Samples exist only while a hook is set (see
// SetPhaseHook): they back the profile in docs/benchmarks.md ("Fast path").
type PhaseSample struct {
	Op, Phase string
	Wall      time.Duration
	CPU       time.Duration
	ChildCPU  time.Duration
}

var phaseHook atomic.Pointer[func(PhaseSample)]

// SetPhaseHook makes every later create and destroy report its steps to fn
// (nil turns it off). The CPU figures are process-wide: they are only
// meaningful when one operation runs at a time.
func SetPhaseHook(fn func(PhaseSample)) {
	if fn == nil {
		phaseHook.Store(nil)
		return
	}
	phaseHook.Store(&fn)
}

// phaseTimer cuts an operation into phases; a nil timer (no hook) does
// nothing, so the hot path pays one atomic load per operation.
type phaseTimer struct {
	op        string
	fn        func(PhaseSample)
	t         time.Time
	cpu, kids time.Duration
}

func startPhases(op string) *phaseTimer {
	fn := phaseHook.Load()
	if fn == nil {
		return nil
	}
	p := &phaseTimer{op: op, fn: *fn}
	p.t, p.cpu, p.kids = time.Now(), rusage(unix.RUSAGE_SELF), rusage(unix.RUSAGE_CHILDREN)
	return p
}

// mark ends the phase named phase and starts the next one.
func (p *phaseTimer) mark(phase string) {
	if p == nil {
		return
	}
	now, cpu, kids := time.Now(), rusage(unix.RUSAGE_SELF), rusage(unix.RUSAGE_CHILDREN)
	p.fn(PhaseSample{Op: p.op, Phase: phase, Wall: now.Sub(p.t), CPU: cpu - p.cpu, ChildCPU: kids - p.kids})
	p.t, p.cpu, p.kids = now, cpu, kids
}

// report records a figure measured elsewhere (the sandbox init's own CPU).
func (p *phaseTimer) report(phase string, cpu time.Duration) {
	if p == nil {
		return
	}
	p.fn(PhaseSample{Op: p.op, Phase: phase, ChildCPU: cpu})
}

func rusage(who int) time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(who, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time of every thread of pid so far, from
// /proc/<pid>/task/*/schedstat (nanoseconds, unlike stat's clock ticks).
func processCPU(pid int) time.Duration {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	var total time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}
