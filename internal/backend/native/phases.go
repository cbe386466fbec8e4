package native

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/tracing"
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

// phaseTimer cuts an operation into phases. Each phase is a child span of
// the operation's context when that context is being traced (a create's
// span tree then shows where its time went), a PhaseSample when a hook is
// set, and a call of the backend's PhaseObserver when it has one. A nil
// timer (none of these) does nothing, so the hot path pays an atomic load
// and a context lookup per operation.
type phaseTimer struct {
	op        string
	fn        func(PhaseSample)                          // nil: no hook, no CPU figures
	observe   func(op, phase string, wall time.Duration) // nil: no observer
	ctx       context.Context                            // nil: not traced
	t         time.Time
	cpu, kids time.Duration
}

func startPhases(ctx context.Context, observe func(op, phase string, wall time.Duration), op string) *phaseTimer {
	fn := phaseHook.Load()
	traced := trace.SpanFromContext(ctx).IsRecording()
	if fn == nil && !traced && observe == nil {
		return nil
	}
	p := &phaseTimer{op: op, t: time.Now(), observe: observe}
	if traced {
		p.ctx = ctx
	}
	if fn != nil {
		p.fn = *fn
		p.cpu, p.kids = rusage(unix.RUSAGE_SELF), rusage(unix.RUSAGE_CHILDREN)
	}
	return p
}

// measuresCPU reports whether the hook wants CPU figures (which cost a walk
// of /proc, not paid for spans alone).
func (p *phaseTimer) measuresCPU() bool { return p != nil && p.fn != nil }

// mark ends the phase named phase and starts the next one.
func (p *phaseTimer) mark(phase string) {
	if p == nil {
		return
	}
	now := time.Now()
	if p.observe != nil {
		p.observe(p.op, phase, now.Sub(p.t))
	}
	if p.ctx != nil {
		_, span := tracing.Tracer().Start(p.ctx, phase, trace.WithTimestamp(p.t),
			trace.WithAttributes(attribute.String("agentbox.operation", p.op)))
		span.End(trace.WithTimestamp(now))
	}
	if p.fn != nil {
		cpu, kids := rusage(unix.RUSAGE_SELF), rusage(unix.RUSAGE_CHILDREN)
		p.fn(PhaseSample{Op: p.op, Phase: phase, Wall: now.Sub(p.t), CPU: cpu - p.cpu, ChildCPU: kids - p.kids})
		p.cpu, p.kids = cpu, kids
	}
	p.t = now
}

// report records a figure measured elsewhere (the sandbox init's own CPU).
func (p *phaseTimer) report(phase string, cpu time.Duration) {
	if !p.measuresCPU() {
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
