package manager

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// recycleTarget returns the pool a deleted sandbox goes back to, or nil
// when it is destroyed instead: recycling is on (PoolMaxUses > 1, a
// backend.Recycler), the sandbox came from a pool that still exists and
// holds fewer than twice its size (recycled sandboxes may overshoot the
// refill a take started), and it has not served PoolMaxUses users yet.
func (m *Manager) recycleTarget(e *entry) (*pool.Pool, backend.Recycler) {
	r, ok := m.backend.(backend.Recycler)
	// A paused sandbox is destroyed: its frozen processes are not reset.
	if !ok || m.cfg.PoolMaxUses <= 1 || !e.rec.FromPool || e.rec.State == sandbox.StatePaused || e.rec.Uses+1 >= m.cfg.PoolMaxUses {
		return nil, nil
	}
	if g := m.backend.Capabilities().GVisor; e.rec.Isolation == sandbox.IsolationGVisor && g != nil && g.NoRecycle {
		return nil, nil // destroyed after one use (Capabilities.GVisor)
	}
	p := m.pools[e.rec.Template]
	if p == nil || p.Len() >= 2*p.Size() {
		return nil, nil
	}
	return p, r
}

// recycle resets a deleted pooled sandbox in place and puts it back into
// its pool. ok is false when the sandbox is not to be recycled (the caller
// destroys it); a reset that fails destroys it here.
func (m *Manager) recycle(ctx context.Context, id sandbox.ID) (ok bool, err error) {
	m.mu.Lock()
	e, found := m.entries[id]
	if !found || e.destroying || e.creating {
		m.mu.Unlock()
		return false, nil
	}
	p, r := m.recycleTarget(e)
	if p == nil {
		m.mu.Unlock()
		return false, nil
	}
	// Out of the owner's sight from here on: every lookup treats a
	// destroying entry as gone.
	e.destroying = true
	if e.timer != nil {
		e.timer.Stop()
	}
	client := e.client
	e.client = nil
	prev := e.rec
	m.mu.Unlock()
	if client != nil {
		client.Close()
	}

	start := time.Now()
	now := time.Now().UTC()
	rec := &store.Record{
		ID: id, Template: prev.Template, TemplateDigest: prev.TemplateDigest, State: sandbox.StateRunning,
		CreatedAt: now, LastActive: now, Resources: prev.Resources,
		Network:     sandbox.Network{Mode: m.cfg.DefaultNetworkMode},
		AccessToken: newToken(), Pool: p.Key(), Uses: prev.Uses + 1, Node: m.cfg.NodeID,
	}
	// The pooled record replaces the user's first: a daemon that dies
	// during the reset recovers an ownerless pooled sandbox (re-pooled or
	// dropped), never the previous user's half-reset one.
	err = m.store.Put(context.WithoutCancel(ctx), rec)
	if err == nil {
		err = r.Recycle(context.WithoutCancel(ctx), id, backend.RecycleRequest{AccessToken: rec.AccessToken, Network: rec.Network})
	}
	if err != nil {
		m.log.Warn("recycle failed: destroying the sandbox", "sandbox", id, "err", err)
		m.mu.Lock()
		e.destroying = false
		m.mu.Unlock()
		return true, m.destroy(ctx, id, "recycle failed")
	}
	m.mu.Lock()
	e.rec, e.destroying, e.lastActive = rec, false, time.Now()
	e.logs = newEventLog() // the previous user's log is theirs
	e.logs.add("info", "recycled into the warm pool", map[string]any{"uses": rec.Uses})
	m.mu.Unlock()
	// The user's sandbox is gone (the id now names a pooled one).
	m.runGoneHooks(context.WithoutCancel(ctx), prev.Clone(), "recycled into the warm pool")
	p.Add(id)
	m.metrics.recycled(p.Key())
	m.metrics.phase("recycle", time.Since(start))
	m.log.Info("sandbox recycled", "sandbox", id, "uses", rec.Uses, "ms", float64(time.Since(start).Microseconds())/1000)
	return true, nil
}
