package manager

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// A manager on a real Redis: at start it recovers only its own node's
// records; with Redis down, creates, deletes and extends fail with
// ClassUnavailable before changing anything (the pooled sandbox is kept,
// no sandbox boots); once Redis is back, creates work again.
func TestManagerOnRedis(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	// Another replica's sandbox, and one of ours the backend lost.
	if err := rs.Put(ctx, &store.Record{ID: "othernode1", Owner: "bob", Node: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := rs.Put(ctx, &store.Record{ID: "gonesandbox", Owner: "bob", Node: "me"}); err != nil {
		t.Fatal(err)
	}

	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	m := New(Config{NodeID: "me", PoolTypes: []string{"base"}, PoolSize: 1}, b, rs)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	if _, err := rs.Get(ctx, "othernode1"); err != nil {
		t.Fatalf("another node's record was dropped: %v", err)
	}
	if _, err := rs.Get(ctx, "gonesandbox"); !sandbox.IsNotFound(err) {
		t.Fatalf("own record of a lost sandbox kept: %v", err)
	}
	waitFor(t, 30*time.Second, "pool fill", func() bool { return m.Load().Pooled == 1 })

	rec, err := m.Create(ctx, "alice", CreateRequest{NoPool: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rs.Get(ctx, rec.ID); err != nil || got.Node != "me" || got.Owner != "alice" {
		t.Fatalf("record in Redis: %+v %v", got, err)
	}
	load := m.Load()

	srv.Stop()
	if _, err := m.Create(ctx, "alice", CreateRequest{}); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("create with Redis down: %v", err)
	}
	if _, err := m.Create(ctx, "alice", CreateRequest{NoPool: true}); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("cold create with Redis down: %v", err)
	}
	if err := m.Delete(ctx, "alice", rec.ID); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("delete with Redis down: %v", err)
	}
	if _, err := m.Refresh(ctx, "alice", rec.ID, time.Hour); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("refresh with Redis down: %v", err)
	}
	if got, err := m.Get(ctx, "alice", rec.ID); err != nil || !got.EndAt.Equal(rec.EndAt) {
		t.Fatalf("sandbox after refused delete and refresh: %+v %v", got, err)
	}
	if now := m.Load(); now != load {
		t.Fatalf("load changed while Redis was down: %+v, was %+v", now, load)
	}
	if out := execOut(t, m, "alice", rec.ID, "echo", "alive"); out != "alive\n" {
		t.Fatalf("exec with Redis down: %q", out)
	}

	srv.Start()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := m.Create(ctx, "alice", CreateRequest{})
		if err == nil {
			if !got.FromPool {
				t.Fatalf("create after the outage did not use the kept pooled sandbox: %+v", got)
			}
			break
		}
		if sandbox.ClassOf(err) != sandbox.ClassUnavailable || time.Now().After(deadline) {
			t.Fatalf("create after Redis came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := m.Delete(ctx, "alice", rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Get(ctx, rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("record after delete: %v", err)
	}
}
