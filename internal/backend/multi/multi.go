// Package multi runs several backends side by side behind the one
// backend.Backend the manager holds: a sandbox goes to the backend whose
// Capabilities list its template's kind (docker: templates to the Docker
// backend), everything else to the primary one, and every later call about
// a sandbox goes to the backend that created (or recovered) it.
package multi

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Backend dispatches to its backends. Create it with New.
type Backend struct {
	all []backend.Backend // primary first

	mu    sync.Mutex
	owner map[sandbox.ID]backend.Backend
}

var (
	_ backend.Backend        = (*Backend)(nil)
	_ backend.Pauser         = (*Backend)(nil)
	_ backend.StatsReader    = (*Backend)(nil)
	_ backend.LimitCounter   = (*Backend)(nil)
	_ backend.PortDialer     = (*Backend)(nil)
	_ backend.ExitWatcher    = (*Backend)(nil)
	_ backend.NetworkUpdater = (*Backend)(nil)
	_ backend.Snapshotter    = (*Backend)(nil)
	_ backend.Closer         = (*Backend)(nil)
	_ backend.Recycler       = (*Backend)(nil)

	_ backend.KindCapabilities = (*Backend)(nil)
)

// New returns a backend running primary's templates on primary and each
// other backend's template kinds on it.
func New(primary backend.Backend, others ...backend.Backend) *Backend {
	return &Backend{all: append([]backend.Backend{primary}, others...), owner: map[sandbox.ID]backend.Backend{}}
}

// Backends returns the backends, primary first.
func (m *Backend) Backends() []backend.Backend { return slices.Clone(m.all) }

// For returns the backend that runs sandboxes of template kind kind.
func (m *Backend) For(kind string) backend.Backend {
	for _, b := range m.all[1:] {
		if slices.Contains(b.Capabilities().Templates, kind) {
			return b
		}
	}
	return m.all[0]
}

// Name names every backend, primary first ("native+docker").
func (m *Backend) Name() string {
	names := make([]string, len(m.all))
	for i, b := range m.all {
		names[i] = b.Name()
	}
	return strings.Join(names, "+")
}

// Capabilities are the primary's, with every backend's template kinds;
// Pause, Snapshot, Recycle and Egress when any backend has them (a sandbox
// of one that cannot is refused by Pause, SnapshotDiff or Recycle, or at
// create for egress: see CapabilitiesFor).
func (m *Backend) Capabilities() backend.Capabilities {
	c := m.all[0].Capabilities()
	c.Templates = slices.Clone(c.Templates)
	for _, b := range m.all[1:] {
		bc := b.Capabilities()
		c.Pause = c.Pause || bc.Pause
		c.Snapshot = c.Snapshot || bc.Snapshot
		c.Recycle = c.Recycle || bc.Recycle
		c.Egress = c.Egress || bc.Egress
		for _, k := range bc.Templates {
			if !slices.Contains(c.Templates, k) {
				c.Templates = append(c.Templates, k)
			}
		}
	}
	return c
}

// CapabilitiesFor implements backend.KindCapabilities: the capabilities
// of the backend that runs template kind kind.
func (m *Backend) CapabilitiesFor(kind string) backend.Capabilities {
	return backend.CapabilitiesFor(m.For(kind), kind)
}

// Of returns the backend that owns sandbox id.
func (m *Backend) Of(id sandbox.ID) (backend.Backend, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.owner[id]
	if !ok {
		return nil, sandbox.Errorf(sandbox.ClassNotFound, "sandbox %s not found", id)
	}
	return b, nil
}

