package overview

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/history"
)

func TestBuckets(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return start.Add(time.Duration(min) * time.Minute) }
	evs := []events.Event{
		{Time: at(-10), Type: events.Created, SandboxID: "old"}, // before the window: state only
		{Time: at(0), Type: events.Created, SandboxID: "a"},
		{Time: at(0), Type: events.Created, SandboxID: "b"},
		{Time: at(1), Type: events.Paused, SandboxID: "a"},
		{Time: at(2), Type: events.Killed, SandboxID: "b", Cause: events.Cause{Kind: events.CauseAPI}},
		{Time: at(2), Type: events.Stopped, SandboxID: "old", Cause: events.Cause{Kind: events.CauseOOMKill}},
		{Time: at(3), Type: events.Lost, SandboxID: "old"},
	}
	live := []Live{{ID: "a", State: "paused"}, {ID: "ancient", State: "running"}}
	b := Buckets(evs, live, start, time.Minute, 5)
	type row struct{ run, paused, stopped, total, creates, failures int }
	want := []row{{4, 0, 0, 4, 2, 0}, {3, 1, 0, 4, 0, 0}, {1, 1, 1, 3, 0, 1}, {1, 1, 0, 2, 0, 1}, {1, 1, 0, 2, 0, 0}}
	for i, w := range want {
		got := row{b[i].Running, b[i].Paused, b[i].Stopped, b[i].Total, b[i].Creates, b[i].Failures}
		if got != w {
			t.Errorf("bucket %d: got %+v, want %+v", i, got, w)
		}
	}
	AddUsage(b, start, time.Minute, []history.Point{
		{Time: at(0), CPUUsedPct: 50, CPUCount: 2, MemoryBytes: 100},
		{Time: at(0).Add(30 * time.Second), CPUUsedPct: 100, CPUCount: 2, MemoryBytes: 300},
		{Time: at(9), CPUUsedPct: 100, CPUCount: 2, MemoryBytes: 300}, // after the window
	})
	if b[0].CPUCores != 1.5 || b[0].MemoryBytes != 300 || b[1].CPUCores != 0 {
		t.Errorf("usage: %+v %+v", b[0], b[1])
	}
	if _, err := ParseRange("2d"); err != ErrRange {
		t.Errorf("ParseRange(2d): %v", err)
	}
}
