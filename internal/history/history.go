// Package history keeps every running sandbox's resource usage over time:
// a sampler reads each sandbox's stats at a fixed resolution and keeps the
// points in memory, bounded per sandbox by merging the oldest points
// pairwise, so a sandbox's whole life stays covered at a resolution that
// falls with age. Sampling runs on its own goroutine: create and exec do
// no extra work for it.
package history

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// loadsPerSample bounds the stored copies one Sample looks up.
const loadsPerSample = 32

// Point is one sample of a sandbox, or several merged ones covering Span.
type Point struct {
	Time           time.Time `json:"timestamp"`    // start of the span
	Span           float64   `json:"span_seconds"` // seconds the point covers
	CPUSeconds     float64   `json:"cpu_seconds"`  // cumulative, at the span's end
	CPUCount       int       `json:"cpu_count"`
	CPUUsedPct     float64   `json:"cpu_used_pct"`     // mean over the span, of CPUCount CPUs
	MemoryBytes    int64     `json:"memory_bytes"`     // highest sample in the span
	MemoryLimit    int64     `json:"memory_limit"`     //
	DiskUsedBytes  int64     `json:"disk_used_bytes"`  // at the span's end
	DiskTotalBytes int64     `json:"disk_total_bytes"` //
	Pids           int64     `json:"pids"`             // highest sample in the span
	NetworkDenials uint64    `json:"network_denials"`  // cumulative, at the span's end
	NetworkTxBytes uint64    `json:"network_tx_bytes"` // sent by the sandbox, cumulative, at the span's end
	NetworkRxBytes uint64    `json:"network_rx_bytes"` // received by the sandbox, cumulative, at the span's end
}

// Sandbox is what the sampler needs to know of one sandbox.
type Sandbox struct {
	Running bool
	CPUs    float64
}

// Config configures a History.
type Config struct {
	Resolution time.Duration
	Points     int // per sandbox, at least 16
	// Sandboxes lists the sandboxes that exist; a sandbox's history goes
	// when it is no longer listed. Only running ones are sampled.
	Sandboxes func() map[sandbox.ID]Sandbox
	Stats     func(ctx context.Context, id sandbox.ID) (backend.Stats, error)
	// Docs, when set, keeps a copy of each series (stored.go), written
	// every FlushEvery (0: a default of 30 s).
	Docs       store.Docs
	FlushEvery time.Duration
	Logger     *slog.Logger
	now        func() time.Time // tests
}

// History is the sampler and its points.
type History struct {
	cfg    Config
	mu     sync.Mutex
	series map[sandbox.ID][]Point
	// The stored copies (stored.go): series with points not yet written,
	// when each was last written, sandboxes whose copy was looked for, and
	// those gone whose copy is to be deleted.
	dirty   map[sandbox.ID]bool
	written map[sandbox.ID]time.Time
	tried   map[sandbox.ID]bool
	gone    []sandbox.ID
	pruned  time.Time // the last prune of expired copies (Flush's goroutine only)
	stop    chan struct{}
	done    chan struct{}
}

