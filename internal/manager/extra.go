package manager

import (
	"context"
	"maps"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// maxExtraEntries bounds the front-end data kept with one record.
const maxExtraEntries = 32

// SetExtra sets (or, for an empty value, removes) keys of the front-end
// data kept with one of owner's sandboxes: state a protocol keeps about
// a sandbox after create (Daytona's archived mark and intervals).
func (m *Manager) SetExtra(ctx context.Context, owner string, id sandbox.ID, kv map[string]string) (*store.Record, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	rec := e.rec.Clone()
	extra := maps.Clone(rec.Extra)
	if extra == nil {
		extra = map[string]string{}
	}
	for k, v := range kv {
		if v == "" {
			delete(extra, k)
		} else {
			extra[k] = v
		}
	}
	if err := checkMap("extra", extra, maxExtraEntries, maxMapValueLen); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	rec.Extra = extra
	e.rec = rec
	m.mu.Unlock()
	if err := m.store.Put(ctx, rec); err != nil {
		return nil, err
	}
	return rec.Clone(), nil
}
