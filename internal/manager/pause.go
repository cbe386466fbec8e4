package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Pause freezes every process of one of owner's sandboxes (the backend's
// cgroup freezer) and stops its clock: the running time it had left is
// kept in the record (Remaining) and given back by Resume. While paused
// the sandbox ends only when it stayed paused for the server's PausedTTL
// (its EndAt says when), and exec, files, code and preview ports are a
// conflict until it is resumed. Pausing a paused sandbox returns it as it
// is; a stopped one is a conflict.
func (m *Manager) Pause(ctx context.Context, owner string, id sandbox.ID) (*store.Record, error) {
	if _, err := m.entryFor(owner, id); err != nil {
		return nil, err
	}
	return m.pause(ctx, id, "paused", api(owner))
}

// pause pauses a sandbox whoever owns it (the API and the auto-pause timer).
func (m *Manager) pause(ctx context.Context, id sandbox.ID, event string, cause events.Cause) (*store.Record, error) {
	pz, ok := m.backend.(backend.Pauser)
	if !ok || !m.backend.Capabilities().Pause {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend cannot pause sandboxes", m.backend.Name())
	}
	unlock := m.lockPause(id)
	defer unlock()
	e, err := m.liveEntry(id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	st := e.rec.State
	m.mu.Unlock()
	switch st {
	case sandbox.StatePaused:
		return m.snapshot(e), nil
	case sandbox.StateStopped:
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped; only a running sandbox can be paused", id)
	}
	if err := pz.Pause(ctx, id); err != nil {
		return nil, fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	now := time.Now().UTC()
	m.mu.Lock()
	if m.entries[id] != e || e.destroying {
		// Deleted meanwhile (the backend killed it frozen or not): no
		// record may outlive it.
		m.mu.Unlock()
		return nil, sandbox.ErrNotFound(id)
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	rec := e.rec.Clone()
	rec.State = sandbox.StatePaused
	rec.PausedAt = now
	rec.Remaining = max(rec.EndAt.Sub(now), 0)
	rec.EndAt = time.Time{}
	if m.cfg.PausedTTL > 0 {
		rec.EndAt = now.Add(m.cfg.PausedTTL)
	}
	e.rec = rec
	m.armTimerLocked(id, e)
	e.logs.add("info", event, map[string]any{"remaining_seconds": rec.Remaining.Seconds()})
	m.mu.Unlock()
	if err := m.store.Put(context.WithoutCancel(ctx), rec); err != nil {
		// The sandbox is paused and the manager knows it; a restart would
		// find the backend paused and the record running, and thaw it.
		m.log.Error("record paused sandbox", "sandbox", id, "err", err)
	}
	m.log.Info("sandbox paused", "sandbox", id, "reason", event)
	m.emit(rec, events.Paused, cause, nil, nil)
	return rec.Clone(), nil
}

// Resume thaws one of owner's paused sandboxes: every process continues
// where it stopped. timeout > 0 gives it that long to run from now; 0
// gives back the running time it had left when it was paused (the default
// timeout when nothing was left, as after an auto-pause). Resuming a
// running sandbox is not an error (a positive timeout then sets its end
// time); a stopped one is a conflict.
func (m *Manager) Resume(ctx context.Context, owner string, id sandbox.ID, timeout time.Duration) (*store.Record, error) {
	if timeout < 0 {
		return nil, invalid("timeout", "timeout must be positive")
	}
	if timeout > m.cfg.MaxTimeout {
		return nil, invalid("timeout", "timeout %s is over the server's maximum %s", timeout, m.cfg.MaxTimeout)
	}
	if _, err := m.entryFor(owner, id); err != nil {
		return nil, err
	}
	unlock := m.lockPause(id)
	defer unlock()
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	st := e.rec.State
	m.mu.Unlock()
	switch st {
	case sandbox.StateStopped:
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped; start it instead", id)
	case sandbox.StateRunning:
		if timeout > 0 {
			return m.SetTimeout(ctx, owner, id, timeout)
		}
		return m.snapshot(e), nil
	}
	pz, ok := m.backend.(backend.Pauser)
	if !ok {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend cannot resume sandboxes", m.backend.Name())
	}
	if err := pz.Resume(ctx, id); err != nil {
		return nil, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	now := time.Now().UTC()
	m.mu.Lock()
	if m.entries[id] != e || e.destroying {
		m.mu.Unlock()
		return nil, sandbox.ErrNotFound(id)
	}
	rec := e.rec.Clone()
	run := timeout
	if run == 0 {
		run = rec.Remaining
	}
	if run <= 0 {
		run = m.cfg.DefaultTimeout
	}
	rec.State = sandbox.StateRunning
	rec.EndAt = now.Add(run)
	rec.PausedAt, rec.Remaining = time.Time{}, 0
	rec.LastActive = now
	e.rec, e.lastActive = rec, time.Now()
	m.armTimerLocked(id, e)
	e.logs.add("info", "resumed", map[string]any{"end_at": rec.EndAt})
	m.mu.Unlock()
	if err := m.store.Put(context.WithoutCancel(ctx), rec); err != nil {
		m.log.Error("record resumed sandbox", "sandbox", id, "err", err)
	}
	m.log.Info("sandbox resumed", "sandbox", id)
	m.emit(rec, events.Resumed, api(owner), nil, nil)
	return rec.Clone(), nil
}

// liveEntry returns the entry of a sandbox handed out to a user, whoever
// it is (pooled sandboxes and placeholders are not found).
func (m *Manager) liveEntry(id sandbox.ID) (*entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok || e.creating || e.destroying || e.rec.Pool != "" {
		return nil, sandbox.ErrNotFound(id)
	}
	return e, nil
}

func (m *Manager) snapshot(e *entry) *store.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.rec.Clone()
}

// ErrPaused is what the data plane (exec, files, code, ports) answers for
// a paused sandbox: E2B too refuses those until the sandbox is resumed
// (its SDKs resume through connect).
func ErrPaused(id sandbox.ID) error {
	return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is paused; resume it first", id)
}

// timeUp is called when a sandbox reaches its end time: a running sandbox
// created with AutoPause is paused, everything else is destroyed (a
// paused one because it stayed paused for the paused TTL).
func (m *Manager) timeUp(id sandbox.ID) {
	m.mu.Lock()
	e, ok := m.entries[id]
	autoPause := ok && e.rec.AutoPause && e.rec.State == sandbox.StateRunning && e.rec.Pool == ""
	paused := ok && e.rec.State == sandbox.StatePaused
	m.mu.Unlock()
	if autoPause {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := m.pause(ctx, id, "paused at timeout (auto-pause)", events.Cause{Kind: events.CauseTimeout, Detail: "auto-pause"}); err == nil {
			return
		} else {
			m.log.Error("auto-pause sandbox; destroying it", "sandbox", id, "err", err)
		}
	}
	if !m.claimExpiry(id) {
		return // extended meanwhile (the shared record says so)
	}
	reason := "timeout"
	if paused {
		reason = "paused ttl"
	}
	m.expire(id, reason)
}
