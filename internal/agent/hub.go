package agent

import (
	"sync"
	"time"

	pb "github.com/agentbox/agentbox/api/proto/process"
)

const (
	// subscriberBuffer is how many events (each at most one 32 KiB read)
	// a subscriber may have queued before the producer starts waiting.
	subscriberBuffer = 64
	// slowSubscriberTimeout is how long the producer waits for a subscriber
	// with a full queue. The wait back-pressures the process (its pipe
	// fills and its writes block) for a while, then the subscriber is
	// disconnected so one stuck client cannot stall the process forever.
	slowSubscriberTimeout = 10 * time.Second
)

// hub fans a process's events out to any number of subscribers (the Start
// stream and Connect streams).
//
// Policy for slow consumers: a subscriber whose queue stays full for
// slowSubscriberTimeout is evicted — its stream ends with
// resource_exhausted — rather than silently losing events, so a client
// never sees output with holes in it. Other subscribers are unaffected
// once the eviction happened.
type hub struct {
	slow time.Duration

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

// subscriber is one consumer's view of a hub.
type subscriber struct {
	h       *hub
	ch      chan *pb.ProcessEvent
	gone    chan struct{} // closed by release: nobody reads ch any more
	evicted chan struct{} // closed when dropped for being too slow
	once    sync.Once
	evOnce  sync.Once
}

func newHub() *hub {
	return &hub{slow: slowSubscriberTimeout, subs: make(map[*subscriber]struct{})}
}

// subscribe adds a subscriber; ok is false once the process has ended.
func (h *hub) subscribe() (s *subscriber, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	s = &subscriber{
		h:       h,
		ch:      make(chan *pb.ProcessEvent, subscriberBuffer),
		gone:    make(chan struct{}),
		evicted: make(chan struct{}),
	}
	h.subs[s] = struct{}{}
	return s, true
}

// release unsubscribes s; safe to call more than once.
func (s *subscriber) release() {
	s.once.Do(func() {
		s.h.mu.Lock()
		delete(s.h.subs, s)
		s.h.mu.Unlock()
		close(s.gone)
	})
}

func (h *hub) evict(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.evOnce.Do(func() { close(s.evicted) })
}

func (h *hub) snapshot(final bool) []*subscriber {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs := make([]*subscriber, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	if final {
		h.closed = true
		clear(h.subs)
	}
	return subs
}

// publish delivers ev to every current subscriber, waiting at most h.slow
// for each full queue before evicting that subscriber.
func (h *hub) publish(ev *pb.ProcessEvent) {
	h.deliver(h.snapshot(false), ev)
}

// finish delivers the last event and closes the hub: later subscribe calls
// fail, so the process can be forgotten.
func (h *hub) finish(end *pb.ProcessEvent) {
	h.deliver(h.snapshot(true), end)
}

func (h *hub) deliver(subs []*subscriber, ev *pb.ProcessEvent) {
	var timer *time.Timer
	for _, s := range subs {
		select {
		case s.ch <- ev:
			continue
		case <-s.gone:
			continue
		default:
		}
		if timer == nil {
			timer = time.NewTimer(h.slow)
			defer timer.Stop()
		} else {
			timer.Reset(h.slow)
		}
		select {
		case s.ch <- ev:
		case <-s.gone:
		case <-timer.C:
			h.evict(s)
		}
	}
}
