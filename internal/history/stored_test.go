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
