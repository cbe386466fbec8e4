package events

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

func startLog(t *testing.T, s store.EventLog, cfg Config) *Log {
	t.Helper()
	cfg.Store = s
	l := New(cfg)
	l.Start()
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

// waitRecorded waits (bounded) until n events were recorded.
func waitRecorded(t *testing.T, l *Log, n int64) {
	t.Helper()
	for i := 0; i < 500 && l.Recorded() < n; i++ {
		select {
		case <-l.Changed():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if l.Recorded() < n {
		t.Fatalf("recorded %d events, want %d", l.Recorded(), n)
	}
}

// Emitted events are numbered in emit order, subscribers get them with
// their ids, and queries filter by owner, sandbox, type and time and page
// with the cursor without loss or repetition.
func TestLogRecordsAndQueries(t *testing.T) {
	s := store.NewMemory()
	l := startLog(t, s, Config{Node: "n1"})
	var mu sync.Mutex
	var seen []uint64
	l.Subscribe(func(b []Event) {
		mu.Lock()
		for _, e := range b {
			seen = append(seen, e.ID)
		}
		mu.Unlock()
	})
	t0 := time.Now().UTC()
	for i := range 30 {
		owner := "alice"
		if i%3 == 0 {
			owner = "bob"
		}
		typ := []Type{Created, Paused, Killed}[i%3]
		l.Emit(Event{Type: typ, SandboxID: fmt.Sprintf("sb%d", i%5), Owner: owner, Cause: Cause{Kind: CauseAPI, By: owner}, Time: t0.Add(time.Duration(i) * time.Second)})
	}
	waitRecorded(t, l, 30)
	mu.Lock()
	for i, id := range seen {
		if id != uint64(i+1) {
			t.Fatalf("subscriber saw ids %v", seen)
		}
	}
	mu.Unlock()
	ctx := context.Background()
	all, err := l.Query(ctx, Query{Limit: 1000})
	if err != nil || len(all.Events) != 30 || all.More || all.Events[0].Node != "n1" || all.Events[29].ID != 30 {
		t.Fatalf("all: %d events, more %v, %v", len(all.Events), all.More, err)
	}
	bob, _ := l.Query(ctx, Query{Owner: "bob"})
	if len(bob.Events) != 10 {
		t.Fatalf("bob's: %d", len(bob.Events))
	}
	for _, e := range bob.Events {
		if e.Owner != "bob" {
			t.Fatalf("bob sees %+v", e)
		}
	}
	q := Query{Owner: "alice", Sandbox: "sb1", Types: []Type{Paused}}
	// i = 1 and 16: i%5 == 1 (sb1) and i%3 == 1 (alice's pauses).
	if p, _ := l.Query(ctx, q); len(p.Events) != 2 || p.Events[0].ID != 2 || p.Events[1].ID != 17 {
		t.Fatalf("sandbox+type filter: %+v", p.Events)
	}
	win, _ := l.Query(ctx, Query{Since: t0.Add(10 * time.Second), Until: t0.Add(19 * time.Second)})
	if len(win.Events) != 10 || win.Events[0].ID != 11 {
		t.Fatalf("time window: %d events", len(win.Events))
	}
	// Pages of 7: every event once, in order.
	var got []uint64
	cur := uint64(0)
	for range 10 {
		p, err := l.Query(ctx, Query{After: cur, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			got = append(got, e.ID)
		}
		cur = p.Next
		if !p.More {
			break
		}
	}
	if len(got) != 30 || got[0] != 1 || got[29] != 30 {
		t.Fatalf("paged: %v", got)
	}
	if err := (&Query{Types: []Type{"nope"}}).Check(); err == nil {
		t.Fatal("unknown type accepted")
	}
	if err := (&Query{Limit: MaxLimit + 1}).Check(); err == nil {
		t.Fatal("limit over the maximum accepted")
	}
}

// Retention trims by count and by age.
func TestLogRetention(t *testing.T) {
	s := store.NewMemory()
	l := startLog(t, s, Config{Max: 5, Retention: time.Hour, TrimEvery: 20 * time.Millisecond})
	old := time.Now().Add(-2 * time.Hour)
	for i := range 3 {
		l.Emit(Event{Type: Created, SandboxID: fmt.Sprint(i), Time: old})
	}
	for i := range 8 {
		l.Emit(Event{Type: Created, SandboxID: fmt.Sprint(i)})
	}
	waitRecorded(t, l, 11)
	for range 100 { // bounded: 100 x 20ms
		p, _ := l.Query(context.Background(), Query{})
		if len(p.Events) == 5 && p.Events[0].ID == 7 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p, _ := l.Query(context.Background(), Query{})
	t.Fatalf("after retention: %d events, first %+v", len(p.Events), p.Events[0])
}

// A full buffer drops (and counts) rather than blocking the caller.
func TestEmitNeverBlocks(t *testing.T) {
	l := New(Config{Store: store.NewMemory(), Buffer: 2}) // not started: nothing drains
	for range 5 {
		l.Emit(Event{Type: Created})
	}
	if l.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3", l.Dropped())
	}
	var nilLog *Log
	nilLog.Emit(Event{Type: Created}) // a daemon without events
}
