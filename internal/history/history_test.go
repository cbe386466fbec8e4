package history

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// fake is a clock and a sandbox whose CPU time grows by one second a tick.
type fake struct {
	t     time.Time
	cpu   float64
	boxes map[sandbox.ID]Sandbox
}

func newTest(points int) (*History, *fake) {
	f := &fake{t: time.Unix(1_700_000_000, 0), boxes: map[sandbox.ID]Sandbox{"a": {Running: true, CPUs: 2}}}
	h := New(Config{Resolution: 5 * time.Second, Points: points,
		Sandboxes: func() map[sandbox.ID]Sandbox { return f.boxes },
		Stats: func(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
			return backend.Stats{CPUSeconds: f.cpu, MemoryBytes: int64(f.cpu) * 10, Pids: 3}, nil
		}, now: func() time.Time { return f.t }})
	return h, f
}

func (f *fake) tick(h *History) {
	h.Sample(context.Background())
	f.t = f.t.Add(5 * time.Second)
	f.cpu += 5
}

func TestHistoryCoversWholeLifeBounded(t *testing.T) {
	h, f := newTest(16)
	start := f.t
	for range 1000 {
		f.tick(h)
	}
	pts := h.Range("a", time.Time{}, time.Time{})
	if len(pts) > 16 || len(pts) < 8 {
		t.Fatalf("%d points, want at most 16 and at least 8", len(pts))
	}
	if !pts[0].Time.Equal(start) {
		t.Fatalf("first point at %v, want the first sample's %v", pts[0].Time, start)
	}
	var span float64
	for i, p := range pts {
		span += p.Span
		if i > 0 && !pts[i-1].Time.Before(p.Time) {
			t.Fatalf("points out of order at %d", i)
		}
		if i > 0 && p.CPUUsedPct != 50 {
			t.Fatalf("point %d cpu %v%%, want 50 (5 s of CPU per 5 s on 2 CPUs)", i, p.CPUUsedPct)
		}
	}
	if span != 1000*5 {
		t.Fatalf("points cover %v s, want 5000", span)
	}
	if last := pts[len(pts)-1]; last.Span != 5 {
		t.Fatalf("newest point spans %v s, want the resolution", last.Span)
	}
}

func TestHistoryRangeAndForget(t *testing.T) {
	h, f := newTest(100)
	t0 := f.t
	for range 10 {
		f.tick(h)
	}
	got := h.Range("a", t0.Add(10*time.Second), t0.Add(20*time.Second))
	if len(got) != 3 || !got[0].Time.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("range gave %d points from %v, want 3 from +10s", len(got), got)
	}
	if n := len(h.Range("a", t0.Add(time.Hour), time.Time{})); n != 0 {
		t.Fatalf("range after the last point gave %d", n)
	}
	f.boxes = map[sandbox.ID]Sandbox{"a": {Running: false}}
	f.tick(h)
	if h.Len("a") != 10 {
		t.Fatalf("a stopped sandbox keeps %d points, want 10 and no new one", h.Len("a"))
	}
	f.boxes = map[sandbox.ID]Sandbox{}
	f.tick(h)
	if h.Len("a") != 0 {
		t.Fatal("a gone sandbox's history stays")
	}
}
