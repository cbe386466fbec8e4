package store

import (
	"context"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Memory is a Store that keeps records in memory only; for tests and
// throwaway servers.
type Memory struct {
	mu   sync.Mutex
	recs map[sandbox.ID]*Record
	docs map[string]memDoc // Docs (docs.go)
	// leases are the Leases (lease.go), by name.
	leases map[string]memLease
	events memEvents // the EventLog (events.go)
	audit  memEvents // AuditLog's
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{recs: map[sandbox.ID]*Record{}} }

func (m *Memory) Put(_ context.Context, r *Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[r.ID] = r.Clone()
	return nil
}

func (m *Memory) Get(_ context.Context, id sandbox.ID) (*Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[id]
	if !ok {
		return nil, sandbox.ErrNotFound(id)
	}
	return r.Clone(), nil
}

func (m *Memory) Delete(_ context.Context, id sandbox.ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, id)
	return nil
}

func (m *Memory) List(_ context.Context) ([]*Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Record, 0, len(m.recs))
	for _, r := range m.recs {
		out = append(out, r.Clone())
	}
	return out, nil
}

func (m *Memory) Close() error { return nil }
