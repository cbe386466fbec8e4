// Package overview folds the lifecycle events and the metrics history into
// the time series the console's overview page draws (GET /v1/overview):
// sandboxes by state, creates and failures, and the CPU and memory in use,
// per time bucket.
package overview

import (
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/history"
)

// Bucket is one step of the series. The state counts are those at the
// bucket's end; the others are over the bucket.
type Bucket struct {
	Time     time.Time `json:"time"` // the bucket's start
	Running  int       `json:"running"`
	Paused   int       `json:"paused"`
	Stopped  int       `json:"stopped"`
	Total    int       `json:"total"`
	Creates  int       `json:"creates"`
	Failures int       `json:"failures"`
	// CPUCores is the CPU in use (cores), the sandboxes' mean over the
	// bucket summed; MemoryBytes their highest memory in it, summed.
	CPUCores    float64 `json:"cpu_cores"`
	MemoryBytes int64   `json:"memory_bytes"`
}

// Range is a window the overview covers, and its bucket size.
type Range struct {
	Name string
	Span time.Duration
	Step time.Duration
}

// Ranges are the windows GET /v1/overview serves, by name.
var Ranges = map[string]Range{
	"1h":  {"1h", time.Hour, time.Minute},
	"24h": {"24h", 24 * time.Hour, 15 * time.Minute},
	"7d":  {"7d", 7 * 24 * time.Hour, 2 * time.Hour},
}

// ErrRange is returned by ParseRange for a name not in Ranges.
var ErrRange = fmt.Errorf("range must be 1h, 24h or 7d")

// ParseRange returns the named range ("" is 1h).
func ParseRange(name string) (Range, error) {
	if name == "" {
		name = "1h"
	}
	r, ok := Ranges[name]
	if !ok {
		return Range{}, ErrRange
	}
	return r, nil
}

// Failure reports whether an event is a sandbox failing rather than being
// ended on purpose: lost, or stopped or killed by a limit, its agent's
// death, a lost node or the daemon's housekeeping.
func Failure(e *events.Event) bool {
	switch e.Type {
	case events.Lost:
		return true
	case events.Stopped, events.Killed:
		switch e.Cause.Kind {
		case events.CauseOOMKill, events.CausePidsLimit, events.CauseAgentExit, events.CauseNodeLost, events.CauseInternal:
			return true
		}
	}
	return false
}

// Live is a sandbox that exists now and its state, the ground truth the
// replayed events are reconciled with.
type Live struct {
	ID    string
	State string // running, paused, stopped
}

// Buckets replays evs (oldest first, every retained event of the caller)
// into n buckets of step from start. A live sandbox the events never
// created (it predates their retention) counts in every bucket in its
// current state.
func Buckets(evs []events.Event, live []Live, start time.Time, step time.Duration, n int) []Bucket {
	out := make([]Bucket, n)
	for i := range out {
		out[i].Time = start.Add(time.Duration(i) * step)
	}
	state := map[string]string{}
	snapshot := func(b *Bucket) {
		b.Running, b.Paused, b.Stopped = 0, 0, 0
		for _, s := range state {
			switch s {
			case "paused":
				b.Paused++
			case "stopped":
				b.Stopped++
			default:
				b.Running++
			}
		}
		b.Total = len(state)
	}
	cur := 0 // the bucket whose end has not been snapshotted yet
	for i := range evs {
		e := &evs[i]
		idx := int(e.Time.Sub(start) / step)
		if e.Time.Before(start) {
			idx = -1
		}
		for idx >= 0 && cur < n && cur < idx {
			snapshot(&out[cur])
			cur++
		}
		switch e.Type {
		case events.Created, events.Started, events.Resumed, events.Recovered:
			state[e.SandboxID] = "running"
		case events.Paused:
			state[e.SandboxID] = "paused"
		case events.Stopped:
			state[e.SandboxID] = "stopped"
		case events.Killed, events.Expired, events.Lost:
			delete(state, e.SandboxID)
		default:
			if _, ok := state[e.SandboxID]; !ok {
				state[e.SandboxID] = "running"
			}
		}
		if idx >= 0 && idx < n {
			if e.Type == events.Created {
				out[idx].Creates++
			}
			if Failure(e) {
				out[idx].Failures++
			}
		}
	}
	for ; cur < n; cur++ {
		snapshot(&out[cur])
	}
	// The last bucket ends now: it shows the sandboxes as they are.
	known := map[string]bool{}
	for _, e := range evs {
		known[e.SandboxID] = true
	}
	for _, l := range live {
		if known[l.ID] {
			continue
		}
		for i := range out {
			out[i].Total++
			switch l.State {
			case "paused":
				out[i].Paused++
			case "stopped":
				out[i].Stopped++
			default:
				out[i].Running++
			}
		}
	}
	return out
}

// AddUsage adds one sandbox's history points to the buckets: its mean CPU
// (cores) and its highest memory in each bucket.
func AddUsage(out []Bucket, start time.Time, step time.Duration, points []history.Point) {
	n := len(out)
	sum := make([]float64, n)
	cnt := make([]int, n)
	mem := make([]int64, n)
	for _, p := range points {
		if p.Time.Before(start) {
			continue
		}
		i := int(p.Time.Sub(start) / step)
		if i >= n {
			continue
		}
		sum[i] += p.CPUUsedPct / 100 * float64(p.CPUCount)
		cnt[i]++
		mem[i] = max(mem[i], p.MemoryBytes)
	}
	for i := range out {
		if cnt[i] > 0 {
			out[i].CPUCores += sum[i] / float64(cnt[i])
		}
		out[i].MemoryBytes += mem[i]
	}
}
