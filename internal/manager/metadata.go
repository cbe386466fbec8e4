package manager

import (
	"context"
	"maps"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// SetMetadata replaces the metadata of one of owner's sandboxes (Daytona's
// labels are mutable), validated as at create.
func (m *Manager) SetMetadata(ctx context.Context, owner string, id sandbox.ID, md map[string]string) (*store.Record, error) {
	if err := checkMap("metadata", md, maxMetadataEntries, maxMapValueLen); err != nil {
		return nil, err
	}
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	rec := e.rec.Clone()
	rec.Metadata = maps.Clone(md)
	e.rec = rec
	m.mu.Unlock()
	if err := m.store.Put(ctx, rec); err != nil {
		return nil, err
	}
	return rec.Clone(), nil
}
