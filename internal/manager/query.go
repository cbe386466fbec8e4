package manager

import (
	"context"
	"encoding/base64"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/history"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Get returns a snapshot of one of owner's sandboxes.
func (m *Manager) Get(ctx context.Context, owner string, id sandbox.ID) (*store.Record, error) {
	e, err := m.entryFor(owner, id)
	if sandbox.ClassOf(err) == sandbox.ClassNotFound {
		if rec, rerr := m.remoteRecord(ctx, owner, id); rerr == nil {
			return rec, nil
		}
	}
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.rec.Clone(), nil
}

// ListOptions filters and pages List.
type ListOptions struct {
	Metadata map[string]string // all pairs must match
	States   []sandbox.State   // any of them; empty = all
	Limit    int               // default 100, max 1000
	Cursor   string            // NextCursor of the previous page
	// Oldest lists oldest first (the default is newest first); a cursor
	// continues in the order it was made with.
	Oldest bool
	// StartedAfter keeps sandboxes created at or after it (zero: all).
	StartedAfter time.Time
	// Match, when set, keeps only the records it accepts: a front end's
	// own filter (E2B's template names), applied before pagination. It
	// runs with the manager's lock held: it only reads the record.
	Match func(*store.Record) bool
}

// ListPage is one page of List.
type ListPage struct {
	Records    []*store.Record
	NextCursor string // empty on the last page
}

// List returns owner's sandboxes, newest first.
func (m *Manager) List(ctx context.Context, owner string, opts ListOptions) (*ListPage, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	if limit > 1000 {
		return nil, invalid("limit", "limit must be at most 1000")
	}
	var after *cursor
	if opts.Cursor != "" {
		c, err := decodeCursor(opts.Cursor)
		if err != nil {
			return nil, invalid("next_token", "invalid next_token")
		}
		after = &c
	}
	m.mu.Lock()
	recs := make([]*store.Record, 0, len(m.entries))
	for _, e := range m.entries {
		if e.creating || e.destroying || e.rec.Pool != "" || e.rec.Owner != owner {
			continue
		}
		if !matches(e.rec, opts) {
			continue
		}
		recs = append(recs, e.rec.Clone())
	}
	m.mu.Unlock()
	for _, rec := range m.remoteRecords(ctx, owner) {
		if matches(rec, opts) {
			recs = append(recs, rec)
		}
	}
	before := newer
	if opts.Oldest {
		before = func(a, b *store.Record) bool { return newer(b, a) }
	}
	sort.Slice(recs, func(i, j int) bool { return before(recs[i], recs[j]) })
	if after != nil {
		i := sort.Search(len(recs), func(i int) bool {
			return before(&store.Record{CreatedAt: after.t, ID: after.id}, recs[i])
		})
		recs = recs[i:]
	}
	page := &ListPage{Records: recs}
	if len(recs) > limit {
		page.Records = recs[:limit]
		last := recs[limit-1]
		page.NextCursor = encodeCursor(cursor{t: last.CreatedAt, id: last.ID})
	}
	return page, nil
}

// newer orders records newest first, by id for equal times.
func newer(a, b *store.Record) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return a.ID < b.ID
}

func matches(r *store.Record, opts ListOptions) bool {
	if !opts.StartedAfter.IsZero() && r.CreatedAt.Before(opts.StartedAfter) {
		return false
	}
	if opts.Match != nil && !opts.Match(r) {
		return false
	}
	for k, v := range opts.Metadata {
		if r.Metadata[k] != v {
			return false
		}
	}
	if len(opts.States) == 0 {
		return true
	}
	for _, s := range opts.States {
		if r.State == s {
			return true
		}
	}
	return false
}

type cursor struct {
	t  time.Time
	id sandbox.ID
}

func encodeCursor(c cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.t.Format(time.RFC3339Nano) + "|" + string(c.id)))
}

func decodeCursor(s string) (cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, err
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return cursor{}, sandbox.Errorf(sandbox.ClassInvalid, "bad cursor")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return cursor{}, err
	}
	return cursor{t: t, id: sandbox.ID(id)}, nil
}

