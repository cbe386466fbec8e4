package agentscope

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// countingPruner is a real bbolt store that records when it was swept.
type countingPruner struct {
	*store.Bolt
	mu     sync.Mutex
	sweeps []time.Time
	pruned int
}

func (c *countingPruner) PruneDocs(ctx context.Context, kind string) (int, error) {
	n, err := c.Bolt.PruneDocs(ctx, kind)
	c.mu.Lock()
	defer c.mu.Unlock()
	if kind == docKind {
		c.sweeps = append(c.sweeps, time.Now())
		c.pruned += n
	}
	return n, err
}

// A daemon restarted more often than the sweep interval still sweeps:
// the first sweep comes soon after the start (issue 40: in the soak, whose
// daemon restarts every 5 minutes, the 10-minute ticker never fired and
// released records piled up in the bbolt file).
func TestPruneSweepsSoonAfterStart(t *testing.T) {
	b, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	for _, name := range []string{"p-1", "p-2", "p-3"} {
		if err := b.UpdateDoc(ctx, docKind, "u", name, func([]byte) ([]byte, time.Duration, error) {
			return []byte(`{}`), time.Millisecond, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.UpdateDoc(ctx, docKind, "u", "live", func([]byte) ([]byte, time.Duration, error) { return []byte(`{}`), 0, nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)

	p := &countingPruner{Bolt: b}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		pruneEach(lctx, p, 20*time.Millisecond, time.Hour, slog.New(slog.DiscardHandler))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.sweeps)
		p.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sweep after the start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-done
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sweeps) != 1 || p.sweeps[0].Before(start.Add(20*time.Millisecond)) {
		t.Fatalf("sweeps %v (start %v): want one, after the first delay", p.sweeps, start)
	}
	if p.pruned != 3 {
		t.Fatalf("pruned %d expired records, want 3", p.pruned)
	}
	if got, err := b.GroupDocs(ctx, docKind, "u"); err != nil || len(got) != 1 {
		t.Fatalf("live records after the sweep: %d %v", len(got), err)
	}
}
