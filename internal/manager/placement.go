package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Placement between this host and a remote provider (docs/providers.md).
// A template of a remote kind (e2b:NAME) runs at its provider and takes
// none of this host's room: NODE_MAX_SANDBOXES and NODE_MAX_MEMORY count
// the local sandboxes only, and PROVIDER_MAX_PER_USER caps each owner's
// remote ones. A template with an overflow route (Config.Overflow) runs
// here while the host has room, and at the provider when it is full.

// providerOf is the provider sandboxes of template kind kind run at, ""
// for this host.
func (m *Manager) providerOf(kind string) string {
	return backend.CapabilitiesFor(m.backend, kind).Provider
}

// errNodeFull is wrapped by the refusals of admitLocal: the host is full,
// so an overflow route may send the create to the provider.
var errNodeFull = errors.New("this host is full")

// admitLocal holds room on this host for a sandbox of memory bytes: a
// NODE_MAX_SANDBOXES slot (admitNode) and NODE_MAX_MEMORY.
func (m *Manager) admitLocal(memory int64) (func(), error) {
	release, err := m.admitNode()
	if err != nil {
		return nil, &sandbox.Error{Class: sandbox.ClassQuota, Msg: err.Error(), Err: errNodeFull}
	}
	if m.cfg.NodeMaxMemory <= 0 {
		return release, nil
	}
	m.mu.Lock()
	var used int64
	for _, e := range m.entries {
		if e.rec.Provider == "" && e.rec.Pool == "" && !e.creating {
			used += e.rec.Resources.MemoryBytes
		}
	}
	used += m.creatingMemory
	if used+memory > m.cfg.NodeMaxMemory {
		m.mu.Unlock()
		release()
		return nil, &sandbox.Error{Class: sandbox.ClassQuota, Err: errNodeFull,
			Msg: fmt.Sprintf("this replica's sandboxes hold %d MiB of memory of its NODE_MAX_MEMORY %d MiB; this one needs %d MiB", used>>20, m.cfg.NodeMaxMemory>>20, memory>>20)}
	}
	m.creatingMemory += memory
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		m.creatingMemory -= memory
		m.mu.Unlock()
		release()
	}, nil
}

// admitRemote holds one of owner's PROVIDER_MAX_PER_USER remote slots.
func (m *Manager) admitRemote(owner, provider string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if max := m.cfg.RemoteMaxPerUser; max > 0 && owner != "" {
		n := m.remoteCreates[owner]
		for _, e := range m.entries {
			if e.rec.Provider != "" && e.rec.Owner == owner && !e.creating {
				n++
			}
		}
		if n >= max {
			return nil, sandbox.Errorf(sandbox.ClassQuota, "you have %d sandboxes at remote providers, the maximum per user (PROVIDER_MAX_PER_USER)", n)
		}
	}
	if m.remoteCreates == nil {
		m.remoteCreates = map[string]int{}
	}
	m.remoteCreates[owner]++
	return func() {
		m.mu.Lock()
		if m.remoteCreates[owner]--; m.remoteCreates[owner] <= 0 {
			delete(m.remoteCreates, owner)
		}
		m.mu.Unlock()
	}, nil
}

// place admits a create of template t (named name by the caller) here or
// at a provider: it returns the template to create (t, or t's overflow
// route's when the host is full) and the release of what it holds.
func (m *Manager) place(ctx context.Context, owner, name string, t sandbox.Template, req CreateRequest) (sandbox.Template, func(), error) {
	if p := m.providerOf(t.Kind); p != "" {
		release, err := m.admitRemote(owner, p)
		return t, release, err
	}
	memory := req.Resources.WithDefaults(templateDefaults(t, m.cfg.DefaultResources, m.cfg.MaxResources)).MemoryBytes
	release, err := m.admitLocal(memory)
	if err == nil {
		return t, release, nil
	}
	route, ok := m.cfg.Overflow[name]
	if !ok || !errors.Is(err, errNodeFull) {
		return t, nil, err
	}
	rt, rerr := m.cfg.Resolver.Resolve(ctx, route)
	if rerr != nil {
		return t, nil, fmt.Errorf("%w; its overflow route %q does not resolve: %v", err, route, rerr)
	}
	p := m.providerOf(rt.Kind)
	if p == "" {
		return t, nil, fmt.Errorf("%w; its overflow route %q is not a remote template", err, route)
	}
	if rt.Ref == "" {
		rt.Ref = route
	}
	release, aerr := m.admitRemote(owner, p)
	if aerr != nil {
		return t, nil, aerr
	}
	m.log.Info("local host full: creating at the provider", "template", name, "route", route, "provider", p)
	return rt, release, nil
}

// RemoteCount is the number of sandboxes this daemon holds at provider,
// for the agentbox_sandboxes_remote gauge.
func (m *Manager) RemoteCount(provider string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.entries {
		if !e.creating && e.rec.Provider == provider {
			n++
		}
	}
	return n
}
