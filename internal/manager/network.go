package manager

import (
	"context"
	"net"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// validateNetwork fills in the default mode and checks n.
func (m *Manager) validateNetwork(n *sandbox.Network) error {
	if n.Mode == "" {
		n.Mode = m.cfg.DefaultNetworkMode
	}
	switch n.Mode {
	case sandbox.NetworkNone, sandbox.NetworkEgress:
	default:
		return invalid("network.mode", "network mode must be none or egress")
	}
	if m.cfg.ValidateNetwork != nil {
		if err := m.cfg.ValidateNetwork(*n); err != nil {
			return &sandbox.Error{Class: sandbox.ClassInvalid, Msg: err.Error(), Err: fieldErr("network")}
		}
	}
	return nil
}

// checkEgress refuses egress for a sandbox of template kind kind when the
// backend that runs that kind cannot give it (a native backend without
// host networking, Docker), while another kind may have it (an in-cluster
// daemon's kube sandboxes, whose NetworkPolicy the cluster enforces).
func (m *Manager) checkEgress(kind string, n sandbox.Network) error {
	if n.Mode == sandbox.NetworkEgress && !m.EgressAvailable(kind) {
		if m.NetworkAvailable() {
			return invalid("network.mode", "egress networking is not available for %s sandboxes on this server", kindName(kind))
		}
		return invalid("network.mode", "egress networking is not available on this server")
	}
	return nil
}

// kindName names a template kind for a message ("" is the default one's).
func kindName(kind string) string {
	if kind == "" {
		return "this template's"
	}
	return kind
}

// EgressAvailable says whether sandboxes of template kind kind can have
// egress networking.
func (m *Manager) EgressAvailable(kind string) bool {
	return backend.CapabilitiesFor(m.backend, kind).Egress
}

// NetworkAvailable says whether any sandbox here can have egress
// networking (some template kinds may still be refused it: EgressAvailable).
func (m *Manager) NetworkAvailable() bool { return m.backend.Capabilities().Egress }

// checkRules refuses egress rules the server cannot serve or that use
// secrets owner does not have.
func (m *Manager) checkRules(ctx context.Context, owner string, n sandbox.Network) error {
	if len(n.Rules) == 0 {
		return nil
	}
	if m.cfg.CheckRules == nil {
		return invalid("network.rules", "egress rules need the egress broker, which is off on this server")
	}
	return m.cfg.CheckRules(ctx, owner, n)
}

// UpdateNetwork replaces the egress policy of one of owner's running
// sandboxes. The mode cannot change (conflict).
func (m *Manager) UpdateNetwork(ctx context.Context, owner string, id sandbox.ID, n sandbox.Network) (*store.Record, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	if err := m.validateNetwork(&n); err != nil {
		return nil, err
	}
	// The mode cannot change (the backend refuses it), so egress here is
	// for a sandbox that has it; on a server where no sandbox can, say so.
	if n.Mode == sandbox.NetworkEgress && !m.NetworkAvailable() {
		return nil, invalid("network.mode", "egress networking is not available on this server")
	}
	if err := m.checkRules(ctx, owner, n); err != nil {
		return nil, err
	}
	nu, ok := m.backend.(backend.NetworkUpdater)
	if !ok {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend cannot change network policies", m.backend.Name())
	}
	if err := nu.UpdateNetwork(ctx, id, n); err != nil {
		return nil, err
	}
	m.mu.Lock()
	rec := e.rec.Clone()
	rec.Network = n
	e.rec = rec
	e.logs.add("info", "network policy changed", map[string]any{"allow_out": n.AllowOut, "deny_out": n.DenyOut, "rules": len(n.Rules)})
	m.mu.Unlock()
	if err := m.store.Put(ctx, rec); err != nil {
		return nil, err
	}
	return rec.Clone(), nil
}

// Lookup returns a sandbox's record whoever owns it, for front-ends that
// authenticate with the sandbox's own access token rather than an API key.
// Pooled and half-created sandboxes are not found.
func (m *Manager) Lookup(id sandbox.ID) (*store.Record, error) {
	if id.Validate() != nil {
		return nil, sandbox.ErrNotFound(id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok || e.creating || e.destroying || e.rec.Pool != "" {
		return nil, sandbox.ErrNotFound(id)
	}
	return e.rec.Clone(), nil
}

// DialPort connects to a port a process listens on inside the sandbox. The
// caller must have authorised the request.
func (m *Manager) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	rec, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	if rec.State == sandbox.StatePaused {
		// A frozen server would accept and never answer.
		return nil, ErrPaused(id)
	}
	pd, ok := m.backend.(backend.PortDialer)
	if !ok {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend cannot reach sandbox ports", m.backend.Name())
	}
	m.Touch(id)
	return pd.DialPort(ctx, id, port)
}

// FindByToken returns the first of this daemon's running sandboxes for
// which match accepts its ID and access token: for a credential that names
// no sandbox but is derived from one's token (E2B's signed file URLs).
// match runs outside the manager's lock, over a copy of the pairs.
func (m *Manager) FindByToken(match func(id sandbox.ID, token string) bool) (sandbox.ID, bool) {
	type pair struct {
		id    sandbox.ID
		token string
	}
	m.mu.Lock()
	pairs := make([]pair, 0, len(m.entries))
	for id, e := range m.entries {
		if !e.creating && !e.destroying && e.rec.Pool == "" && e.rec.State == sandbox.StateRunning && e.rec.AccessToken != "" {
			pairs = append(pairs, pair{id, e.rec.AccessToken})
		}
	}
	m.mu.Unlock()
	for _, p := range pairs {
		if match(p.id, p.token) {
			return p.id, true
		}
	}
	return "", false
}
