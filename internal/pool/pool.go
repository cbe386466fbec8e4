// Package pool keeps warm sandboxes ready so a create can hand one over
// instead of booting a new one.
package pool

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// FillFunc creates one ready sandbox for the pool and returns its ID, or
// an empty ID and no error when the sandbox it made was handed out before
// the fill returned (a shared store's pool can hand it out as soon as it is
// recorded): a fill all the same, with nothing left to add.
type FillFunc func(ctx context.Context) (sandbox.ID, error)

// Pool holds up to Size ready sandboxes of one kind (a template) and
// refills itself in the background after each Take.
type Pool struct {
	key  string
	size int
	fill FillFunc
	log  *slog.Logger

	mu      sync.Mutex
	ready   []sandbox.ID
	filling int
	closed  bool
	// Counters for Stats.
	hits, misses, fills, fillErrors int64
	fillTime, lastFill              time.Duration

	kick chan struct{}
	done chan struct{}
	stop context.CancelFunc
}

// New returns a stopped pool; Start begins filling it.
func New(key string, size int, fill FillFunc, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.Default()
	}
	return &Pool{key: key, size: size, fill: fill, log: log.With("pool", key),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Key is what the pool holds (a template name).
func (p *Pool) Key() string { return p.key }

// Size is the number of ready sandboxes the pool aims for.
func (p *Pool) Size() int { return p.size }

// Start runs the refill loop until Stop.
func (p *Pool) Start(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	go p.loop(ctx)
	p.Kick()
}

// Kick asks the refill loop to check the pool level now.
func (p *Pool) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Take hands out a ready sandbox, if there is one, and triggers a refill.
func (p *Pool) Take() (sandbox.ID, bool) {
	p.mu.Lock()
	if len(p.ready) == 0 {
		p.misses++
		p.mu.Unlock()
		p.Kick()
		return "", false
	}
	// FIFO: the oldest sandbox goes first, so none sits for ever.
	id := p.ready[0]
	p.ready = p.ready[1:]
	p.hits++
	p.mu.Unlock()
	p.Kick()
	return id, true
}

// TakeID hands out id, chosen elsewhere (the shared store picks among a
// daemon's pooled sandboxes), counting a hit and triggering a refill. It
// reports whether id was waiting here.
func (p *Pool) TakeID(id sandbox.ID) bool {
	p.mu.Lock()
	found := false
	for i, r := range p.ready {
		if r == id {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			found = true
			break
		}
	}
	p.hits++
	p.mu.Unlock()
	p.Kick()
	return found
}

// Add puts a ready sandbox into the pool (a recovered one, or a fresh fill).
func (p *Pool) Add(id sandbox.ID) {
	p.mu.Lock()
	p.ready = append(p.ready, id)
	p.mu.Unlock()
}

// Remove drops id from the pool, reporting whether it was there (a pooled
// sandbox that died or expired).
func (p *Pool) Remove(id sandbox.ID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.ready {
		if r == id {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			p.Kick()
			return true
		}
	}
	return false
}

// Len is the number of ready sandboxes.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// Stats are a pool's level and counters since the daemon started.
type Stats struct {
	Template   string `json:"template"`
	Size       int    `json:"size"`
	Ready      int    `json:"ready"`
	Filling    int    `json:"filling"`
	Hits       int64  `json:"hits"`
	Misses     int64  `json:"misses"`
	Fills      int64  `json:"fills"`
	FillErrors int64  `json:"fill_errors"`
	// AvgFillMS and LastFillMS: how long making one ready sandbox took
	// (0 before the first fill).
	AvgFillMS  float64 `json:"avg_fill_ms"`
	LastFillMS float64 `json:"last_fill_ms"`
}

// Stats returns the pool's level and counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Stats{Template: p.key, Size: p.size, Ready: len(p.ready), Filling: p.filling,
		Hits: p.hits, Misses: p.misses, Fills: p.fills, FillErrors: p.fillErrors,
		LastFillMS: float64(p.lastFill.Microseconds()) / 1000}
	if p.fills > 0 {
		st.AvgFillMS = float64(p.fillTime.Microseconds()) / 1000 / float64(p.fills)
	}
	return st
}

// Stop ends the refill loop, waits for it, and returns the sandboxes still
// in the pool (the caller decides whether to destroy them).
func (p *Pool) Stop() []sandbox.ID {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.stop != nil {
		p.stop()
		<-p.done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := p.ready
	p.ready = nil
	return ids
}

func (p *Pool) loop(ctx context.Context) {
	defer close(p.done)
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-time.After(30 * time.Second): // periodic check, e.g. after a quota freed up
		}
		for ctx.Err() == nil {
			p.mu.Lock()
			need := p.size - len(p.ready) - p.filling
			if need <= 0 || p.closed {
				p.mu.Unlock()
				break
			}
			p.filling++
			p.mu.Unlock()

			start := time.Now()
			id, err := p.fill(ctx)
			took := time.Since(start)
			p.mu.Lock()
			p.filling--
			if err == nil {
				if id != "" {
					p.ready = append(p.ready, id)
				}
				p.fills++
				p.fillTime += took
				p.lastFill = took
			} else if ctx.Err() == nil {
				p.fillErrors++
			}
			p.mu.Unlock()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				backoff = min(max(2*backoff, 250*time.Millisecond), 30*time.Second)
				p.log.Warn("pool refill failed", "err", err, "retry_in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				continue
			}
			backoff = 0
		}
	}
}
