package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Config configures a Log.
type Config struct {
	Store store.EventLog
	// Node names this replica in the events it records.
	Node string
	// Retention and Max bound what is kept: events older than Retention
	// and the oldest beyond Max are trimmed (0: no bound of that kind).
	Retention time.Duration
	Max       int
	// Buffer is how many events may wait to be written (default 4096);
	// more are dropped and counted, never waited for.
	Buffer int
	// TrimEvery is how often retention is applied (default a minute).
	TrimEvery time.Duration
	Logger    *slog.Logger
}

// Log records events and reads them back. Emit never blocks its caller
// (the manager's state changes): one writer goroutine appends what was
// emitted, in order, in batches, then tells subscribers and waiting
// streams. Events of one sandbox are emitted in the order its changes
// happen (the manager serialises them), so they are numbered in that order.
type Log struct {
	cfg Config
	log *slog.Logger
	in  chan Event

	mu      sync.Mutex
	changed chan struct{} // closed and replaced after each append
	subs    []func([]Event)

	dropped  atomic.Int64
	recorded atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// New returns a Log; Start runs it.
func New(cfg Config) *Log {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 4096
	}
	if cfg.TrimEvery <= 0 {
		cfg.TrimEvery = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Log{cfg: cfg, log: cfg.Logger, in: make(chan Event, cfg.Buffer),
		changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

// Start runs the writer and the retention loop until Close.
func (l *Log) Start() {
	go l.run()
}

// Close writes what was emitted before it (bounded by ctx) and stops.
func (l *Log) Close(ctx context.Context) {
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.done:
	case <-ctx.Done():
	}
}

// Emit records e (its Time and Node are filled in when empty). It never
// blocks: with the buffer full (the store far slower than events come)
// the event is dropped, logged and counted.
func (l *Log) Emit(e Event) {
	if l == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if e.Node == "" {
		e.Node = l.cfg.Node
	}
	select {
	case l.in <- e:
	default:
		l.dropped.Add(1)
		l.log.Warn("event dropped: the event log is behind", "type", e.Type, "sandbox", e.SandboxID)
	}
}

// Dropped and Recorded count events since start.
func (l *Log) Dropped() int64  { return l.dropped.Load() }
func (l *Log) Recorded() int64 { return l.recorded.Load() }

// Subscribe calls fn with each batch of events once recorded (with their
// IDs), in order, on the writer goroutine: fn must not block.
func (l *Log) Subscribe(fn func([]Event)) {
	l.mu.Lock()
	l.subs = append(l.subs, fn)
	l.mu.Unlock()
}

// Changed returns a channel closed when this replica records events next
// (other replicas' events are seen by reading again: Streams poll too).
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

func (l *Log) run() {
	defer close(l.done)
	trim := time.NewTicker(l.cfg.TrimEvery)
	defer trim.Stop()
	l.trim()
	for {
		select {
		case e := <-l.in:
			l.write(e)
		case <-trim.C:
			l.trim()
		case <-l.stop:
			for {
				select {
				case e := <-l.in:
					l.write(e)
				default:
					return
				}
			}
		}
	}
}

// write appends e and whatever else waits (one store write for a burst).
func (l *Log) write(first Event) {
	batch := []Event{first}
	for len(batch) < 256 {
		select {
		case e := <-l.in:
			batch = append(batch, e)
			continue
		default:
		}
		break
	}
	entries := make([]store.LogEntry, 0, len(batch))
	kept := batch[:0]
	for _, e := range batch {
		data, err := e.encode()
		if err != nil {
			l.log.Error("encode event", "type", e.Type, "sandbox", e.SandboxID, "err", err)
			continue
		}
		entries = append(entries, store.LogEntry{Time: e.Time, Data: data})
		kept = append(kept, e)
	}
	var seq uint64
	var err error
	for attempt := range 5 { // the store may be away a moment (Redis)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		seq, err = l.cfg.Store.AppendEvents(ctx, entries)
		cancel()
		if err == nil {
			break
		}
		l.log.Warn("record events; retrying", "events", len(entries), "attempt", attempt+1, "err", err)
		select {
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		case <-l.stop:
		}
	}
	if err != nil {
		l.dropped.Add(int64(len(entries)))
		l.log.Error("events lost: the store refused them", "events", len(entries), "err", err)
		return
	}
	for i := range kept {
		kept[i].ID = seq + uint64(i)
	}
	l.recorded.Add(int64(len(kept)))
	l.mu.Lock()
	close(l.changed)
	l.changed = make(chan struct{})
	subs := append([](func([]Event)){}, l.subs...)
	l.mu.Unlock()
	for _, fn := range subs {
		fn(kept)
	}
}

func (l *Log) trim() {
	if l.cfg.Retention <= 0 && l.cfg.Max <= 0 {
		return
	}
	var before time.Time
	if l.cfg.Retention > 0 {
		before = time.Now().Add(-l.cfg.Retention)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := l.cfg.Store.TrimEvents(ctx, before, l.cfg.Max); err != nil {
		l.log.Warn("trim events", "err", err)
	} else if n > 0 {
		l.log.Debug("events trimmed", "events", n)
	}
}

// Query selects events.
type Query struct {
	// Owner: only this tenant's events ("" : everyone's, for operators).
	Owner   string
	Sandbox string
	Types   []Type
	// Since and Until bound the events' times (zero: unbounded).
	Since, Until time.Time
	// After is the cursor: events numbered above it.
	After uint64
	// Limit caps the events returned (default 100, at most MaxLimit).
	Limit int
}

// MaxLimit is the most events one Query returns.
const MaxLimit = 1000

// scanBudget bounds the entries one Query reads: a selective filter over a
// long log returns a partial (maybe empty) page with More and a cursor.
const scanBudget = 20000

// Page is a Query's answer.
type Page struct {
	Events []Event `json:"events"`
	// Next is the cursor of the following page (the last event read,
	// matching or not); More says whether the log goes on after it.
	Next uint64 `json:"next_cursor"`
	More bool   `json:"has_more"`
}

func (q *Query) match(e *Event) bool {
	if q.Owner != "" && e.Owner != q.Owner {
		return false
	}
	if q.Sandbox != "" && e.SandboxID != q.Sandbox {
		return false
	}
	if len(q.Types) > 0 {
		ok := false
		for _, t := range q.Types {
			ok = ok || t == e.Type
		}
		if !ok {
			return false
		}
	}
	if !q.Since.IsZero() && e.Time.Before(q.Since) {
		return false
	}
	if !q.Until.IsZero() && e.Time.After(q.Until) {
		return false
	}
	return true
}

// Check validates q (a caller's filters) and applies its defaults.
func (q *Query) Check() error {
	if q.Limit < 0 || q.Limit > MaxLimit {
		return sandbox.Invalid("limit", "limit must be between 1 and %d", MaxLimit)
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	for _, t := range q.Types {
		if !t.Valid() {
			return sandbox.Invalid("type", "unknown event type %q (want one of %v)", t, Types)
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return sandbox.Invalid("until", "until is before since")
	}
	return nil
}

// Query returns the events matching q, oldest first, from q.After on.
func (l *Log) Query(ctx context.Context, q Query) (Page, error) {
	if err := q.Check(); err != nil {
		return Page{}, err
	}
	page := Page{Events: []Event{}, Next: q.After}
	scanned := 0
	for scanned < scanBudget {
		batch, err := l.cfg.Store.ReadEvents(ctx, page.Next, min(500, scanBudget-scanned))
		if err != nil {
			return Page{}, fmt.Errorf("read events: %w", err)
		}
		if len(batch) == 0 {
			return page, nil
		}
		for _, ent := range batch {
			scanned++
			page.Next = ent.Seq
			e, err := decode(ent.Seq, ent.Data)
			if err != nil {
				l.log.Warn("skipping an undecodable event", "err", err)
				continue
			}
			if q.match(&e) {
				page.Events = append(page.Events, e)
				if len(page.Events) == q.Limit {
					more, err := l.cfg.Store.ReadEvents(ctx, page.Next, 1)
					page.More = err == nil && len(more) > 0
					return page, nil
				}
			}
		}
	}
	more, err := l.cfg.Store.ReadEvents(ctx, page.Next, 1)
	page.More = err == nil && len(more) > 0
	return page, nil
}
