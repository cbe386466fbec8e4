package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// EventLog is an append-only log of opaque entries (the lifecycle events of
// internal/events) kept beside the records, so every replica sharing the
// store reads the same log. Sequence numbers are assigned by the store,
// start at 1 and only grow; an entry becomes readable only together with
// every entry numbered below it, so a reader that resumes after the last
// number it saw neither misses nor repeats an entry.
type EventLog interface {
	// AppendEvents appends entries in order and returns the sequence
	// number given to the first (the others follow, one apart).
	AppendEvents(ctx context.Context, entries []LogEntry) (first uint64, err error)
	// ReadEvents returns up to limit entries numbered above after, oldest
	// first.
	ReadEvents(ctx context.Context, after uint64, limit int) ([]LogEntry, error)
	// TrimEvents deletes the entries older than before (zero: none by
	// time) and the oldest beyond the newest keep (0: no count limit);
	// it returns how many went.
	TrimEvents(ctx context.Context, before time.Time, keep int) (int, error)
}

// LogEntry is one entry of an EventLog. Seq is set by the store.
type LogEntry struct {
	Seq  uint64
	Time time.Time
	Data []byte
}

// AuditLogs are stores that keep a second log beside EventLog's, with
// the same guarantees, for the audit log of API calls (internal/audit).
type AuditLogs interface {
	AuditLog() EventLog
}

var (
	_ EventLog  = (*Memory)(nil)
	_ EventLog  = (*Bolt)(nil)
	_ EventLog  = (*Redis)(nil)
	_ AuditLogs = (*Memory)(nil)
	_ AuditLogs = (*Bolt)(nil)
	_ AuditLogs = (*Redis)(nil)
)

// memLog, boltLog and redisLog are one named log of their store: the
// store's own methods are its "events" log, AuditLog its "audit" log.
type memLog struct {
	m   *Memory
	log *memEvents
}

type boltLog struct {
	b      *Bolt
	bucket []byte
}

type redisLog struct {
	r    *Redis
	name string
}

// AppendEvents implements EventLog.
func (m *Memory) AppendEvents(ctx context.Context, entries []LogEntry) (uint64, error) {
	return memLog{m, &m.events}.AppendEvents(ctx, entries)
}

// ReadEvents implements EventLog.
func (m *Memory) ReadEvents(ctx context.Context, after uint64, limit int) ([]LogEntry, error) {
	return memLog{m, &m.events}.ReadEvents(ctx, after, limit)
}

// TrimEvents implements EventLog.
func (m *Memory) TrimEvents(ctx context.Context, before time.Time, keep int) (int, error) {
	return memLog{m, &m.events}.TrimEvents(ctx, before, keep)
}

// AuditLog implements AuditLogs.
func (m *Memory) AuditLog() EventLog { return memLog{m, &m.audit} }

// AppendEvents implements EventLog.
func (b *Bolt) AppendEvents(ctx context.Context, entries []LogEntry) (uint64, error) {
	return boltLog{b, bucketEvents}.AppendEvents(ctx, entries)
}

// ReadEvents implements EventLog.
func (b *Bolt) ReadEvents(ctx context.Context, after uint64, limit int) ([]LogEntry, error) {
	return boltLog{b, bucketEvents}.ReadEvents(ctx, after, limit)
}

// TrimEvents implements EventLog.
func (b *Bolt) TrimEvents(ctx context.Context, before time.Time, keep int) (int, error) {
	return boltLog{b, bucketEvents}.TrimEvents(ctx, before, keep)
}

// AuditLog implements AuditLogs (bucket "audit").
func (b *Bolt) AuditLog() EventLog { return boltLog{b, []byte("audit")} }

// AppendEvents implements EventLog.
func (r *Redis) AppendEvents(ctx context.Context, entries []LogEntry) (uint64, error) {
	return redisLog{r, "events"}.AppendEvents(ctx, entries)
}

// ReadEvents implements EventLog.
func (r *Redis) ReadEvents(ctx context.Context, after uint64, limit int) ([]LogEntry, error) {
	return redisLog{r, "events"}.ReadEvents(ctx, after, limit)
}

// TrimEvents implements EventLog.
func (r *Redis) TrimEvents(ctx context.Context, before time.Time, keep int) (int, error) {
	return redisLog{r, "events"}.TrimEvents(ctx, before, keep)
}

