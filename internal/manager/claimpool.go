package manager

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// A claim pool is the warm pool of a template whose backend keeps warm
// pools itself (backend.WarmPooler: the kube backend's SandboxWarmPool,
// a hit being a SandboxClaim). The backend boots and refills it; the
// manager only makes sure it exists at POOL_SIZE, hands sandboxes out of
// it and counts hits and misses as for its own pools. Its sandboxes are
// not the manager's until handed out: they live in the backend (and
// survive a restart there), not in the manager's records.
type claimPool struct {
	key     string // the template's name (Template.Ref), as a pool's key
	name    string // the backend's name of the pool
	size    int
	backend backend.WarmPooler
	ensured chan struct{} // closed when ensureClaimPool is done

	mu           sync.Mutex
	hits, misses int64
	ready        int       // the backend's level, read at readAt
	readAt       time.Time // zero: never read
}

// claimLevelMaxAge is how long a read pool level serves stats before the
// backend is asked again.
const claimLevelMaxAge = time.Second

func (cp *claimPool) count(hit bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if hit {
		cp.hits++
	} else {
		cp.misses++
	}
}

// level is the number of booted sandboxes in the pool, read from the
// backend at most every claimLevelMaxAge (stats are read often).
func (cp *claimPool) level(ctx context.Context) int {
	cp.mu.Lock()
	if !cp.readAt.IsZero() && time.Since(cp.readAt) < claimLevelMaxAge {
		defer cp.mu.Unlock()
		return cp.ready
	}
	cp.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n, err := cp.backend.PoolReady(ctx, cp.name)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err == nil {
		cp.ready, cp.readAt = n, time.Now()
	}
	return cp.ready
}

func (cp *claimPool) stats(ctx context.Context) pool.Stats {
	ready := cp.level(ctx)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return pool.Stats{Template: cp.key, Size: cp.size, Ready: ready, Hits: cp.hits, Misses: cp.misses}
}

// startClaimPool makes template t's pool a claim pool when the backend
// keeps pools of t, and reports whether it did.
func (m *Manager) startClaimPool(ctx context.Context, key string, t sandbox.Template) bool {
	wp, ok := m.backend.(backend.WarmPooler)
	if !ok {
		return false
	}
	name, ok := wp.PoolName(t)
	if !ok {
		return false
	}
	cp := &claimPool{key: key, name: name, size: m.cfg.PoolSize, backend: wp, ensured: make(chan struct{})}
	m.mu.Lock()
	if m.claimPools == nil {
		m.claimPools = map[string]*claimPool{}
	}
	m.claimPools[key] = cp
	m.mu.Unlock()
	// Pooled sandboxes boot as pool fills do: the defaults, the default
	// network mode, no workspace directory of the host.
	spec := sandbox.Spec{
		Template: t, Network: sandbox.Network{Mode: m.cfg.DefaultNetworkMode},
		Resources: sandbox.Resources{}.WithDefaults(templateDefaults(t, m.cfg.DefaultResources, m.cfg.MaxResources)),
		Mounts:    m.cfg.ReadonlyMounts, WritableRoot: t.Kind == sandbox.TemplateImage,
	}
	go m.ensureClaimPool(ctx, cp, spec)
	return true
}

// ensureClaimPool makes (or resizes) cp in the backend, retrying with a
// back-off until it succeeds or ctx ends; until then creates are misses.
func (m *Manager) ensureClaimPool(ctx context.Context, cp *claimPool, spec sandbox.Spec) {
	defer close(cp.ensured)
	backoff := 250 * time.Millisecond
	for {
		err := cp.backend.EnsurePool(ctx, cp.name, spec, int32(cp.size))
		if err == nil {
			m.log.Info("warm pool kept by the backend", "template", cp.key, "pool", cp.name, "size", cp.size)
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("make the backend's warm pool", "template", cp.key, "pool", cp.name, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// dropOrphanClaimPools deletes the backend's pools of this daemon that no
// configured pool uses any more (a type removed, POOL_SIZE=0): nobody
// would ever take their sandboxes.
func (m *Manager) dropOrphanClaimPools(ctx context.Context) {
	wp, ok := m.backend.(backend.WarmPooler)
	if !ok {
		return
	}
	names, err := wp.Pools(ctx)
	if err != nil {
		m.log.Warn("list the backend's warm pools", "err", err)
	}
	m.mu.Lock()
	used := map[string]bool{}
	for _, cp := range m.claimPools {
		used[cp.name] = true
	}
	m.mu.Unlock()
	for _, name := range names {
		if used[name] {
			continue
		}
		if err := wp.DeletePool(ctx, name); err != nil {
			m.log.Warn("delete an unused warm pool", "pool", name, "err", err)
		} else {
			m.log.Info("deleted an unused warm pool", "pool", name)
		}
	}
}

func (m *Manager) claimPoolFor(template string) *claimPool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claimPools[template]
}

// createClaimed hands a sandbox out of claim pool cp. ok is false on a
// miss (the pool is empty, or cannot serve req), for a cold create.
func (m *Manager) createClaimed(ctx context.Context, cp *claimPool, owner, typ string, t sandbox.Template, req CreateRequest) (*store.Record, bool, error) {
	// The pool's sandboxes run under the pool's egress policy object and
	// without a service of their own: a request for either boots cold.
	if len(req.Network.AllowOut)+len(req.Network.DenyOut) > 0 {
		cp.count(false)
		return nil, false, nil
	}
	if svc, err := serviceFor(t, req); err != nil || svc != nil {
		cp.count(false)
		return nil, false, nil
	}
	if n, err := cp.backend.PoolReady(ctx, cp.name); err != nil || n == 0 {
		if err != nil {
			m.log.Debug("warm pool level", "pool", cp.name, "err", err)
		}
		cp.count(false)
		return nil, false, nil
	}
	rec, err := m.createNew(ctx, owner, t, typ, req, "", cp)
	if err != nil {
		if c := sandbox.ClassOf(err); c == sandbox.ClassQuota || c == sandbox.ClassInvalid || ctx.Err() != nil {
			return nil, true, err
		}
		// The backend left nothing of it; a cold create still serves.
		m.log.Warn("warm pool hand-out failed; creating cold", "template", cp.key, "err", err)
		cp.count(false)
		return nil, false, nil
	}
	cp.count(true)
	m.metrics.poolHit(cp.key)
	return rec, true, nil
}

// claimPoolStats are the claim pools' stats.
func (m *Manager) claimPoolStats() []pool.Stats {
	m.mu.Lock()
	cps := make([]*claimPool, 0, len(m.claimPools))
	for _, cp := range m.claimPools {
		cps = append(cps, cp)
	}
	m.mu.Unlock()
	out := make([]pool.Stats, 0, len(cps))
	for _, cp := range cps {
		out = append(out, cp.stats(context.Background()))
	}
	return out
}

// deleteClaimPools deletes the backend's pools (a shutdown that destroys
// every sandbox); otherwise they stay for the next start.
func (m *Manager) deleteClaimPools(ctx context.Context) error {
	m.mu.Lock()
	cps := m.claimPools
	m.claimPools = nil
	m.mu.Unlock()
	var errs []error
	for _, cp := range cps {
		<-cp.ensured // ended with the loops' context: no make after the delete
		if err := cp.backend.DeletePool(ctx, cp.name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
