package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/events"
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
	defer m.lockPause(id)()
	if m.snapshot(e).State == sandbox.StatePaused {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is paused; resume or delete it", id)
	}
	if err := m.backend.Stop(ctx, id); err != nil {
		return nil, fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	rec, err := m.setState(ctx, e, sandbox.StateStopped, "stopped")
	if err == nil {
		m.emit(rec, events.Stopped, api(owner), nil, nil)
	}
	return rec, err
}

// StartSandbox boots one of owner's stopped sandboxes again (a running one is
// left alone).
func (m *Manager) StartSandbox(ctx context.Context, owner string, id sandbox.ID) (*store.Record, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	defer m.lockPause(id)()
	if m.snapshot(e).State == sandbox.StatePaused {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is paused; resume it instead", id)
	}
	info, err := m.backend.Start(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	m.mu.Lock()
	e.agent = info.Agent
	if e.client != nil {
		// The agent is a new process (on Docker at a new pid): clients
		// are made for an endpoint.
		e.client.Close()
		e.client = nil
	}
	token := e.rec.AccessToken
	m.mu.Unlock()
	rec, err := m.setState(ctx, e, sandbox.StateRunning, "started")
	if err != nil {
		return nil, err
	}
	m.emit(rec, events.Started, api(owner), nil, nil)
	// The boot ran the template's service again: as create, start returns
	// once it is ready (at once for a sandbox without one). A service that
	// does not get ready leaves the sandbox running, with the error. A
	// provider's sandbox runs no agentbox template service (and its data
	// plane has no /service to ask).
	if rec.Provider != "" {
		return rec, nil
	}
	if err := m.waitService(ctx, id, info, token); err != nil {
		return nil, fmt.Errorf("sandbox %s started, but: %w", id, err)
	}
	return rec, nil
}

// agentExited follows a backend whose sandbox agent died on its own (OOM
// killer, crash): the backend stopped the sandbox, so its record says
// stopped (Start boots it again) and its log says why. A pooled sandbox is
// useless and is destroyed; the pool makes a new one.
func (m *Manager) agentExited(id sandbox.ID, reason string) {
	if m.down.Load() {
		return // a restarted daemon reconciles it (see recover)
	}
	m.mu.Lock()
	e, ok := m.entries[id]
	if !ok || e.creating || e.destroying || e.rec.State == sandbox.StateStopped {
		m.mu.Unlock()
		return
	}
	pooled := e.rec.Pool != ""
	m.mu.Unlock()
	m.log.Warn("sandbox agent exited", "sandbox", id, "reason", reason)
	if pooled {
		m.expire(id, "agent exited")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if info, err := m.backend.Inspect(ctx, id); err == nil && info.State == sandbox.StateRunning {
		return // started again meanwhile
	}
	rec, err := m.setStateLogged(ctx, e, sandbox.StateStopped, "error", "agent exited unexpectedly; the sandbox is stopped",
		map[string]any{"reason": reason})
	if err != nil {
		m.log.Error("record agent exit", "sandbox", id, "err", err)
		rec = m.snapshot(e)
	}
	cause, exit := m.agentExit(ctx, id, reason)
	m.emit(rec, events.Stopped, cause, exit, nil)
}

func (m *Manager) setState(ctx context.Context, e *entry, st sandbox.State, event string) (*store.Record, error) {
	return m.setStateLogged(ctx, e, st, "info", event, nil)
}

func (m *Manager) setStateLogged(ctx context.Context, e *entry, st sandbox.State, level, event string, fields map[string]any) (*store.Record, error) {
	m.mu.Lock()
	if e.client != nil {
		// The agent behind it is gone (stop) or new (start).
		e.client.Close()
		e.client = nil
	}
	rec := e.rec.Clone()
	rec.State = st
	e.rec = rec
	e.logs.add(level, event, fields)
	m.mu.Unlock()
	if err := m.store.Put(ctx, rec); err != nil {
		return nil, err
	}
	return rec.Clone(), nil
}