// AuditLog implements AuditLogs (PREFIX:audit).
func (r *Redis) AuditLog() EventLog { return redisLog{r, "audit"} }

// Memory.

// memEvents is the in-memory store's log (guarded by Memory.mu).
type memEvents struct {
	next    uint64
	entries []LogEntry
}

// AppendEvents implements EventLog.
func (l memLog) AppendEvents(_ context.Context, entries []LogEntry) (uint64, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	first := l.log.next + 1
	for _, e := range entries {
		l.log.next++
		e.Seq = l.log.next
		e.Data = append([]byte(nil), e.Data...)
		l.log.entries = append(l.log.entries, e)
	}
	return first, nil
}

// ReadEvents implements EventLog.
func (l memLog) ReadEvents(_ context.Context, after uint64, limit int) ([]LogEntry, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	var out []LogEntry
	for _, e := range l.log.entries {
		if e.Seq > after {
			out = append(out, LogEntry{Seq: e.Seq, Time: e.Time, Data: append([]byte(nil), e.Data...)})
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// TrimEvents implements EventLog.
func (l memLog) TrimEvents(_ context.Context, before time.Time, keep int) (int, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	drop := 0
	if keep > 0 && len(l.log.entries) > keep {
		drop = len(l.log.entries) - keep
	}
	for drop < len(l.log.entries) && l.log.entries[drop].Time.Before(before) {
		drop++
	}
	l.log.entries = append([]LogEntry(nil), l.log.entries[drop:]...)
	return drop, nil
}

// Bolt keeps the log in bucket "events": the sequence number (8 bytes, big
// endian, so keys sort in order) -> the time (8 bytes, unix nanoseconds)
// and the data. One write transaction numbers and stores an append.
var bucketEvents = []byte("events")

func seqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// logFillPercent is how full the log's pages are split at: nearly full,
// as for any append-only bucket (bbolt's FillPercent; the default is 0.5).
const logFillPercent = 0.95

// AppendEvents implements EventLog.
func (l boltLog) AppendEvents(_ context.Context, entries []LogEntry) (uint64, error) {
	var first uint64
	err := l.b.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(l.bucket)
		if err != nil {
			return err
		}
		// Keys only ever grow: a page split at bbolt's default half-full
		// mark would leave every full page of the log half empty for good
		// (a 200,000-entry audit log took 135 MiB of pages for 62 MiB of
		// entries), and the daemon maps the whole file.
		bk.FillPercent = logFillPercent
		for i, e := range entries {
			n, err := bk.NextSequence()
			if err != nil {
				return err
			}
			if i == 0 {
				first = n
			}
			v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(e.Data)), uint64(e.Time.UnixNano()))
			if err := bk.Put(seqKey(n), append(v, e.Data...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	return first, nil
}

// ReadEvents implements EventLog.
func (l boltLog) ReadEvents(_ context.Context, after uint64, limit int) ([]LogEntry, error) {
	var out []LogEntry
	err := l.b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(l.bucket)
		if bk == nil {
			return nil
		}
		c := bk.Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			if len(k) != 8 || len(v) < 8 {
				continue // not ours: skip rather than fail every reader
			}
			out = append(out, LogEntry{
				Seq:  binary.BigEndian.Uint64(k),
				Time: time.Unix(0, int64(binary.BigEndian.Uint64(v))),
				Data: append([]byte(nil), v[8:]...),
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// TrimEvents implements EventLog.
func (l boltLog) TrimEvents(_ context.Context, before time.Time, keep int) (int, error) {
	n := 0
	err := l.b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(l.bucket)
		if bk == nil {
			return nil
		}
		c := bk.Cursor()
		over := 0
		if keep > 0 {
			// The entries are numbered without gaps (AppendEvents) and trimmed
			// from the oldest, so the first and last keys count them: no walk
			// of every page (bk.Stats) under the write lock once a minute.
			// Were there a gap, this would overcount, trimming a few more.
			first, _ := c.First()
			last, _ := c.Last()
			if len(first) == 8 && len(last) == 8 {
				if total := int(binary.BigEndian.Uint64(last) - binary.BigEndian.Uint64(first) + 1); total > keep {
					over = total - keep
				}
			} else if total := bk.Stats().KeyN; total > keep {
				over = total - keep // keys not ours: count them the slow way
			}
		}
		var gone [][]byte
		for k, v := c.First(); k != nil; k, v = c.Next() {
			old := len(v) >= 8 && time.Unix(0, int64(binary.BigEndian.Uint64(v))).Before(before)
			if len(gone) >= over && !old {
				break
			}
			gone = append(gone, append([]byte(nil), k...))
		}
		for _, k := range gone {
			if err := bk.Delete(k); err != nil {
				return err
			}
		}
		n = len(gone)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("trim events: %w", err)
	}
	return n, nil
}

// Redis keeps the log in a sorted set PREFIX:events, scored by sequence
// number, each member "SEQ TIME DATA" (TIME in unix nanoseconds), and the
// last number in PREFIX:events:seq. A script numbers and adds an append in
// one step, so no replica can read number n+1 while n is still on its way.
func (l redisLog) eventsKey() string    { return l.r.prefix + ":" + l.name }
func (l redisLog) eventsSeqKey() string { return l.r.prefix + ":" + l.name + ":seq" }

var appendEventsScript = redis.NewScript(`
local first = redis.call('INCRBY', KEYS[2], #ARGV / 2) - #ARGV / 2 + 1
for i = 1, #ARGV, 2 do
  local n = first + (i - 1) / 2
  redis.call('ZADD', KEYS[1], n, n .. ' ' .. ARGV[i] .. ' ' .. ARGV[i + 1])
end
return first
`)

// AppendEvents implements EventLog.
func (l redisLog) AppendEvents(ctx context.Context, entries []LogEntry) (uint64, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2*len(entries))
	for _, e := range entries {
		args = append(args, strconv.FormatInt(e.Time.UnixNano(), 10), e.Data)
	}
	first, err := appendEventsScript.Run(ctx, l.r.c, []string{l.eventsKey(), l.eventsSeqKey()}, args...).Int64()
	if err != nil {
		return 0, l.r.unavailable("append events", err)
	}
	return uint64(first), nil
}

// ReadEvents implements EventLog.
func (l redisLog) ReadEvents(ctx context.Context, after uint64, limit int) ([]LogEntry, error) {
	members, err := l.r.c.ZRangeByScore(ctx, l.eventsKey(), &redis.ZRangeBy{
		Min: "(" + strconv.FormatUint(after, 10), Max: "+inf", Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, l.r.unavailable("read events", err)
	}
	out := make([]LogEntry, 0, len(members))
	for _, m := range members {
		if e, ok := parseEventMember(m); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

func parseEventMember(m string) (LogEntry, bool) {
	seq, rest, ok := strings.Cut(m, " ")
	if !ok {
		return LogEntry{}, false
	}
	ts, data, ok := strings.Cut(rest, " ")
	if !ok {
		return LogEntry{}, false
	}
	n, err1 := strconv.ParseUint(seq, 10, 64)
	t, err2 := strconv.ParseInt(ts, 10, 64)
	if err1 != nil || err2 != nil {
		return LogEntry{}, false
	}
	return LogEntry{Seq: n, Time: time.Unix(0, t), Data: []byte(data)}, true
}

// TrimEvents implements EventLog: the count first (one command), then the
// old ones from the oldest end, a bounded batch at a time.
func (l redisLog) TrimEvents(ctx context.Context, before time.Time, keep int) (int, error) {
	n := 0
	if keep > 0 {
		gone, err := l.r.c.ZRemRangeByRank(ctx, l.eventsKey(), 0, int64(-keep-1)).Result()
		if err != nil {
			return 0, l.r.unavailable("trim events", err)
		}
		n += int(gone)
	}
	if before.IsZero() {
		return n, nil
	}
	for range 1000 { // bounded: 1000 batches of 256
		oldest, err := l.r.c.ZRange(ctx, l.eventsKey(), 0, 255).Result()
		if err != nil {
			return n, l.r.unavailable("trim events", err)
		}
		var last uint64
		done := len(oldest) < 256
		for _, m := range oldest {
			e, ok := parseEventMember(m)
			if ok && !e.Time.Before(before) {
				done = true
				break
			}
			if ok {
				last = e.Seq
			}
		}
		if last > 0 {
			gone, err := l.r.c.ZRemRangeByScore(ctx, l.eventsKey(), "-inf", strconv.FormatUint(last, 10)).Result()
			if err != nil {
				return n, l.r.unavailable("trim events", err)
			}
			n += int(gone)
		}
		if done || last == 0 {
			break
		}
	}
	return n, nil
}
