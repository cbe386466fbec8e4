package backendtest

import (
	"context"
	"io"
	"net"
	"slices"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// AtIsolation returns b creating every sandbox at isolation level (a spec
// naming none gets it), with the capabilities b has at that level: for
// gVisor, b's Capabilities minus what Capabilities.GVisor says does not
// hold. The conformance suite and RunSecurity run on it unchanged, and
// skip what the level does not claim, saying so. Optional interfaces of b
// are forwarded; b's refusals at the level stay b's own.
func AtIsolation(b backend.Backend, level sandbox.Isolation) backend.Backend {
	return &isolated{Backend: b, level: level}
}

// Unwrap returns the backend AtIsolation wrapped (b itself otherwise).
func Unwrap(b backend.Backend) backend.Backend {
	if i, ok := b.(*isolated); ok {
		return i.Backend
	}
	return b
}

type isolated struct {
	backend.Backend
	level sandbox.Isolation
}

func (i *isolated) Name() string { return i.Backend.Name() + "@" + string(i.level) }

func (i *isolated) Capabilities() backend.Capabilities {
	c := i.Backend.Capabilities()
	if i.level != sandbox.IsolationGVisor || c.GVisor == nil {
		return c
	}
	g := c.GVisor
	c.Pause = c.Pause && !g.NoPause
	c.Snapshot = c.Snapshot && !g.NoSnapshot
	c.Recycle = c.Recycle && !g.NoRecycle
	c.RootOnRequest = c.RootOnRequest && !g.NoRootOnRequest
	c.RootInUserNS = c.RootInUserNS && !g.NoRoot
	c.LimitsStopSandbox = c.LimitsStopSandbox || g.LimitsStopSandbox
	if g.Templates != nil {
		var kinds []string
		for _, k := range c.Templates {
			if slices.Contains(g.Templates, k) {
				kinds = append(kinds, k)
			}
		}
		c.Templates = kinds
	}
	return c
}

func (i *isolated) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if spec.Isolation == "" {
		spec.Isolation = i.level
	}
	return i.Backend.Create(ctx, spec)
}

func unavailable(what string) error {
	return sandbox.Errorf(sandbox.ClassUnavailable, "the backend under test has no %s", what)
}

func (i *isolated) Pause(ctx context.Context, id sandbox.ID) error {
	if p, ok := i.Backend.(backend.Pauser); ok {
		return p.Pause(ctx, id)
	}
	return unavailable("pause")
}

func (i *isolated) Resume(ctx context.Context, id sandbox.ID) error {
	if p, ok := i.Backend.(backend.Pauser); ok {
		return p.Resume(ctx, id)
	}
	return unavailable("pause")
}

func (i *isolated) SnapshotDiff(ctx context.Context, id sandbox.ID, w io.Writer) error {
	if s, ok := i.Backend.(backend.Snapshotter); ok {
		return s.SnapshotDiff(ctx, id, w)
	}
	return unavailable("snapshots")
}

func (i *isolated) Recycle(ctx context.Context, id sandbox.ID, req backend.RecycleRequest) error {
	if r, ok := i.Backend.(backend.Recycler); ok {
		return r.Recycle(ctx, id, req)
	}
	return unavailable("recycle")
}

func (i *isolated) Stats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	if s, ok := i.Backend.(backend.StatsReader); ok {
		return s.Stats(ctx, id)
	}
	return backend.Stats{}, unavailable("stats")
}

func (i *isolated) LimitCounters(ctx context.Context, id sandbox.ID) (int64, int64, error) {
	if l, ok := i.Backend.(backend.LimitCounter); ok {
		return l.LimitCounters(ctx, id)
	}
	return 0, 0, unavailable("limit counters")
}

func (i *isolated) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	if d, ok := i.Backend.(backend.PortDialer); ok {
		return d.DialPort(ctx, id, port)
	}
	return nil, unavailable("port dialing")
}
