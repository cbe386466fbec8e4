// Package storelog writes and reads a store's append-only logs
// (store.EventLog): the lifecycle events' and the audit log's. Its Writer
// appends records from one goroutine, in order and in batches, and never
// blocks whoever adds them (a full buffer drops the record and counts
// it); it also applies the log's retention. Scan reads them back through
// a filter, within a budget.
package storelog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// Config configures a Writer of records of type T.
type Config[T any] struct {
	Store store.EventLog
	// Name says what a record is in log lines ("event", "audit entry").
	Name string
	// Retention and Max bound what the log keeps: records older than
	// Retention and the oldest beyond Max are trimmed (0: no bound of
	// that kind).
	Retention time.Duration
	Max       int
	// Buffer is how many records may wait to be written (default 4096).
	Buffer int
	// TrimEvery is how often retention is applied (default a minute).
	TrimEvery time.Duration
	Logger    *slog.Logger
	// Encode gives a record's time and the bytes stored for it. A record
	// that cannot be encoded is logged and skipped.
	Encode func(T) (time.Time, []byte, error)
	// Written, when set, gets each batch once stored, with the sequence
	// number of its first record (the others follow, one apart), on the
	// writer goroutine: it must not block.
	Written func(first uint64, batch []T)
}

// Writer is the one writer of a log.
type Writer[T any] struct {
	cfg      Config[T]
	in       chan T
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	dropped  atomic.Int64
	recorded atomic.Int64
}

// batchMax is the most records one store write takes.
const batchMax = 256

// New returns a Writer; Start runs it.
func New[T any](cfg Config[T]) *Writer[T] {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 4096
	}
	if cfg.TrimEvery <= 0 {
		cfg.TrimEvery = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Writer[T]{cfg: cfg, in: make(chan T, cfg.Buffer), stop: make(chan struct{}), done: make(chan struct{})}
}

// Add queues v. It never blocks: with the buffer full (the store far
// slower than records come) v is dropped and counted, and Add reports
// false so the caller can say what was lost.
func (w *Writer[T]) Add(v T) bool {
	select {
	case w.in <- v:
		return true
	default:
		w.dropped.Add(1)
		return false
	}
}

// Dropped and Recorded count records since start.
func (w *Writer[T]) Dropped() int64  { return w.dropped.Load() }
func (w *Writer[T]) Recorded() int64 { return w.recorded.Load() }

// Start runs the writer and the retention loop until Close.
func (w *Writer[T]) Start() { go w.run() }

// Close writes what was added before it (bounded by ctx) and stops.
func (w *Writer[T]) Close(ctx context.Context) {
	w.once.Do(func() { close(w.stop) })
	select {
	case <-w.done:
	case <-ctx.Done():
	}
}

func (w *Writer[T]) run() {
	defer close(w.done)
	trim := time.NewTicker(w.cfg.TrimEvery)
	defer trim.Stop()
	w.trim()
	for {
		select {
		case v := <-w.in:
			w.write(v)
		case <-trim.C:
			w.trim()
		case <-w.stop:
			for {
				select {
				case v := <-w.in:
					w.write(v)
				default:
					return
				}
			}
		}
	}
}

// write appends first and whatever else waits: one store write a burst.
func (w *Writer[T]) write(first T) {
	batch := []T{first}
	for len(batch) < batchMax {
		select {
		case v := <-w.in:
			batch = append(batch, v)
			continue
		default:
		}
		break
	}
	entries := make([]store.LogEntry, 0, len(batch))
	kept := batch[:0]
	for _, v := range batch {
		at, data, err := w.cfg.Encode(v)
		if err != nil {
			w.cfg.Logger.Error("encode "+w.cfg.Name, "err", err)
			continue
		}
		entries = append(entries, store.LogEntry{Time: at, Data: data})
		kept = append(kept, v)
	}
	if len(entries) == 0 {
		return
	}
	var seq uint64
	var err error
	for attempt := range 5 { // the store may be away a moment (Redis)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		seq, err = w.cfg.Store.AppendEvents(ctx, entries)
		cancel()
		if err == nil {
			break
		}
		w.cfg.Logger.Warn("record "+w.cfg.Name+"s; retrying", "records", len(entries), "attempt", attempt+1, "err", err)
		select {
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		case <-w.stop:
		}
	}
	if err != nil {
		w.dropped.Add(int64(len(entries)))
		w.cfg.Logger.Error(w.cfg.Name+"s lost: the store refused them", "records", len(entries), "err", err)
		return
	}
	w.recorded.Add(int64(len(kept)))
	if w.cfg.Written != nil {
		w.cfg.Written(seq, kept)
	}
}

func (w *Writer[T]) trim() {
	if w.cfg.Retention <= 0 && w.cfg.Max <= 0 {
		return
	}
	var before time.Time
	if w.cfg.Retention > 0 {
		before = time.Now().Add(-w.cfg.Retention)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := w.cfg.Store.TrimEvents(ctx, before, w.cfg.Max); err != nil {
		w.cfg.Logger.Warn("trim the "+w.cfg.Name+" log", "err", err)
	} else if n > 0 {
		w.cfg.Logger.Debug(w.cfg.Name+"s trimmed", "records", n)
	}
}
