package history

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// The stored copy of a sandbox's history: a store document per sandbox,
// written by the replica that samples it every FlushEvery, so a restarted
// daemon (sandboxes kept across it) and the other replicas sharing the
// store read what was sampled before. The copy is merged down to at most
// storedPoints points, which bounds the store to about 60 KB a sandbox.
const (
	docKind = "metrics_history"
	// storedPoints caps the stored copy (each point is about 230 bytes of
	// JSON).
	storedPoints = 256
	// storedTTL bounds a copy nobody deletes (its sandbox went while no
	// daemon sampled it); a copy is rewritten at least every half of it.
	storedTTL = 7 * 24 * time.Hour
	// storeTimeout bounds one store call.
	storeTimeout = 5 * time.Second
)

type storedSeries struct {
	Points []Point `json:"points"`
}

// load reads id's stored copy (nil when there is none or no store).
func (h *History) load(ctx context.Context, id sandbox.ID) ([]Point, error) {
	if h.cfg.Docs == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	data, err := h.cfg.Docs.Doc(ctx, docKind, string(id))
	if err != nil || data == nil {
		return nil, err
	}
	var s storedSeries
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	return s.Points, nil
}

// write stores points as id's copy, merged down to storedPoints.
func (h *History) write(ctx context.Context, id sandbox.ID, points []Point) error {
	for len(points) > storedPoints {
		points = compact(points)
	}
	data, err := json.Marshal(storedSeries{Points: points})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	return h.cfg.Docs.UpdateDoc(ctx, docKind, "", string(id), func([]byte) ([]byte, time.Duration, error) {
		return data, storedTTL, nil
	})
}

// forget deletes id's stored copy.
func (h *History) forget(ctx context.Context, id sandbox.ID) error {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	return h.cfg.Docs.UpdateDoc(ctx, docKind, "", string(id), func([]byte) ([]byte, time.Duration, error) {
		return nil, 0, nil
	})
}

// Flush writes the series sampled since their last write (and those
// last written half a TTL ago) to the store, and deletes the copies of
// sandboxes gone since.
func (h *History) Flush(ctx context.Context) {
	if h.cfg.Docs == nil {
		return
	}
	now := h.cfg.now()
	h.mu.Lock()
	type job struct {
		id     sandbox.ID
		points []Point
	}
	var writes []job
	for id, s := range h.series {
		if h.dirty[id] || now.Sub(h.written[id]) > storedTTL/2 {
			writes = append(writes, job{id, append([]Point(nil), s...)})
		}
	}
	gone := h.gone
	h.gone = nil
	h.mu.Unlock()
	for _, w := range writes {
		if err := h.write(ctx, w.id, w.points); err != nil {
			h.cfg.Logger.Warn("metrics history: store write failed; kept in memory, retried at the next flush", "sandbox", w.id, "err", err)
			continue
		}
		h.mu.Lock()
		if _, ok := h.series[w.id]; ok {
			delete(h.dirty, w.id)
			h.written[w.id] = now
		}
		h.mu.Unlock()
	}
	for _, id := range gone {
		if err := h.forget(ctx, id); err != nil {
			h.cfg.Logger.Debug("metrics history: store delete failed (the copy expires)", "sandbox", id, "err", err)
		}
	}
	// Copies of sandboxes that went while no daemon sampled them expire;
	// bbolt keeps expired documents until they are pruned.
	if p, ok := h.cfg.Docs.(store.DocPruner); ok && now.Sub(h.pruned) > time.Hour {
		h.pruned = now
		pctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		if _, err := p.PruneDocs(pctx, docKind); err != nil {
			h.cfg.Logger.Debug("metrics history: prune failed", "err", err)
		}
	}
}

// RangeStored is Range for a sandbox this replica may not sample: its
// points in memory, else its stored copy's (another replica's sandbox, or
// one whose daemon restarted before sampling it again).
func (h *History) RangeStored(ctx context.Context, id sandbox.ID, start, end time.Time) []Point {
	if h.Len(id) > 0 || h.cfg.Docs == nil {
		return h.Range(id, start, end)
	}
	points, err := h.load(ctx, id)
	if err != nil {
		h.cfg.Logger.Debug("metrics history: store read failed", "sandbox", id, "err", err)
	}
	return between(points, start, end)
}
