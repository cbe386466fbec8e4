package manager

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// With a shared store (store.Atomic, Redis) the limits, pool hand-overs
// and expiries are decided by the store, across every replica: this
// daemon's own counts only see its own sandboxes.

// expiryHold is how long an expiry claim keeps other replicas off a
// sandbox whose claimer died before deleting it.
const expiryHold = time.Minute

func (m *Manager) atomicStore() store.Atomic {
	a, _ := m.store.(store.Atomic)
	return a
}

// reserveShared records a placeholder of a new sandbox in the shared store
// within MAX_SANDBOX_INSTANCES and MAX_SANDBOXES_PER_USER counted over all
// replicas, before anything boots. The placeholder is in state creating,
// never pooled (a take must not find a sandbox still booting); the final
// record replaces it.
func (m *Manager) reserveShared(ctx context.Context, id sandbox.ID, owner string) error {
	a := m.atomicStore()
	if a == nil {
		return nil
	}
	now := time.Now().UTC()
	ph := &store.Record{ID: id, Owner: owner, State: sandbox.StateCreating, CreatedAt: now, LastActive: now, Node: m.cfg.NodeID}
	return a.PutWithin(context.WithoutCancel(ctx), ph, m.cfg.MaxInstances, m.cfg.MaxPerUser)
}

// dropShared removes the placeholder of a create that failed.
func (m *Manager) dropShared(ctx context.Context, id sandbox.ID) {
	if m.atomicStore() == nil {
		return
	}
	if err := m.store.Delete(context.WithoutCancel(ctx), id); err != nil {
		m.log.Warn("drop the record of a failed create; retrying when the store is back", "sandbox", id, "err", err)
		m.deleteLater(id)
	}
}

// takeShared takes one of this daemon's pooled sandboxes of p through the
// shared store: the store picks it and moves it to owner in one
// transaction, so no two callers on any replica get it. ok is false when
// the pool is empty.
func (m *Manager) takeShared(ctx context.Context, a store.Atomic, p *pool.Pool, owner string) (sandbox.ID, *store.Record, bool, error) {
	rec, err := a.TakePooled(ctx, m.cfg.NodeID, p.Key(), owner, m.cfg.MaxPerUser)
	if err != nil || rec == nil {
		if err == nil {
			p.Take() // counts the miss and kicks the refill
		}
		return "", nil, false, err
	}
	p.TakeID(rec.ID)
	return rec.ID, rec, true, nil
}

// claimExpiry reports whether this daemon is the one to expire id now.
// Without a shared store, or with it away, it is (the sandbox runs here).
// When another replica already claimed it the sandbox is expiring all the
// same; when the shared record has a later end time (extended through the
// store) the timer follows it and the sandbox lives on.
func (m *Manager) claimExpiry(id sandbox.ID) bool {
	a := m.atomicStore()
	if a == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	won, err := a.ClaimExpiry(ctx, id, time.Now().UTC(), expiryHold)
	if err != nil || won {
		if err != nil {
			m.log.Warn("expiry claim failed; expiring the sandbox here", "sandbox", id, "err", err)
		}
		return true
	}
	rec, err := m.store.Get(ctx, id)
	if err != nil || rec.EndAt.IsZero() || !rec.EndAt.After(time.Now()) {
		// Gone, or expired and claimed by another replica: it ends here too
		// (the destroy and the record's delete are idempotent).
		return true
	}
	m.mu.Lock()
	if e, ok := m.entries[id]; ok && !e.destroying {
		e.rec = e.rec.Clone()
		e.rec.EndAt = rec.EndAt
		m.armTimerLocked(id, e)
		e.logs.add("info", "end time follows the shared record", map[string]any{"end_at": rec.EndAt})
	}
	m.mu.Unlock()
	return false
}

// unreserveShared undoes reserve and reserveShared.
func (m *Manager) unreserveShared(ctx context.Context, id sandbox.ID) {
	m.dropShared(ctx, id)
	m.unreserve(id)
	if m.cfg.Volumes != nil {
		m.cfg.Volumes.Release(id) // a create that failed after its volumes were staged
	}
}
