package manager

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// recyclingFake gives the fake backend a Recycle that boots a new agent
// (with the new token) under the same id, or fails on demand.
type recyclingFake struct {
	*fake.Backend
	calls atomic.Int32
	fail  atomic.Bool
}

func (r *recyclingFake) Recycle(ctx context.Context, id sandbox.ID, req backend.RecycleRequest) error {
	r.calls.Add(1)
	if r.fail.Load() {
		return errors.New("reset failed (test)")
	}
	in, err := r.Inspect(ctx, id)
	if err != nil {
		return err
	}
	spec := in.Spec
	spec.AccessToken, spec.Network, spec.Env = req.AccessToken, req.Network, nil
	if err := r.Destroy(ctx, id); err != nil {
		return err
	}
	_, err = r.Create(ctx, spec)
	return err
}

func newRecycleEnv(t *testing.T, maxUses int) (*Manager, *recyclingFake, store.Store) {
	t.Helper()
	b := &recyclingFake{Backend: fake.New(testutil.AgentBinary(t), t.TempDir())}
	t.Cleanup(func() { b.Close() })
	st := store.NewMemory()
	m := New(Config{PoolTypes: []string{"base"}, PoolSize: 1, PoolMaxUses: maxUses}, b, st)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	return m, b, st
}

// takeUntil creates sandboxes for owner from the pool (at most 3, each
// after the pool refilled) until one is id; the others stay owner's.
func takeUntil(t *testing.T, m *Manager, owner string, id sandbox.ID) *store.Record {
	t.Helper()
	for i := 0; i < 3; i++ {
		waitFor(t, 30*time.Second, "pool fill", func() bool { return m.PoolLevels()["host"] >= 1 })
		rec, err := m.Create(context.Background(), owner, CreateRequest{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if rec.ID == id {
			return rec
		}
	}
	t.Fatalf("sandbox %s never came out of the pool again", id)
	return nil
}

func TestPoolRecycleUntilMaxUses(t *testing.T) {
	m, b, st := newRecycleEnv(t, 3)
	ctx := context.Background()
	waitFor(t, 30*time.Second, "pool fill", func() bool { return m.PoolLevels()["host"] == 1 })
	first, err := m.Create(ctx, "alice", CreateRequest{Metadata: map[string]string{"k": "alice"}, Env: map[string]string{"WHO": "alice"}, Timeout: time.Minute})
	if err != nil || !first.FromPool {
		t.Fatalf("first take: %+v %v", first, err)
	}
	id := first.ID
	tokens := map[string]bool{first.AccessToken: true}
	for use, owner := range []string{"bob", "carol"} {
		prevOwner := first.Owner
		if err := m.Delete(ctx, prevOwner, id); err != nil {
			t.Fatal(err)
		}
		if got := int(b.calls.Load()); got != use+1 {
			t.Fatalf("delete %d: %d resets", use+1, got)
		}
		if _, err := m.Get(ctx, prevOwner, id); !sandbox.IsNotFound(err) {
			t.Fatalf("the previous owner still sees the sandbox: %v", err)
		}
		if _, err := m.Lookup(id); !sandbox.IsNotFound(err) {
			t.Fatalf("a pooled sandbox is reachable by token: %v", err)
		}
		rec := takeUntil(t, m, owner, id)
		if rec.Owner != owner || rec.Uses != use+1 || rec.Metadata["k"] != "" || tokens[rec.AccessToken] {
			t.Fatalf("use %d: %+v", use+2, rec)
		}
		tokens[rec.AccessToken] = true
		if out := execOut(t, m, owner, id, "/bin/sh", "-c", "echo \"[$WHO]\""); out != "[]\n" {
			t.Fatalf("env survived: %q", out)
		}
		first = rec
	}
	// The third user's delete reaches max_uses: destroyed, not reset.
	if err := m.Delete(ctx, "carol", id); err != nil {
		t.Fatal(err)
	}
	if got := b.calls.Load(); got != 2 {
		t.Fatalf("a sandbox at max_uses was reset (%d resets)", got)
	}
	if _, err := st.Get(ctx, id); err == nil {
		t.Fatal("the record of a sandbox at max_uses is still there")
	}
	if _, err := b.Inspect(ctx, id); err == nil {
		t.Fatal("a sandbox at max_uses still exists")
	}
}

func TestPoolRecycleFailureDestroys(t *testing.T) {
	m, b, st := newRecycleEnv(t, 5)
	ctx := context.Background()
	waitFor(t, 30*time.Second, "pool fill", func() bool { return m.PoolLevels()["host"] == 1 })
	rec, err := m.Create(ctx, "alice", CreateRequest{Timeout: time.Minute})
	if err != nil || !rec.FromPool {
		t.Fatalf("take: %+v %v", rec, err)
	}
	b.fail.Store(true)
	if err := m.Delete(ctx, "alice", rec.ID); err != nil {
		t.Fatal(err)
	}
	if b.calls.Load() != 1 {
		t.Fatal("no reset was tried")
	}
	if _, err := st.Get(ctx, rec.ID); err == nil {
		t.Fatal("record kept after a failed reset")
	}
	if _, err := b.Inspect(ctx, rec.ID); err == nil {
		t.Fatal("sandbox kept after a failed reset")
	}
	// A cold sandbox (not from a pool) is never reset.
	b.fail.Store(false)
	cold, err := m.Create(ctx, "alice", CreateRequest{NoPool: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "alice", cold.ID); err != nil {
		t.Fatal(err)
	}
	if b.calls.Load() != 1 {
		t.Fatal("a sandbox not from a pool was reset")
	}
}
