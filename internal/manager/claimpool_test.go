package manager

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// poolingBackend is the fake backend keeping warm pools of host templates
// itself, as the kube backend keeps SandboxWarmPools: the test sets each
// pool's ready count; a hand-out boots the sandbox with the pool's spec
// and the caller's id, token and env.
type poolingBackend struct {
	*fake.Backend
	mu       sync.Mutex
	pools    map[string]*fakePool
	claimErr error
	deleted  []string
}

type fakePool struct {
	spec     sandbox.Spec
	replicas int32
	ready    int
}

var _ backend.WarmPooler = (*poolingBackend)(nil)

func (b *poolingBackend) PoolName(t sandbox.Template) (string, bool) {
	return "p-" + t.Ref, t.Kind == sandbox.TemplateHost
}

func (b *poolingBackend) EnsurePool(ctx context.Context, name string, spec sandbox.Spec, replicas int32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.pools[name]; ok {
		p.replicas = replicas
		return nil
	}
	b.pools[name] = &fakePool{spec: spec, replicas: replicas}
	return nil
}

func (b *poolingBackend) PoolReady(ctx context.Context, name string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.pools[name]
	if !ok {
		return 0, sandbox.Errorf(sandbox.ClassNotFound, "no pool %s", name)
	}
	return p.ready, nil
}

func (b *poolingBackend) CreateFromPool(ctx context.Context, name string, spec sandbox.Spec) (sandbox.Info, error) {
	b.mu.Lock()
	p, ok := b.pools[name]
	err := b.claimErr
	switch {
	case !ok:
		err = sandbox.Errorf(sandbox.ClassNotFound, "no pool %s", name)
	case err == nil && p.ready == 0:
		err = errors.New("pool empty")
	case err == nil:
		p.ready--
	}
	var full sandbox.Spec
	if ok {
		full = p.spec
	}
	b.mu.Unlock()
	if err != nil {
		return sandbox.Info{}, err
	}
	full.ID, full.AccessToken, full.Env, full.Labels = spec.ID, spec.AccessToken, spec.Env, spec.Labels
	return b.Create(ctx, full)
}

func (b *poolingBackend) DeletePool(ctx context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pools, name)
	b.deleted = append(b.deleted, name)
	return nil
}

func (b *poolingBackend) Pools(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for name := range b.pools {
		out = append(out, name)
	}
	return out, nil
}

func (b *poolingBackend) pool(name string) (fakePool, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.pools[name]
	if !ok {
		return fakePool{}, false
	}
	return *p, true
}

func (b *poolingBackend) setReady(name string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pools[name].ready = n
}

func statsOf(m *Manager, template string) pool.Stats {
	for _, st := range m.PoolStats() {
		if st.Template == template {
			return st
		}
	}
	return pool.Stats{}
}

// TestClaimPools: on a backend that keeps warm pools itself the manager's
// pool of a type is the backend's: made at POOL_SIZE at start (an unused
// pool of the backend deleted), a create taken out of it when it has a
// ready sandbox (with the caller's env, counted as a hit) and cold
// otherwise or when the hand-out fails (a miss), and deleted by a
// shutdown that destroys everything.
func TestClaimPools(t *testing.T) {
	b := &poolingBackend{Backend: fake.New(testutil.AgentBinary(t), t.TempDir()), pools: map[string]*fakePool{
		"p-old": {replicas: 3},
	}}
	t.Cleanup(func() { b.Close() })
	m := New(Config{PoolTypes: []string{"base"}, PoolSize: 2}, b, store.NewMemory())
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(ctx, true)

	waitFor(t, 10*time.Second, "the backend's pool made", func() bool { _, ok := b.pool("p-host"); return ok })
	p, _ := b.pool("p-host")
	if p.replicas != 2 || p.spec.Template.Kind != sandbox.TemplateHost || p.spec.Network.Mode != sandbox.NetworkNone {
		t.Fatalf("pool made with %+v", p)
	}
	if _, ok := b.pool("p-old"); ok {
		t.Fatal("a pool no type uses was kept")
	}
	if creates := b.Calls("create"); creates != 0 {
		t.Fatalf("the manager booted %d sandboxes for a pool the backend keeps", creates)
	}

	// Empty: a cold create, a miss.
	cold, err := m.Create(ctx, "alice", CreateRequest{})
	if err != nil || cold.FromPool {
		t.Fatalf("create on an empty pool: %+v, %v", cold, err)
	}
	if st := statsOf(m, "host"); st.Misses != 1 || st.Hits != 0 || st.Size != 2 || st.Ready != 0 {
		t.Fatalf("stats after a miss: %+v", st)
	}

	// Ready: a hand-out with the caller's env and token.
	b.setReady("p-host", 1)
	hit, err := m.Create(ctx, "alice", CreateRequest{Env: map[string]string{"WHO": "alice"}})
	if err != nil || !hit.FromPool || hit.Owner != "alice" {
		t.Fatalf("create on a ready pool: %+v, %v", hit, err)
	}
	if out := execOut(t, m, "alice", hit.ID, "/bin/sh", "-c", "echo $WHO"); out != "alice\n" {
		t.Fatalf("the handed-out sandbox's env: %q", out)
	}
	if st := statsOf(m, "host"); st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("stats after a hit: %+v", st)
	}
	if lv := m.PoolLevels()["host"]; lv != 0 {
		t.Fatalf("pool level %d, want 0 (the backend's ready count)", lv)
	}

	// A failed hand-out leaves it to a cold create.
	b.setReady("p-host", 1)
	b.mu.Lock()
	b.claimErr = errors.New("claim broke")
	b.mu.Unlock()
	rec, err := m.Create(ctx, "bob", CreateRequest{})
	if err != nil || rec.FromPool {
		t.Fatalf("create when the hand-out fails: %+v, %v", rec, err)
	}
	if st := statsOf(m, "host"); st.Hits != 1 || st.Misses != 2 {
		t.Fatalf("stats after a failed hand-out: %+v", st)
	}

	if err := m.Shutdown(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.pool("p-host"); ok {
		t.Fatal("the backend's pool survived a shutdown that destroys everything")
	}
}
