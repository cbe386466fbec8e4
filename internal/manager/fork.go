package manager

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// MaxForks caps the sandboxes one fork request makes.
const MaxForks = 20

// Fork makes count new sandboxes of owner's from a live copy of running
// sandbox id (backend.Forker): each starts with the source's disk as it
// was at one moment, and its template, env, metadata, resources, network
// policy and volume mounts; timeout 0 gives each DEFAULT_TIMEOUT. The
// source keeps running. Each fork is a create, counted against the same
// limits; when one fails, the forks made so far are deleted.
func (m *Manager) Fork(ctx context.Context, owner string, id sandbox.ID, count int, timeout time.Duration) ([]*store.Record, error) {
	if count < 1 || count > MaxForks {
		return nil, invalid("count", "count must be between 1 and %d", MaxForks)
	}
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	if _, ok := m.backend.(backend.Forker); !ok {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend cannot fork sandboxes", m.backend.Name())
	}
	info, err := m.backend.Inspect(ctx, id)
	if err != nil {
		return nil, err
	}
	if info.State != sandbox.StateRunning {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s; only a running sandbox can be forked", id, info.State)
	}
	m.mu.Lock()
	src := e.rec.Clone()
	m.mu.Unlock()
	req := CreateRequest{
		Timeout: timeout, Env: maps.Clone(src.Env), Metadata: maps.Clone(src.Metadata),
		Resources: src.Resources, Network: src.Network, Volumes: src.Volumes,
		// A fork runs at its source's level: never below it.
		Isolation: src.Isolation,
		NoPool:    true, forkOf: id,
	}
	if err := m.validate(&req); err != nil {
		return nil, err
	}
	var out []*store.Record
	for i := 0; i < count; i++ {
		rec, err := m.forkOne(ctx, owner, info.Spec.Template, src.Type, req)
		if err != nil {
			// All or nothing: the forks made so far go.
			for _, r := range out {
				_ = m.destroy(context.WithoutCancel(ctx), r.ID, "deleted")
			}
			if len(out) > 0 {
				err = fmt.Errorf("fork %d of %d failed, the %d made were deleted: %w", len(out)+1, count, len(out), err)
			}
			return nil, err
		}
		out = append(out, rec)
	}
	m.log.Info("sandbox forked", "sandbox", id, "forks", count)
	forks := make([]string, len(out))
	for i, r := range out {
		forks[i] = string(r.ID)
	}
	m.emit(src, events.Forked, api(owner), nil, map[string]any{"forks": forks})
	return out, nil
}

func (m *Manager) forkOne(ctx context.Context, owner string, t sandbox.Template, typ string, req CreateRequest) (*store.Record, error) {
	start := time.Now()
	if err := m.stateReady(ctx); err != nil {
		return nil, err
	}
	release, err := m.admitNode()
	if err != nil {
		return nil, err
	}
	defer release()
	rec, err := m.createCold(ctx, owner, t, typ, req, "")
	if err != nil {
		m.metrics.createFailed()
		return nil, err
	}
	m.metrics.created("fork", time.Since(start))
	m.emit(rec, events.Created, api(owner), nil, map[string]any{"fork_of": string(req.forkOf)})
	return rec, nil
}