// Create implements backend.Backend.
func (m *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	b := m.For(spec.Template.Kind)
	m.mu.Lock()
	if _, ok := m.owner[spec.ID]; ok {
		m.mu.Unlock()
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	m.mu.Unlock()
	info, err := b.Create(ctx, spec)
	if err != nil {
		return info, err
	}
	m.mu.Lock()
	m.owner[spec.ID] = b
	m.mu.Unlock()
	return info, nil
}

// Stop implements backend.Backend.
func (m *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	b, err := m.Of(id)
	if err != nil {
		return err
	}
	return b.Stop(ctx, id)
}

// Start implements backend.Backend.
func (m *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	b, err := m.Of(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.Start(ctx, id)
}

// Destroy implements backend.Backend. An unknown id is destroyed on every
// backend (each is idempotent), so a retry after a crash cleans up.
func (m *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	b, err := m.Of(id)
	if err != nil {
		var errs []error
		for _, b := range m.all {
			errs = append(errs, b.Destroy(ctx, id))
		}
		return errors.Join(errs...)
	}
	if err := b.Destroy(ctx, id); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.owner, id)
	m.mu.Unlock()
	return nil
}

// Inspect implements backend.Backend.
func (m *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	b, err := m.Of(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.Inspect(ctx, id)
}

// Recover implements backend.Backend: every backend recovers its own.
func (m *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) {
	var out []sandbox.Info
	var errs []error
	for _, b := range m.all {
		infos, err := b.Recover(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		m.mu.Lock()
		for _, in := range infos {
			m.owner[in.ID] = b
		}
		m.mu.Unlock()
		out = append(out, infos...)
	}
	return out, errors.Join(errs...)
}

func unavailable(b backend.Backend, what string) error {
	return sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend cannot %s", b.Name(), what)
}

// capable returns the backend of sandbox id as the optional interface T,
// or an unavailable error saying it cannot do what.
func capable[T any](m *Backend, id sandbox.ID, what string) (T, error) {
	var zero T
	b, err := m.Of(id)
	if err != nil {
		return zero, err
	}
	t, ok := b.(T)
	if !ok {
		return zero, unavailable(b, what)
	}
	return t, nil
}

// Pause implements backend.Pauser.
func (m *Backend) Pause(ctx context.Context, id sandbox.ID) error {
	p, err := capable[backend.Pauser](m, id, "pause sandboxes")
	if err != nil {
		return err
	}
	return p.Pause(ctx, id)
}

// Resume implements backend.Pauser.
func (m *Backend) Resume(ctx context.Context, id sandbox.ID) error {
	p, err := capable[backend.Pauser](m, id, "pause sandboxes")
	if err != nil {
		return err
	}
	return p.Resume(ctx, id)
}

// Stats implements backend.StatsReader.
func (m *Backend) Stats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	s, err := capable[backend.StatsReader](m, id, "report stats")
	if err != nil {
		return backend.Stats{}, err
	}
	return s.Stats(ctx, id)
}

// LimitCounters implements backend.LimitCounter (through Stats where the
// owner has no cheaper way).
func (m *Backend) LimitCounters(ctx context.Context, id sandbox.ID) (int64, int64, error) {
	b, err := m.Of(id)
	if err != nil {
		return 0, 0, err
	}
	if lc, ok := b.(backend.LimitCounter); ok {
		return lc.LimitCounters(ctx, id)
	}
	if s, ok := b.(backend.StatsReader); ok {
		st, err := s.Stats(ctx, id)
		return st.OOMKills, st.PidsLimitHits, err
	}
	return 0, 0, unavailable(b, "report stats")
}

// DialPort implements backend.PortDialer.
func (m *Backend) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	d, err := capable[backend.PortDialer](m, id, "reach sandbox ports")
	if err != nil {
		return nil, err
	}
	return d.DialPort(ctx, id, port)
}

// UpdateNetwork implements backend.NetworkUpdater.
func (m *Backend) UpdateNetwork(ctx context.Context, id sandbox.ID, n sandbox.Network) error {
	u, err := capable[backend.NetworkUpdater](m, id, "change network policies")
	if err != nil {
		return err
	}
	return u.UpdateNetwork(ctx, id, n)
}

// SnapshotDiff implements backend.Snapshotter.
func (m *Backend) SnapshotDiff(ctx context.Context, id sandbox.ID, w io.Writer) error {
	s, err := capable[backend.Snapshotter](m, id, "snapshot sandboxes")
	if err != nil {
		return err
	}
	return s.SnapshotDiff(ctx, id, w)
}

// OnAgentExit implements backend.ExitWatcher on every backend that has it.
func (m *Backend) OnAgentExit(fn func(id sandbox.ID, reason string)) {
	for _, b := range m.all {
		if w, ok := b.(backend.ExitWatcher); ok {
			w.OnAgentExit(fn)
		}
	}
}

// Close closes every backend that holds host resources.
func (m *Backend) Close() error {
	var errs []error
	for _, b := range m.all {
		if c, ok := b.(backend.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Recycle implements backend.Recycler for the sandboxes of a backend that
// can reset them in place; the others are destroyed by the manager instead.
func (m *Backend) Recycle(ctx context.Context, id sandbox.ID, req backend.RecycleRequest) error {
	r, err := capable[backend.Recycler](m, id, "recycle sandboxes")
	if err != nil {
		return err
	}
	return r.Recycle(ctx, id, req)
}
