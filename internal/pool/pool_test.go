package pool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestStats counts hits, misses, fills and failed fills, and times fills.
func TestStats(t *testing.T) {
	var n atomic.Int32
	fill := func(ctx context.Context) (sandbox.ID, error) {
		if n.Add(1) == 1 {
			return "", errors.New("first fill fails")
		}
		time.Sleep(5 * time.Millisecond)
		return sandbox.ID("sb" + string(rune('a'+n.Load()))), nil
	}
	p := New("host", 1, fill, nil)
	if _, ok := p.Take(); ok {
		t.Fatal("a stopped, empty pool handed out a sandbox")
	}
	p.Start(context.Background())
	defer p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for p.Len() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := p.Take(); !ok {
		t.Fatal("no sandbox after the refill")
	}
	st := p.Stats()
	if st.Template != "host" || st.Size != 1 || st.Hits != 1 || st.Misses != 1 || st.FillErrors != 1 || st.Fills < 1 {
		t.Errorf("stats %+v", st)
	}
	if st.AvgFillMS < 5 || st.LastFillMS < 5 {
		t.Errorf("fill times %+v below the fill's 5 ms", st)
	}
}
