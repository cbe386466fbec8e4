package manager

import (
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// isolationFor resolves the isolation level of a create: what the request
// asks for, else what the template (or sandbox type) is set to, else the
// server's default; never weaker than the owner's minimum
// (ISOLATION_BY_USER). A request for a weaker level than the owner's
// minimum is refused rather than raised: the caller asked for something
// the operator does not allow, and must not believe it got it.
func (m *Manager) isolationFor(owner, ref, typ string, asked sandbox.Isolation) (sandbox.Isolation, error) {
	floor := m.cfg.IsolationByUser[owner]
	if asked != "" {
		if floor.Stronger(asked) {
			return "", &sandbox.Error{Class: sandbox.ClassForbidden, Err: fieldErr("isolation"),
				Msg: "isolation " + string(asked) + " refused: this server runs your sandboxes at isolation " + string(floor) + " at least"}
		}
		return asked, m.isolationAvailable(asked)
	}
	level := m.templateIsolation(ref, typ)
	if floor.Stronger(level) {
		level = floor
	}
	return level, m.isolationAvailable(level)
}

// templateIsolation is the level of sandboxes of template ref (or sandbox
// type typ) that ask for none: TEMPLATE_ISOLATION, else the default.
func (m *Manager) templateIsolation(ref, typ string) sandbox.Isolation {
	if l, ok := m.cfg.TemplateIsolation[ref]; ok {
		return l
	}
	if l, ok := m.cfg.TemplateIsolation[typ]; ok && typ != "" {
		return l
	}
	return m.cfg.DefaultIsolation.Or(sandbox.IsolationContainer)
}

// isolationAvailable refuses a level the backend does not provide, with
// the levels it does.
func (m *Manager) isolationAvailable(level sandbox.Isolation) error {
	levels := m.Isolations()
	for _, l := range levels {
		if l == level {
			return nil
		}
	}
	return sandbox.Invalid("isolation", "isolation %q is not available on this server (available: %v)", level, levels)
}

// Isolations are the isolation levels the backend provides.
func (m *Manager) Isolations() []sandbox.Isolation {
	return backend.Isolations(m.backend.Capabilities())
}

// DefaultIsolation is the level owner's sandboxes get when neither the
// request nor the template names one.
func (m *Manager) DefaultIsolation(owner string) sandbox.Isolation {
	level := m.cfg.DefaultIsolation.Or(sandbox.IsolationContainer)
	if floor := m.cfg.IsolationByUser[owner]; floor.Stronger(level) {
		return floor
	}
	return level
}
