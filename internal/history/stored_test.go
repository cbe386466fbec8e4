package history

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// TestHistoryStored: flushed series are read back by a new History over
// the same store (a restarted daemon) when it first sees the sandbox, and
// by RangeStored for a sandbox it does not sample (another replica's);
// the stored copy is merged to at most storedPoints; a sandbox gone has
// its copy deleted at the next flush.
func TestHistoryStored(t *testing.T) {
	docs := store.NewMemory()
	f := &fake{t: time.Unix(1_700_000_000, 0), boxes: map[sandbox.ID]Sandbox{"a": {Running: true, CPUs: 1}}}
	mk := func() *History {
		return New(Config{Resolution: 5 * time.Second, Points: 720, Docs: docs,
			Sandboxes: func() map[sandbox.ID]Sandbox { return f.boxes },
			Stats: func(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
				return backend.Stats{CPUSeconds: f.cpu, MemoryBytes: 1 << 20, Pids: 2}, nil
			}, now: func() time.Time { return f.t }})
	}
	h1 := mk()
	for range 400 {
		f.tick(h1)
	}
	h1.Flush(context.Background())
	before := h1.Range("a", time.Time{}, time.Time{})

	// Another replica (sampling nothing) reads the stored copy.
	other := New(Config{Resolution: 5 * time.Second, Points: 720, Docs: docs,
		Sandboxes: func() map[sandbox.ID]Sandbox { return nil },
		Stats:     func(context.Context, sandbox.ID) (backend.Stats, error) { return backend.Stats{}, nil }})
	got := other.RangeStored(context.Background(), "a", time.Time{}, time.Time{})
	if len(got) == 0 || len(got) > storedPoints {
		t.Fatalf("stored copy has %d points, want 1 to %d", len(got), storedPoints)
	}
	if !got[0].Time.Equal(before[0].Time) || !got[len(got)-1].Time.Equal(before[len(before)-1].Time) {
		t.Fatalf("stored copy covers %v..%v, memory %v..%v", got[0].Time, got[len(got)-1].Time, before[0].Time, before[len(before)-1].Time)
	}
	var span, want float64
	for _, p := range got {
		span += p.Span
	}
	for _, p := range before {
		want += p.Span
	}
	if span != want {
		t.Fatalf("stored copy spans %v s, memory %v s", span, want)
	}

	// A restarted daemon picks the series up and goes on from it.
	h2 := mk()
	f.tick(h2)
	after := h2.Range("a", time.Time{}, time.Time{})
	if len(after) != len(got)+1 || !after[0].Time.Equal(before[0].Time) {
		t.Fatalf("after a restart: %d points from %v, want the %d stored and one new, from %v", len(after), after[0].Time, len(got), before[0].Time)
	}

	// Gone: the next flush deletes the copy.
	f.boxes = map[sandbox.ID]Sandbox{}
	f.tick(h2)
	h2.Flush(context.Background())
	if pts := other.RangeStored(context.Background(), "a", time.Time{}, time.Time{}); len(pts) != 0 {
		t.Fatalf("the copy of a sandbox gone has %d points", len(pts))
	}
}

// TestHistoryLoadsBounded: a tick looks up at most loadsPerSample stored
// copies and samples only the sandboxes already looked up, so a restart
// among many sandboxes spreads its store reads over a few ticks.
func TestHistoryLoadsBounded(t *testing.T) {
	f := &fake{t: time.Unix(1_700_000_000, 0), boxes: map[sandbox.ID]Sandbox{}}
	for i := range 3*loadsPerSample + 1 {
		f.boxes[sandbox.ID(string(rune('a'+i%26))+string(rune('a'+i/26)))] = Sandbox{Running: true, CPUs: 1}
	}
	h := New(Config{Resolution: 5 * time.Second, Points: 64, Docs: store.NewMemory(),
		Sandboxes: func() map[sandbox.ID]Sandbox { return f.boxes },
		Stats:     func(context.Context, sandbox.ID) (backend.Stats, error) { return backend.Stats{Pids: 1}, nil },
		now:       func() time.Time { return f.t }})
	sampled := func() int {
		n := 0
		for id := range f.boxes {
			if h.Len(id) > 0 {
				n++
			}
		}
		return n
	}
	for tick, want := range []int{loadsPerSample, 2 * loadsPerSample, 3 * loadsPerSample, len(f.boxes), len(f.boxes)} {
		f.tick(h)
		if got := sampled(); got != want {
			t.Fatalf("after tick %d: %d sandboxes sampled, want %d", tick+1, got, want)
		}
	}
}