// Agent returns a client for the agent of one of owner's sandboxes and
// records the activity. The client is shared; do not Close it.
func (m *Manager) Agent(ctx context.Context, owner string, id sandbox.ID) (*agentclient.Client, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch e.rec.State {
	case sandbox.StateStopped:
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped; start it first", id)
	case sandbox.StatePaused:
		return nil, ErrPaused(id)
	}
	e.lastActive = time.Now()
	return m.clientLocked(e), nil
}

// Stats returns resource usage of one of owner's sandboxes.
func (m *Manager) Stats(ctx context.Context, owner string, id sandbox.ID) (backend.Stats, error) {
	if _, err := m.entryFor(owner, id); err != nil {
		return backend.Stats{}, err
	}
	sr, ok := m.backend.(backend.StatsReader)
	if !ok {
		return backend.Stats{}, sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend does not report stats", m.backend.Name())
	}
	return sr.Stats(ctx, id)
}

// LogEntry is one line of a sandbox's log.
type LogEntry struct {
	Time    time.Time      `json:"timestamp"`
	Level   string         `json:"level"`
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
}

// Logs returns the sandbox's lifecycle events, oldest first.
func (m *Manager) Logs(ctx context.Context, owner string, id sandbox.ID, limit int) ([]LogEntry, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	entries := e.logs.list(limit)
	var c *agentclient.Client
	if e.agent.Address != "" && !e.creating && e.rec.State == sandbox.StateRunning {
		c = m.clientLocked(e)
	}
	m.mu.Unlock()
	if c == nil {
		return entries, nil
	}
	// The service's starts, exits and restarts, as the agent saw them.
	entries = append(entries, serviceEvents(ctx, c)...)
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Time.Before(entries[j].Time) })
	if limit > 0 && len(entries) > limit {
		entries = entries[len(entries)-limit:]
	}
	return entries, nil
}

// Log adds a line to a sandbox's log (front-ends record notable events).
func (m *Manager) Log(id sandbox.ID, level, msg string, fields map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[id]; ok {
		e.logs.add(level, msg, fields)
	}
}

// eventLog is a bounded ring of log entries; guarded by Manager.mu.
type eventLog struct {
	entries []LogEntry
	next    int
	full    bool
}

const eventLogSize = 256

func newEventLog() *eventLog { return &eventLog{entries: make([]LogEntry, eventLogSize)} }

func (l *eventLog) add(level, msg string, fields map[string]any) {
	l.entries[l.next] = LogEntry{Time: time.Now().UTC(), Level: level, Message: msg, Fields: fields}
	l.next = (l.next + 1) % len(l.entries)
	if l.next == 0 {
		l.full = true
	}
}

func (l *eventLog) list(limit int) []LogEntry {
	var out []LogEntry
	if l.full {
		out = append(out, l.entries[l.next:]...)
	}
	out = append(out, l.entries[:l.next]...)
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// LimitCounters reads sandbox id's OOM kills and pids-limit hits so far;
// ok is false when the backend cannot tell.
func (m *Manager) LimitCounters(ctx context.Context, id sandbox.ID) (oomKills, pidsLimitHits int64, ok bool) {
	if lc, ok := m.backend.(backend.LimitCounter); ok {
		oom, pids, err := lc.LimitCounters(ctx, id)
		return oom, pids, err == nil
	}
	sr, ok := m.backend.(backend.StatsReader)
	if !ok {
		return 0, 0, false
	}
	st, err := sr.Stats(ctx, id)
	return st.OOMKills, st.PidsLimitHits, err == nil
}

// Sampled lists the sandboxes a metrics history follows (warm-pool ones
// excluded): running tells which to sample now, cpus their CPU count. It
// reads only the in-memory entries.
func (m *Manager) Sampled() map[sandbox.ID]history.Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[sandbox.ID]history.Sandbox, len(m.entries))
	for id, e := range m.entries {
		if e.rec.Pool != "" {
			continue
		}
		out[id] = history.Sandbox{Running: !e.creating && !e.destroying && e.rec.State == sandbox.StateRunning, CPUs: e.rec.Resources.CPUs}
	}
	return out
}

// SampleStats reads sandbox id's stats for the metrics history, whoever
// owns it.
func (m *Manager) SampleStats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	sr, ok := m.backend.(backend.StatsReader)
	if !ok {
		return backend.Stats{}, sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend does not report stats", m.backend.Name())
	}
	return sr.Stats(ctx, id)
}
