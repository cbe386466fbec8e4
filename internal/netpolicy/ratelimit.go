package netpolicy

import (
	"net/netip"
	"sync"
	"time"
)

// rateLimiter is a token bucket per source address. Only sources that are
// known sandboxes get a bucket, so the map is bounded by the number of
// sandboxes; forget drops a bucket when its sandbox goes away.
type rateLimiter struct {
	mu      sync.Mutex
	rate    float64 // tokens per second
	burst   float64
	buckets map[netip.Addr]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(perSecond int) *rateLimiter {
	return &rateLimiter{rate: float64(perSecond), burst: 2 * float64(perSecond), buckets: map[netip.Addr]*bucket{}}
}

// allow takes one token from a's bucket, reporting whether there was one.
func (r *rateLimiter) allow(a netip.Addr, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[a]
	if b == nil {
		b = &bucket{tokens: r.burst, last: now}
		r.buckets[a] = b
	}
	b.tokens = min(r.burst, b.tokens+now.Sub(b.last).Seconds()*r.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (r *rateLimiter) forget(a netip.Addr) {
	r.mu.Lock()
	delete(r.buckets, a)
	r.mu.Unlock()
}
