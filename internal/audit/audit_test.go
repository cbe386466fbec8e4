package audit

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

func TestRecordQueryTrim(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	l := New(Config{Store: st.AuditLog(), Node: "n1", Max: 3})
	l.Start()
	l.Record(Entry{User: "alice", Method: "POST", Path: "/v1/sandboxes", Status: 201, Target: "sb1"})
	l.Record(Entry{User: "bob", Method: "DELETE", Path: "/v1/sandboxes/sb2", Status: 404, Target: "sb2"})
	l.Record(Entry{User: "alice", Method: "DELETE", Path: "/v1/sandboxes/sb1", Status: 204, Target: "sb1"})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	l.Close(cctx)
	cancel()
	if l.Recorded() != 3 || l.Dropped() != 0 {
		t.Fatalf("recorded %d, dropped %d", l.Recorded(), l.Dropped())
	}
	all, err := l.Query(ctx, Query{})
	if err != nil || len(all.Entries) != 3 || all.Entries[0].ID != 1 || all.Entries[0].Node != "n1" || all.Entries[0].Time.IsZero() {
		t.Fatalf("all: %+v %v", all, err)
	}
	for _, c := range []struct {
		q    Query
		want int
	}{
		{Query{User: "alice"}, 2}, {Query{Target: "sb1", Method: "delete"}, 1}, {Query{StatusClass: 4}, 1},
		{Query{Status: 201}, 1}, {Query{PathPrefix: "/v1/sandboxes/"}, 2}, {Query{After: 2}, 1},
		{Query{Since: time.Now().Add(time.Hour)}, 0},
	} {
		p, err := l.Query(ctx, c.q)
		if err != nil || len(p.Entries) != c.want {
			t.Fatalf("%+v: %d entries, want %d (%v)", c.q, len(p.Entries), c.want, err)
		}
	}
	if p, _ := l.Query(ctx, Query{Limit: 2}); len(p.Entries) != 2 || !p.More || p.Next != 2 {
		t.Fatalf("a page of 2: %+v", p)
	}
	if err := (&Query{Limit: MaxLimit + 1}).Check(); err == nil {
		t.Fatal("a limit over MaxLimit passed")
	}
	// Count retention: a fourth entry trims the first at the next trim.
	l2 := New(Config{Store: st.AuditLog(), Max: 3})
	l2.Record(Entry{User: "carol", Method: "POST", Path: "/x", Status: 200})
	l2.Start()
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	l2.Close(cctx)
	cancel()
	// The next start trims first.
	l3 := New(Config{Store: st.AuditLog(), Max: 3})
	l3.Start()
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	l3.Close(cctx)
	cancel()
	p, _ := l3.Query(ctx, Query{})
	if len(p.Entries) != 3 || p.Entries[0].ID != 2 {
		t.Fatalf("after trim to 3: %+v", p.Entries)
	}
}
