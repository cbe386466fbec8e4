package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// MaxForks caps the sandboxes one fork request makes.
const MaxForks = 20

// forkParallel is how many forks of one request are made at once: each is
// mostly waiting (the disk copy, the boot), and the copies themselves take
// turns on the source (its disk is frozen for one copy at a time).
const forkParallel = 4

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
	// The forks are made forkParallel at a time; the first failure stops
	// the ones not started and cancels those under way.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recs := make([]*store.Record, count)
	errs := make([]error, count)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if fctx.Err() != nil {
				errs[i] = fctx.Err()
				return
			}
			recs[i], errs[i] = m.forkOne(fctx, owner, info.Spec.Template, src.Type, req)
			if errs[i] != nil {
				cancel()
			}
		}(i)
	}
	wg.Wait()
	var out []*store.Record
	var firstErr error
	failed := 0
	for i := range recs {
		switch {
		case errs[i] == nil:
			out = append(out, recs[i])
		case firstErr == nil || (errors.Is(firstErr, context.Canceled) && !errors.Is(errs[i], context.Canceled)):
			// The cause, not a fork canceled because of it.
			firstErr = errs[i]
			failed++
		default:
			failed++
		}
	}
	if firstErr != nil {
		// All or nothing: the forks made go.
		for _, r := range out {
			_ = m.destroy(context.WithoutCancel(ctx), r.ID, "deleted")
		}
		if len(out) > 0 {
			firstErr = fmt.Errorf("%d of %d forks failed, the %d made were deleted: %w", failed, count, len(out), firstErr)
		}
		return nil, firstErr
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
