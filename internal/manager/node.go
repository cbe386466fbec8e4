package manager

import (
	"context"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// ownRecord reports whether rec is this daemon's to recover. Records
// without a node predate node names (a single daemon's bbolt file) and are
// its own.
func (m *Manager) ownRecord(rec *store.Record) bool {
	return rec.Node == "" || rec.Node == m.cfg.NodeID
}

// Load is what this daemon runs, for the node registry.
type Load struct {
	// Sandboxes counts every sandbox (pooled and being created included),
	// Pooled those waiting in warm pools.
	Sandboxes, Pooled int
	// MemoryBytes sums the sandboxes' memory limits.
	MemoryBytes int64
}

// Load returns the daemon's current load.
func (m *Manager) Load() Load {
	m.mu.Lock()
	defer m.mu.Unlock()
	var l Load
	for _, e := range m.entries {
		l.Sandboxes++
		if e.rec.Pool != "" {
			l.Pooled++
		}
		l.MemoryBytes += e.rec.Resources.MemoryBytes
	}
	return l
}

// stateReady fails fast (ClassUnavailable, 503) when the state store is a
// server that does not answer: a create would boot a sandbox only to fail
// at its record, or hand a pooled one over and fail after.
func (m *Manager) stateReady(ctx context.Context) error {
	if p, ok := m.store.(store.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// nodeFullMsg is the message of the quota error a create gets when this
// replica hands out its NODE_MAX_SANDBOXES already.
const nodeFullMsg = "this replica runs its maximum of %d sandboxes (NODE_MAX_SANDBOXES)"

// admitNode holds one of the NodeMaxSandboxes slots for a create, or fails
// with a quota error when they are taken: handed-out sandboxes plus the
// creates under way. The slot is released when the create ends (its
// sandbox then counts itself).
func (m *Manager) admitNode() (release func(), err error) {
	if m.cfg.NodeMaxSandboxes <= 0 {
		return func() {}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodeCreates
	for _, e := range m.entries {
		if !e.creating && e.rec.Pool == "" && e.rec.Provider == "" {
			n++
		}
	}
	if n >= m.cfg.NodeMaxSandboxes {
		return nil, sandbox.Errorf(sandbox.ClassQuota, nodeFullMsg, m.cfg.NodeMaxSandboxes)
	}
	m.nodeCreates++
	return func() {
		m.mu.Lock()
		m.nodeCreates--
		m.mu.Unlock()
	}, nil
}
