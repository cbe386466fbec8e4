package manager

import "github.com/agentbox/agentbox/internal/admission"

// RetryAfterError marks a refusal the caller may retry after a pause.
type RetryAfterError = admission.RetryAfterError

// RequestOverhead is what any heavy request is charged besides its
// buffers.
const RequestOverhead = admission.RequestOverhead

// Admit admits one heavy request of owner against the daemon's admission
// (see package admission).
func (m *Manager) Admit(owner string, bytes int64) (release func(), err error) {
	return m.admission.Admit(owner, bytes)
}

// Reserve charges bytes more to owner's memory share (see package
// admission).
func (m *Manager) Reserve(owner string, bytes int64) (release func(), err error) {
	return m.admission.Reserve(owner, bytes)
}

// Admission is the daemon's admission tracker, which the data plane and
// the template routes share.
func (m *Manager) Admission() *admission.Tracker { return m.admission }
