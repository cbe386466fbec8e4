package multi

import (
	"context"
	"errors"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ backend.WarmPooler = (*Backend)(nil)

// pooler returns the backend of template kind kind as a WarmPooler.
func (m *Backend) pooler(kind string) (backend.WarmPooler, bool) {
	p, ok := m.For(kind).(backend.WarmPooler)
	return p, ok
}

// poolers are the backends that keep warm pools.
func (m *Backend) poolers() []backend.WarmPooler {
	var out []backend.WarmPooler
	for _, b := range m.all {
		if p, ok := b.(backend.WarmPooler); ok {
			out = append(out, p)
		}
	}
	return out
}

// PoolName implements backend.WarmPooler: the pool of the backend that
// runs t's kind.
func (m *Backend) PoolName(t sandbox.Template) (string, bool) {
	p, ok := m.pooler(t.Kind)
	if !ok {
		return "", false
	}
	return p.PoolName(t)
}

// EnsurePool implements backend.WarmPooler, on the backend of
// spec.Template's kind.
func (m *Backend) EnsurePool(ctx context.Context, name string, spec sandbox.Spec, replicas int32) error {
	p, ok := m.pooler(spec.Template.Kind)
	if !ok {
		return unavailable(m.For(spec.Template.Kind), "keep warm pools")
	}
	return p.EnsurePool(ctx, name, spec, replicas)
}

// CreateFromPool implements backend.WarmPooler, on the backend of
// spec.Template's kind, which then owns the sandbox.
func (m *Backend) CreateFromPool(ctx context.Context, name string, spec sandbox.Spec) (sandbox.Info, error) {
	b := m.For(spec.Template.Kind)
	p, ok := b.(backend.WarmPooler)
	if !ok {
		return sandbox.Info{}, unavailable(b, "keep warm pools")
	}
	m.mu.Lock()
	if _, ok := m.owner[spec.ID]; ok {
		m.mu.Unlock()
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	m.mu.Unlock()
	info, err := p.CreateFromPool(ctx, name, spec)
	if err != nil {
		return info, err
	}
	m.mu.Lock()
	m.owner[spec.ID] = b
	m.mu.Unlock()
	return info, nil
}

// PoolReady implements backend.WarmPooler: the level of the first backend
// that knows pool name.
func (m *Backend) PoolReady(ctx context.Context, name string) (int, error) {
	err := sandbox.Errorf(sandbox.ClassNotFound, "no warm pool %q", name)
	for _, p := range m.poolers() {
		n, perr := p.PoolReady(ctx, name)
		if perr == nil || sandbox.ClassOf(perr) != sandbox.ClassNotFound {
			return n, perr
		}
	}
	return 0, err
}

// DeletePool implements backend.WarmPooler on every backend that pools.
func (m *Backend) DeletePool(ctx context.Context, name string) error {
	var errs []error
	for _, p := range m.poolers() {
		errs = append(errs, p.DeletePool(ctx, name))
	}
	return errors.Join(errs...)
}

// Pools implements backend.WarmPooler: every pooling backend's pools.
func (m *Backend) Pools(ctx context.Context) ([]string, error) {
	var out []string
	var errs []error
	for _, p := range m.poolers() {
		names, err := p.Pools(ctx)
		out = append(out, names...)
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}
