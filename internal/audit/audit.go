// Package audit keeps the audit log: one entry per state-changing API
// call, whoever served it (the native API or a door), in the store beside
// the lifecycle events so every replica reads the same log. Recording
// never blocks a request: entries go through a buffer to one writer
// goroutine that appends them in batches.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/storelog"
)

// Entry is one API call.
type Entry struct {
	ID        uint64    `json:"id"`
	Time      time.Time `json:"time"`
	User      string    `json:"user"`             // "" when authentication failed
	Remote    string    `json:"remote"`           // the client's address
	Method    string    `json:"method"`           //
	Path      string    `json:"path"`             //
	Route     string    `json:"route,omitempty"`  // the route pattern, when one matched
	Target    string    `json:"target,omitempty"` // the sandbox (or other object) acted on, when known
	Status    int       `json:"status"`           // the HTTP status answered
	Duration  float64   `json:"duration_ms"`
	RequestID string    `json:"request_id"`
	Node      string    `json:"node,omitempty"`
}

// Config configures a Log.
type Config struct {
	Store     store.EventLog
	Node      string
	Retention time.Duration // 0: no time limit
	Max       int           // 0: no count limit
	Buffer    int           // default 4096
	Logger    *slog.Logger
}

// Log is the audit log.
type Log struct {
	cfg Config
	w   *storelog.Writer[Entry]
}

// New returns a Log; Start runs its writer.
func New(cfg Config) *Log {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := storelog.New(storelog.Config[Entry]{Store: cfg.Store, Name: "audit entry", Retention: cfg.Retention, Max: cfg.Max,
		Buffer: cfg.Buffer, Logger: cfg.Logger,
		Encode: func(e Entry) (time.Time, []byte, error) {
			data, err := json.Marshal(e)
			return e.Time, data, err
		}})
	return &Log{cfg: cfg, w: w}
}

// Record queues e; it never blocks (a full buffer drops and counts it).
func (l *Log) Record(e Entry) {
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
		l.cfg.Logger.Warn("audit entry dropped: the audit log is behind", "method", e.Method, "path", e.Path, "user", e.User)
	}
}

// Dropped and Recorded count entries since start.
func (l *Log) Dropped() int64  { return l.w.Dropped() }
func (l *Log) Recorded() int64 { return l.w.Recorded() }

// Start runs the writer and the retention loop until Close.
func (l *Log) Start() { l.w.Start() }

// Close writes what was recorded before it (bounded by ctx) and stops.
func (l *Log) Close(ctx context.Context) { l.w.Close(ctx) }

// Query selects entries; every set field must match.
type Query struct {
	User   string
	Target string
	Method string
	// PathPrefix keeps entries whose path starts with it.
	PathPrefix string
	// Status keeps one status, StatusClass (1-5) one class (4: 4xx).
	Status, StatusClass int
	Since, Until        time.Time
	After               uint64 // the cursor
	Limit               int    // default 100, at most MaxLimit
}

// MaxLimit is the most entries one Query returns.
const MaxLimit = 1000

// Page is a Query's answer.
type Page struct {
	Entries []Entry `json:"entries"`
	Next    uint64  `json:"next_cursor"`
	More    bool    `json:"has_more"`
}

// Check validates q and applies its defaults.
func (q *Query) Check() error {
	if q.Limit < 0 || q.Limit > MaxLimit {
		return sandbox.Invalid("limit", "limit must be between 1 and %d", MaxLimit)
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.StatusClass < 0 || q.StatusClass > 5 {
		return sandbox.Invalid("status", "a status class is 1xx to 5xx")
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return sandbox.Invalid("until", "until is before since")
	}
	return nil
}

func (q *Query) match(e *Entry) bool {
	switch {
	case q.User != "" && e.User != q.User,
		q.Target != "" && e.Target != q.Target,
		q.Method != "" && !strings.EqualFold(e.Method, q.Method),
		q.PathPrefix != "" && !strings.HasPrefix(e.Path, q.PathPrefix),
		q.Status != 0 && e.Status != q.Status,
		q.StatusClass != 0 && e.Status/100 != q.StatusClass,
		!q.Since.IsZero() && e.Time.Before(q.Since),
		!q.Until.IsZero() && e.Time.After(q.Until):
		return false
	}
	return true
}

// Query returns the entries matching q, oldest first, from q.After on. A
// selective filter over a long log may return a partial page with More.
func (l *Log) Query(ctx context.Context, q Query) (Page, error) {
	if err := q.Check(); err != nil {
		return Page{}, err
	}
	decode := func(seq uint64, data []byte) (Entry, error) {
		var e Entry
		err := json.Unmarshal(data, &e)
		e.ID = seq
		return e, err
	}
	entries, next, more, err := storelog.Scan(ctx, l.cfg.Store, q.After, q.Limit, decode, q.match)
	if err != nil {
		return Page{}, fmt.Errorf("read the audit log: %w", err)
	}
	return Page{Entries: entries, Next: next, More: more}, nil
}

// Mutating reports whether a request with method changes state (and so
// is audited).
func Mutating(method string) bool {
	switch method {
	case "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}
