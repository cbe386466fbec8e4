package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/storelog"
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
// (the manager's state changes): one writer (storelog) appends what was
// emitted, in order, in batches, then tells subscribers and waiting
// streams. Events of one sandbox are emitted in the order its changes
// happen (the manager serialises them), so they are numbered in that order.
type Log struct {
	cfg Config
	log *slog.Logger
	w   *storelog.Writer[Event]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced after each append
	subs    []func([]Event)
}

// New returns a Log; Start runs it.
func New(cfg Config) *Log {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Log{cfg: cfg, log: cfg.Logger, changed: make(chan struct{})}
	l.w = storelog.New(storelog.Config[Event]{Store: cfg.Store, Name: "event", Retention: cfg.Retention, Max: cfg.Max,
		Buffer: cfg.Buffer, TrimEvery: cfg.TrimEvery, Logger: cfg.Logger,
		Encode: func(e Event) (time.Time, []byte, error) {
			data, err := e.encode()
			if err != nil {
				err = fmt.Errorf("event %s of %s: %w", e.Type, e.SandboxID, err)
			}
			return e.Time, data, err
		},
		Written: l.written})
	return l
}

// Start runs the writer and the retention loop until Close.
func (l *Log) Start() { l.w.Start() }

// Close writes what was emitted before it (bounded by ctx) and stops.
func (l *Log) Close(ctx context.Context) { l.w.Close(ctx) }

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
	if !l.w.Add(e) {
		l.log.Warn("event dropped: the event log is behind", "type", e.Type, "sandbox", e.SandboxID)
	}
}

// Dropped and Recorded count events since start.
func (l *Log) Dropped() int64  { return l.w.Dropped() }
func (l *Log) Recorded() int64 { return l.w.Recorded() }

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

// written numbers a stored batch, wakes the streams and tells the
// subscribers.
func (l *Log) written(first uint64, batch []Event) {
	for i := range batch {
		batch[i].ID = first + uint64(i)
	}
	l.mu.Lock()
	close(l.changed)
	l.changed = make(chan struct{})
	subs := append([](func([]Event)){}, l.subs...)
	l.mu.Unlock()
	for _, fn := range subs {
		fn(batch)
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
	decode := func(seq uint64, data []byte) (Event, error) {
		e, err := decode(seq, data)
		if err != nil {
			l.log.Warn("skipping an undecodable event", "err", err)
		}
		return e, err
	}
	evs, next, more, err := storelog.Scan(ctx, l.cfg.Store, q.After, q.Limit, decode, q.match)
	if err != nil {
		return Page{}, fmt.Errorf("read events: %w", err)
	}
	return Page{Events: evs, Next: next, More: more}, nil
}
