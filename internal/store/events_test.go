package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/internal/testutil"
)

// testEventLog checks the EventLog contract on a (and b, another replica
// on the same data when shared, else a itself).
func testEventLog(t *testing.T, a, b EventLog) {
	t.Helper()
	ctx := context.Background()
	base := time.Unix(1_700_000_000, 0)
	if got, err := a.ReadEvents(ctx, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("empty log: %v %v", got, err)
	}
	first, err := a.AppendEvents(ctx, []LogEntry{{Time: base, Data: []byte("a 1")}, {Time: base.Add(time.Second), Data: []byte("b")}})
	if err != nil || first != 1 {
		t.Fatalf("append: first %d, %v", first, err)
	}
	next, err := b.AppendEvents(ctx, []LogEntry{{Time: base.Add(2 * time.Second), Data: []byte("c")}})
	if err != nil || next != 3 {
		t.Fatalf("second append (other replica): first %d, %v", next, err)
	}
	got, err := b.ReadEvents(ctx, 0, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("read: %v %v", got, err)
	}
	for i, want := range []string{"a 1", "b", "c"} {
		if got[i].Seq != uint64(i+1) || string(got[i].Data) != want || !got[i].Time.Equal(base.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("entry %d = %+v, want seq %d data %q", i, got[i], i+1, want)
		}
	}
	if got, _ := a.ReadEvents(ctx, 1, 1); len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("read after 1, limit 1: %+v", got)
	}
	// Concurrent appends from both get distinct, gap-free numbers.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func(l EventLog) {
			defer wg.Done()
			if _, err := l.AppendEvents(ctx, []LogEntry{{Time: base.Add(time.Hour), Data: []byte(fmt.Sprint(i))}}); err != nil {
				t.Error(err)
			}
		}([]EventLog{a, b}[i%2])
	}
	wg.Wait()
	all, err := a.ReadEvents(ctx, 0, 100)
	if err != nil || len(all) != 23 {
		t.Fatalf("after concurrent appends: %d entries, %v", len(all), err)
	}
	for i, e := range all {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
	}
	// Trim by time: the three early ones go.
	if n, err := a.TrimEvents(ctx, base.Add(time.Minute), 0); err != nil || n != 3 {
		t.Fatalf("trim by time: %d %v", n, err)
	}
	// Trim by count: the newest 5 stay.
	if n, err := b.TrimEvents(ctx, time.Time{}, 5); err != nil || n != 15 {
		t.Fatalf("trim by count: %d %v", n, err)
	}
	left, _ := a.ReadEvents(ctx, 0, 100)
	if len(left) != 5 || left[0].Seq != 19 || left[4].Seq != 23 {
		t.Fatalf("after trims: %+v", left)
	}
	// Numbers keep growing after a trim.
	if n, err := a.AppendEvents(ctx, []LogEntry{{Time: base.Add(2 * time.Hour), Data: []byte("z")}}); err != nil || n != 24 {
		t.Fatalf("append after trim: %d %v", n, err)
	}
}

func TestMemoryEventLog(t *testing.T) {
	m := NewMemory()
	testEventLog(t, m, m)
}

func TestBoltEventLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	testEventLog(t, s, s)
	s.Close()
	// The log and its numbering survive a reopen.
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.AppendEvents(context.Background(), []LogEntry{{Time: time.Now(), Data: []byte("after")}}); err != nil || n != 25 {
		t.Fatalf("append after reopen: %d %v", n, err)
	}
}

func TestRedisEventLog(t *testing.T) {
	srv := testutil.StartRedis(t)
	testEventLog(t, openRedis(t, srv), openRedis(t, srv))
}

// testAuditLog checks the audit log keeps the EventLog contract and is a
// log of its own: the events do not see its entries.
func testAuditLog(t *testing.T, a, b AuditLogs, events EventLog) {
	t.Helper()
	testEventLog(t, a.AuditLog(), b.AuditLog())
	if got, err := events.ReadEvents(context.Background(), 0, 100); err != nil || len(got) != 0 {
		t.Fatalf("the audit log's entries show in the events: %d %v", len(got), err)
	}
}

func TestAuditLogs(t *testing.T) {
	m := NewMemory()
	testAuditLog(t, m, m, m)
	s, err := OpenBolt(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testAuditLog(t, s, s, s)
	srv := testutil.StartRedis(t)
	r := openRedis(t, srv)
	testAuditLog(t, r, openRedis(t, srv), r)
}

// TestBoltEventLogPacksPages: an append-only log fills its pages (at
// bbolt's default split, every page stayed half empty, doubling the state
// database the daemon maps), and trimming by count from the key range
// keeps exactly the newest entries.
func TestBoltEventLogPacksPages(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	data := make([]byte, 300) // about an audit entry
	for range 80 {
		batch := make([]LogEntry, 256)
		for i := range batch {
			batch[i] = LogEntry{Time: time.Now(), Data: data}
		}
		if _, err := s.AppendEvents(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.TrimEvents(ctx, time.Time{}, 10_000); err != nil || n != 80*256-10_000 {
		t.Fatalf("trim to 10,000: %d %v", n, err)
	}
	left, err := s.ReadEvents(ctx, 0, 20_000)
	if err != nil || len(left) != 10_000 {
		t.Fatalf("after the trim: %d entries, %v", len(left), err)
	}
	if left[0].Seq != 80*256-10_000+1 {
		t.Fatalf("after the trim: the oldest left is %d, want %d", left[0].Seq, 80*256-10_000+1)
	}
	var st bolt.BucketStats
	if err := s.db.View(func(tx *bolt.Tx) error { st = tx.Bucket(bucketEvents).Stats(); return nil }); err != nil {
		t.Fatal(err)
	}
	if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); fill < 0.85 {
		t.Errorf("log pages %.0f%% full (%d of %d bytes), want at least 85%%", 100*fill, st.LeafInuse, st.LeafAlloc)
	}
}
