package manager

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// serviceFor resolves what a sandbox of template runs after boot
// (sandbox.ServiceOf); NoService turns it off.
func serviceFor(t sandbox.Template, req CreateRequest) (*sandbox.Service, error) {
	if req.NoService {
		return nil, nil
	}
	svc, err := sandbox.ServiceOf(t.Config)
	if err != nil {
		return nil, invalid("template", "template %s: %v", t.Ref, err)
	}
	return svc, nil
}

// waitService waits for the new sandbox's service to be ready, bounded by
// ServiceStartTimeout. Pool fills go through here too, so a pooled
// sandbox is handed out only once ready.
func (m *Manager) waitService(ctx context.Context, id sandbox.ID, info sandbox.Info, token string) error {
	timeout := m.cfg.ServiceStartTimeout
	if timeout <= 0 {
		timeout = defaults.ServiceStartTimeout
	}
	start := time.Now()
	// Of, not New: a provider's endpoint carries its own address headers
	// and token.
	c := agentclient.Of(info.Agent, token)
	defer c.Close()
	st, err := c.WaitService(ctx, timeout)
	m.metrics.phase("service_ready", time.Since(start))
	if err != nil {
		m.log.Warn("sandbox service not ready", "sandbox", id, "err", err)
		return err
	}
	m.log.Debug("sandbox service ready", "sandbox", id, "state", st.State, "ms", time.Since(start).Milliseconds())
	return nil
}

// serviceEvents are the service's events as log entries (nil when the
// agent cannot tell), for Logs.
func serviceEvents(ctx context.Context, c *agentclient.Client) []LogEntry {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.Service(ctx)
	if err != nil || st.State == sandbox.ServiceNone {
		return nil
	}
	out := make([]LogEntry, 0, len(st.Events)+1)
	for _, ev := range st.Events {
		out = append(out, LogEntry{Time: ev.Time, Level: ev.Level, Message: ev.Message, Fields: ev.Fields})
	}
	return out
}
