package manager

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// Two managers (replicas) on one Redis: MAX_SANDBOXES_PER_USER and
// MAX_SANDBOX_INSTANCES count both replicas' sandboxes, and a refused
// create leaves no record or sandbox behind.
func TestManagersShareLimits(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var ms []*Manager
	for _, node := range []string{"a", "b"} {
		b := fake.New(testutil.AgentBinary(t), t.TempDir())
		t.Cleanup(func() { b.Close() })
		m := New(Config{NodeID: node, MaxPerUser: 2, MaxInstances: 3}, b, rs)
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown(context.Background(), true) })
		ms = append(ms, m)
	}
	if _, err := ms[0].Create(ctx, "alice", CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ms[1].Create(ctx, "alice", CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	// Alice's third, on either replica: over her limit of 2.
	for _, m := range ms {
		if _, err := m.Create(ctx, "alice", CreateRequest{}); sandbox.ClassOf(err) != sandbox.ClassQuota {
			t.Fatalf("alice's third sandbox on %s: %v", m.cfg.NodeID, err)
		}
	}
	if _, err := ms[0].Create(ctx, "bob", CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	// The fourth sandbox of the cluster: over MAX_SANDBOX_INSTANCES=3.
	if _, err := ms[1].Create(ctx, "carol", CreateRequest{}); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("fourth sandbox of the cluster: %v", err)
	}
	recs, err := rs.List(ctx)
	if err != nil || len(recs) != 3 {
		t.Fatalf("records after the refusals: %d %v", len(recs), err)
	}
	if l := ms[1].Load(); l.Sandboxes != 1 {
		t.Fatalf("replica b runs %d sandboxes, want 1", l.Sandboxes)
	}
}

// A restarted daemon on a shared store drops what a crash left half done:
// a create's placeholder (the sandbox booted, its record never written)
// and a pooled sandbox the store handed over whose hand-over never
// finished (no end time).
func TestRecoverHalfDoneSharedWrites(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	m := New(Config{NodeID: "me", PoolTypes: []string{"base"}, PoolSize: 1}, b, rs)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "pool fill", func() bool { return m.Load().Pooled == 1 })
	rec, err := m.Create(ctx, "alice", CreateRequest{NoPool: true})
	if err != nil {
		t.Fatal(err)
	}
	// The crash: the cold one's record is a placeholder again, the pooled
	// one was taken in the store only.
	ph := &store.Record{ID: rec.ID, Owner: "alice", State: sandbox.StateCreating, Node: "me"}
	if err := rs.Put(ctx, ph); err != nil {
		t.Fatal(err)
	}
	var pool string
	recs, _ := rs.List(ctx)
	for _, r := range recs {
		if r.Pool != "" {
			pool = r.Pool
		}
	}
	taken, err := rs.TakePooled(ctx, "me", pool, "bob", 0)
	if err != nil || taken == nil {
		t.Fatalf("take: %+v %v", taken, err)
	}
	if err := m.Shutdown(ctx, false); err != nil {
		t.Fatal(err)
	}
	m2 := New(Config{NodeID: "me"}, b, rs)
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Shutdown(context.Background(), true) })
	for _, id := range []sandbox.ID{rec.ID, taken.ID} {
		if _, err := rs.Get(ctx, id); !sandbox.IsNotFound(err) {
			t.Fatalf("record %s after recovery: %v", id, err)
		}
	}
	if l := m2.Load(); l.Sandboxes != 0 {
		t.Fatalf("recovered %d sandboxes, want none", l.Sandboxes)
	}
	infos, err := b.Recover(ctx)
	if err != nil || len(infos) != 0 {
		t.Fatalf("backend still runs %d sandboxes (%v)", len(infos), err)
	}
}

// raceStore is a shared store that, the first time a pooled sandbox's
// record is stored, runs take before Put returns: a taker on another
// connection picking the sandbox the moment it is in the store's pool,
// while the fill that made it has not returned yet.
type raceStore struct {
	*store.Redis
	once sync.Once
	take func()
}

func (s *raceStore) Put(ctx context.Context, r *store.Record) error {
	if err := s.Redis.Put(ctx, r); err != nil {
		return err
	}
	if r.Pool != "" && s.take != nil {
		s.once.Do(s.take)
	}
	return nil
}

// A shared store's pool hands a sandbox out as soon as its record is
// stored. The taker gets a whole, usable sandbox, and the fill that is
// still returning neither takes it back into the pool nor breaks it.
func TestPoolTakeRacingTheFill(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() }) // after the manager's shutdown
	rst := &raceStore{Redis: rs}
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	m := New(Config{NodeID: "me", PoolTypes: []string{"base"}, PoolSize: 1}, b, rst)
	var (
		taken   *store.Record
		takeErr error
		took    = make(chan struct{})
	)
	rst.take = func() {
		defer close(took)
		taken, takeErr = m.Create(ctx, "alice", CreateRequest{})
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	select {
	case <-took:
	case <-time.After(30 * time.Second):
		t.Fatal("no pool fill in 30 s")
	}
	if takeErr != nil {
		t.Fatal(takeErr)
	}
	if !taken.FromPool {
		t.Fatalf("the take did not get the pooled sandbox: %+v", taken)
	}
	// The pool refills with another sandbox; the taken one stays alice's.
	waitFor(t, 30*time.Second, "pool refill", func() bool { return m.Load().Pooled == 1 })
	got, err := m.Get(ctx, "alice", taken.ID)
	if err != nil {
		t.Fatalf("alice's sandbox after the fill returned: %v", err)
	}
	if got.Pool != "" || got.Owner != "alice" {
		t.Fatalf("alice's sandbox went back to the pool: %+v", got)
	}
	if l := m.Load(); l.Sandboxes != 2 {
		t.Fatalf("%d sandboxes, want alice's and the refill", l.Sandboxes)
	}
	stored, err := rs.Get(ctx, taken.ID)
	if err != nil || stored.Owner != "alice" || stored.Pool != "" {
		t.Fatalf("alice's record in the store: %+v %v", stored, err)
	}
}
