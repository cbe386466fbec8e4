package manager

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// StopSandbox kills every process of one of owner's sandboxes but keeps its
// files; StartSandbox boots it again. The end time keeps running while stopped.
// Stopping a stopped sandbox is not an error.
func (m *Manager) StopSandbox(ctx context.Context, owner string, id sandbox.ID) (*store.Record, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	if err := m.backend.Stop(ctx, id); err != nil {
		return nil, fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	return m.setState(ctx, e, sandbox.StateStopped, "stopped")
}

// StartSandbox boots one of owner's stopped sandboxes again (a running one is
// left alone).
func (m *Manager) StartSandbox(ctx context.Context, owner string, id sandbox.ID) (*store.Record, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	info, err := m.backend.Start(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	m.mu.Lock()
	e.agent = info.Agent
	m.mu.Unlock()
	return m.setState(ctx, e, sandbox.StateRunning, "started")
}

func (m *Manager) setState(ctx context.Context, e *entry, st sandbox.State, event string) (*store.Record, error) {
	m.mu.Lock()
	if e.client != nil {
		// The agent behind it is gone (stop) or new (start).
		e.client.Close()
		e.client = nil
	}
	rec := e.rec.Clone()
	rec.State = st
	e.rec = rec
	e.logs.add("info", event, nil)
	m.mu.Unlock()
	if err := m.store.Put(ctx, rec); err != nil {
		return nil, err
	}
	return rec.Clone(), nil
}
