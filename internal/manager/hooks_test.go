package manager

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// goneLog records the GoneHook calls of a manager.
type goneLog struct {
	mu    sync.Mutex
	calls map[sandbox.ID][]string // reasons, in order
	owner map[sandbox.ID]string
}

func watchGone(m *Manager) *goneLog {
	g := &goneLog{calls: map[sandbox.ID][]string{}, owner: map[sandbox.ID]string{}}
	m.OnGone(func(_ context.Context, rec *store.Record, reason string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.calls[rec.ID] = append(g.calls[rec.ID], reason)
		g.owner[rec.ID] = rec.Owner
	})
	return g
}

func (g *goneLog) reasons(id sandbox.ID) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.calls[id]...)
}

// The gone hook runs once per sandbox a user had, however it went: a
// delete, its expiry, its session's release; with the user's record.
// Pooled sandboxes never handed out are not reported.
func TestOnGoneDeleteExpirySession(t *testing.T) {
	e := newEnv(t, Config{PoolTypes: []string{"base"}, PoolSize: 1})
	g := watchGone(e.m)
	ctx := context.Background()
	waitFor(t, 30*time.Second, "pool fill", func() bool { return e.m.PoolLevels()["host"] == 1 })

	del, err := e.m.Create(ctx, "alice", CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if r := g.reasons(del.ID); len(r) != 0 {
		t.Fatalf("hook ran before the sandbox went: %v", r)
	}
	if err := e.m.Delete(ctx, "alice", del.ID); err != nil {
		t.Fatal(err)
	}
	// Synchronous: done when Delete returns.
	if r := g.reasons(del.ID); len(r) != 1 || r[0] != "deleted" || g.owner[del.ID] != "alice" {
		t.Fatalf("after delete: %v owner %q", r, g.owner[del.ID])
	}
	if err := e.m.Delete(ctx, "alice", del.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	if r := g.reasons(del.ID); len(r) != 1 {
		t.Fatalf("hook ran again for a second delete: %v", r)
	}

	exp, err := e.m.Create(ctx, "bob", CreateRequest{Timeout: time.Second, NoPool: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "expiry hook", func() bool { return len(g.reasons(exp.ID)) == 1 })
	if r := g.reasons(exp.ID); r[0] != "timeout" || g.owner[exp.ID] != "bob" {
		t.Fatalf("after expiry: %v owner %q", r, g.owner[exp.ID])
	}

	s1, err := e.m.Create(ctx, "carol", CreateRequest{session: "k", NoPool: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.ReleaseSession(ctx, "carol", "k"); err != nil {
		t.Fatal(err)
	}
	if r := g.reasons(s1.ID); len(r) != 1 || r[0] != "session released" {
		t.Fatalf("after session release: %v", r)
	}
	// The pooled sandboxes destroyed at shutdown were never anyone's.
	waitFor(t, 30*time.Second, "pool refill", func() bool { return e.m.PoolLevels()["host"] == 1 })
	if err := e.m.Shutdown(ctx, true); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.calls) != 3 {
		t.Fatalf("hook calls for %d sandboxes, want 3: %v", len(g.calls), g.calls)
	}
}

// A pooled sandbox reset for the next user (POOL_MAX_USES) is gone for its
// user, though its id comes back: the hook runs with that user's record.
func TestOnGoneRecycledIntoPool(t *testing.T) {
	m, _, _ := newRecycleEnv(t, 3)
	g := watchGone(m)
	ctx := context.Background()
	waitFor(t, 30*time.Second, "pool fill", func() bool { return m.PoolLevels()["host"] == 1 })
	rec, err := m.Create(ctx, "alice", CreateRequest{Timeout: time.Minute})
	if err != nil || !rec.FromPool {
		t.Fatalf("take: %+v %v", rec, err)
	}
	if err := m.Delete(ctx, "alice", rec.ID); err != nil {
		t.Fatal(err)
	}
	if r := g.reasons(rec.ID); len(r) != 1 || r[0] != "recycled into the warm pool" || g.owner[rec.ID] != "alice" {
		t.Fatalf("after a recycling delete: %v owner %q", r, g.owner[rec.ID])
	}
}
