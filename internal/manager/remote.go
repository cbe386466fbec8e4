package manager

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Other replicas' sandboxes. With a shared store every replica lists every
// sandbox of a user (their records are in the store); requests to a
// sandbox another daemon runs are forwarded there before they reach the
// manager (cluster.Forwarder), except for a sandbox whose daemon is lost:
// it is shown in state lost and a delete drops its record.

// NodeLister returns the live nodes of the registry.
type NodeLister func(ctx context.Context) ([]store.Node, error)

// SetNodes gives the manager the node registry (Config.Nodes), for a test
// of a manager made without one. Call it before serving.
func (m *Manager) SetNodes(list NodeLister) { m.nodes = list }

// liveNodes returns the ids of the live nodes (nil when unknown).
func (m *Manager) liveNodes(ctx context.Context) map[string]bool {
	if m.nodes == nil {
		return nil
	}
	nodes, err := m.nodes(ctx)
	if err != nil {
		return nil
	}
	live := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		live[n.ID] = true
	}
	return live
}

// remote reports whether rec is another live-or-lost replica's handed-out
// sandbox, and marks it lost when its node is not live.
func (m *Manager) remote(rec *store.Record, live map[string]bool) bool {
	if rec.Node == "" || rec.Node == m.cfg.NodeID || rec.Pool != "" || rec.State == sandbox.StateCreating {
		return false
	}
	if live != nil && !live[rec.Node] {
		rec.State = sandbox.StateLost
	}
	return true
}

// remoteRecords returns owner's sandboxes on other replicas. The store
// being away only hides them: this daemon's own list needs no store.
func (m *Manager) remoteRecords(ctx context.Context, owner string) []*store.Record {
	if m.atomicStore() == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	recs, err := m.store.List(lctx)
	if err != nil {
		m.log.Warn("list other replicas' sandboxes", "err", err)
		return nil
	}
	live := m.liveNodes(lctx)
	out := recs[:0]
	for _, rec := range recs {
		if rec.Owner == owner && m.remote(rec, live) {
			out = append(out, rec)
		}
	}
	return out
}

// remoteRecord returns owner's sandbox id on another replica (its state
// lost when that replica is), or a not-found error.
func (m *Manager) remoteRecord(ctx context.Context, owner string, id sandbox.ID) (*store.Record, error) {
	if m.atomicStore() == nil || id.Validate() != nil {
		return nil, sandbox.ErrNotFound(id)
	}
	rec, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.Owner != owner || !m.remote(rec, m.liveNodes(ctx)) {
		return nil, sandbox.ErrNotFound(id)
	}
	return rec, nil
}

// deleteRemote deletes owner's sandbox id on another replica: the record
// of a lost one goes (its daemon, when it comes back, destroys a sandbox
// without a record); a live replica's is refused, as a request this
// daemon could not forward.
func (m *Manager) deleteRemote(ctx context.Context, owner string, id sandbox.ID) error {
	rec, err := m.remoteRecord(ctx, owner, id)
	if err != nil {
		return err
	}
	if rec.State != sandbox.StateLost {
		return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s runs on node %s; this daemon cannot forward to it (set CLUSTER_SECRET on every replica)", id, rec.Node)
	}
	if err := m.store.Delete(context.WithoutCancel(ctx), id); err != nil {
		return err
	}
	m.log.Info("record of a lost sandbox deleted", "sandbox", id, "node", rec.Node)
	m.runGoneHooks(context.WithoutCancel(ctx), rec, "deleted (lost node)")
	return nil
}

// Hosts reports whether this daemon runs sandbox id (in any state), so a
// request for it needs no store read to know it is served here.
func (m *Manager) Hosts(id sandbox.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.entries[id]
	return ok
}

// lostSweepEvery spaces the sweeps of lost replicas' records.
const lostSweepEvery = 5 * time.Second

// lostSweepLoop ends lost replicas' sandboxes whose time is up, as their
// own daemon would have: of the live replicas, the one that wins the
// expiry claim deletes the record (once), and the lost daemon, when it
// comes back, destroys the sandbox it finds without a record. Placeholders
// of creates a lost replica never finished go too: they count against
// limits and nobody could delete them.
func (m *Manager) lostSweepLoop(ctx context.Context) {
	defer close(m.sweepDone)
	a := m.atomicStore()
	if a == nil {
		return
	}
	t := time.NewTicker(lostSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, lostSweepEvery)
		m.sweepLost(sctx, a)
		cancel()
	}
}

// deleteLater remembers a record to delete once the store is back: with
// replicas listing each other's records, one left behind would show a
// sandbox that is gone.
func (m *Manager) deleteLater(id sandbox.ID) {
	if m.atomicStore() == nil {
		return // a local store: the next start drops it
	}
	m.mu.Lock()
	if m.staleRecords == nil {
		m.staleRecords = map[sandbox.ID]bool{}
	}
	m.staleRecords[id] = true
	m.mu.Unlock()
}

// retryDeletes deletes the records deleteLater kept, unless the sandbox
// exists here again (an id is never reused, but be sure).
func (m *Manager) retryDeletes(ctx context.Context) {
	m.mu.Lock()
	var ids []sandbox.ID
	for id := range m.staleRecords {
		if _, ok := m.entries[id]; !ok {
			ids = append(ids, id)
		}
	}
	m.mu.Unlock()
	for _, id := range ids {
		if err := m.store.Delete(ctx, id); err != nil {
			return // still away: next round
		}
		m.mu.Lock()
		delete(m.staleRecords, id)
		m.mu.Unlock()
		m.log.Info("record of a destroyed sandbox deleted after the store came back", "sandbox", id)
	}
}

func (m *Manager) sweepLost(ctx context.Context, a store.Atomic) {
	m.retryDeletes(ctx)
	if m.nodes == nil {
		return
	}
	nodes, err := m.nodes(ctx)
	if err != nil {
		return // the store is away: nothing can be decided
	}
	live := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		live[n.ID] = true
	}
	recs, err := m.store.List(ctx)
	if err != nil {
		return
	}
	now := time.Now().UTC()
	for _, rec := range recs {
		if rec.Node == "" || rec.Node == m.cfg.NodeID || live[rec.Node] || rec.Pool != "" {
			continue
		}
		switch {
		case rec.State == sandbox.StateCreating:
			if now.Sub(rec.CreatedAt) < 10*time.Minute {
				continue // the node may just have missed a heartbeat
			}
			m.log.Info("dropping the placeholder of a lost replica's create", "sandbox", rec.ID, "node", rec.Node)
			_ = m.store.Delete(ctx, rec.ID)
		case rec.AutoPause && rec.State != sandbox.StatePaused:
			// Its end pauses it, which only its daemon can do.
		default:
			won, err := a.ClaimExpiry(ctx, rec.ID, now, expiryHold)
			if err != nil || !won {
				continue
			}
			if err := m.store.Delete(ctx, rec.ID); err != nil {
				m.log.Warn("delete the record of a lost replica's expired sandbox", "sandbox", rec.ID, "err", err)
				continue
			}
			m.metrics.destroyed("timeout (lost node)")
			m.log.Info("sandbox of a lost replica expired; record deleted", "sandbox", rec.ID, "node", rec.Node, "end_at", rec.EndAt)
			m.runGoneHooks(ctx, rec, "timeout (lost node)")
			m.emit(rec, events.Expired, events.Cause{Kind: events.CauseNodeLost, Detail: "its replica " + rec.Node + " is gone"}, nil, nil)
		}
	}
}