// New returns a History; Start begins sampling.
func New(cfg Config) *History {
	if cfg.Points < 16 {
		cfg.Points = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 30 * time.Second
	}
	return &History{cfg: cfg, series: map[sandbox.ID][]Point{}, dirty: map[sandbox.ID]bool{}, written: map[sandbox.ID]time.Time{},
		tried: map[sandbox.ID]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// Resolution is the time between two samples.
func (h *History) Resolution() time.Duration { return h.cfg.Resolution }

// Start samples every Resolution until Close.
func (h *History) Start() {
	go func() {
		defer close(h.done)
		t := time.NewTicker(h.cfg.Resolution)
		defer t.Stop()
		f := time.NewTicker(h.cfg.FlushEvery)
		defer f.Stop()
		h.Sample(context.Background())
		for {
			select {
			case <-h.stop:
				h.Flush(context.Background()) // what a restart would lose
				return
			case <-t.C:
				h.Sample(context.Background())
			case <-f.C:
				h.Flush(context.Background())
			}
		}
	}()
}

// Close stops sampling.
func (h *History) Close() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// Sample takes one sample of every running sandbox and forgets the
// sandboxes that are gone.
func (h *History) Sample(ctx context.Context) {
	boxes := h.cfg.Sandboxes()
	h.mu.Lock()
	for id := range h.tried {
		if _, ok := boxes[id]; !ok {
			delete(h.series, id)
			delete(h.dirty, id)
			delete(h.written, id)
			delete(h.tried, id)
			h.gone = append(h.gone, id)
		}
	}
	var unseen []sandbox.ID
	for id := range boxes {
		if !h.tried[id] {
			if h.cfg.Docs == nil {
				h.tried[id] = true // nothing to look up
				continue
			}
			unseen = append(unseen, id)
		}
	}
	h.mu.Unlock()
	// A sandbox first seen here may have been sampled before: by this
	// daemon before a restart, or by the replica that ran it. A tick looks
	// up a bounded number, and none more once the store failed, so a
	// restart among many sandboxes, or the store away, never holds the
	// sampling up; the rest are looked up at the next ticks.
	if len(unseen) > loadsPerSample {
		unseen = unseen[:loadsPerSample]
	}
	for _, id := range unseen {
		lctx, cancel := context.WithTimeout(ctx, min(storeTimeout, h.cfg.Resolution))
		points, err := h.load(lctx, id)
		cancel()
		h.mu.Lock()
		h.tried[id] = true // a failed lookup is not retried: the sandbox's history starts now
		if len(points) > 0 && len(h.series[id]) == 0 {
			h.series[id] = points
			h.written[id] = h.cfg.now()
		}
		h.mu.Unlock()
		if err != nil {
			h.cfg.Logger.Warn("metrics history: the stored points of a sandbox could not be read; its history starts now", "sandbox", id, "err", err)
			break
		}
	}
	h.mu.Lock()
	tried := make(map[sandbox.ID]bool, len(boxes))
	for id := range boxes {
		tried[id] = h.tried[id]
	}
	h.mu.Unlock()
	for id, b := range boxes {
		// Sampled once its stored points were looked up (a tick or two
		// after a restart among many sandboxes), so none are overwritten.
		if !b.Running || !tried[id] {
			continue
		}
		// One slow read must not hold the others past a tick.
		sctx, cancel := context.WithTimeout(ctx, h.cfg.Resolution)
		st, err := h.cfg.Stats(sctx, id)
		cancel()
		if err != nil {
			h.cfg.Logger.Debug("metrics sample", "sandbox", id, "err", err)
			continue
		}
		h.add(id, b, st, h.cfg.now())
	}
}

func (h *History) add(id sandbox.ID, b Sandbox, st backend.Stats, now time.Time) {
	cpus := int(math.Max(1, math.Ceil(b.CPUs)))
	p := Point{Time: now.UTC(), Span: h.cfg.Resolution.Seconds(), CPUSeconds: st.CPUSeconds, CPUCount: cpus,
		MemoryBytes: st.MemoryBytes, MemoryLimit: st.MemoryLimit, DiskUsedBytes: st.DiskUsedBytes,
		DiskTotalBytes: st.DiskTotalBytes, Pids: st.Pids, NetworkDenials: st.NetworkDenials,
		NetworkTxBytes: st.NetworkTxBytes, NetworkRxBytes: st.NetworkRxBytes}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.series[id]
	if n := len(s); n > 0 {
		prev := s[n-1]
		if el := now.Sub(prev.Time).Seconds(); el > 0 && st.CPUSeconds >= prev.CPUSeconds {
			p.CPUUsedPct = round2(math.Min(100, (st.CPUSeconds-prev.CPUSeconds)/el/float64(cpus)*100))
		}
	}
	if len(s) >= h.cfg.Points {
		s = compact(s)
	}
	h.series[id] = append(s, p)
	h.dirty[id] = true
}

// compact merges the older half of s pairwise: the points stay in time
// order and cover the same time, the oldest at half their resolution.
func compact(s []Point) []Point {
	half := len(s) / 2
	out := make([]Point, 0, len(s))
	for i := 0; i+1 < half; i += 2 {
		out = append(out, merge(s[i], s[i+1]))
	}
	if half%2 == 1 {
		out = append(out, s[half-1])
	}
	return append(out, s[half:]...)
}

func merge(a, b Point) Point {
	m := b
	m.Time = a.Time
	m.Span = a.Span + b.Span
	if m.Span > 0 {
		m.CPUUsedPct = round2((a.CPUUsedPct*a.Span + b.CPUUsedPct*b.Span) / m.Span)
	}
	m.MemoryBytes = max(a.MemoryBytes, b.MemoryBytes)
	m.Pids = max(a.Pids, b.Pids)
	return m
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// Range returns id's points whose time is in [start, end] (a zero bound is
// open), oldest first.
func (h *History) Range(id sandbox.ID, start, end time.Time) []Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	return between(h.series[id], start, end)
}

// between returns a copy of the points of s whose time is in [start, end]
// (a zero bound is open).
func between(s []Point, start, end time.Time) []Point {
	i := 0
	if !start.IsZero() {
		i = sort.Search(len(s), func(k int) bool { return !s[k].Time.Before(start) })
	}
	j := len(s)
	if !end.IsZero() {
		j = sort.Search(len(s), func(k int) bool { return s[k].Time.After(end) })
	}
	if i >= j {
		return []Point{}
	}
	return append([]Point(nil), s[i:j]...)
}

// Len is how many points id has.
func (h *History) Len(id sandbox.ID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.series[id])
}
