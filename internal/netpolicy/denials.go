package netpolicy

import (
	"context"
	"net/netip"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// poll runs until ctx ends. Every DenialLogInterval it logs one line per
// sandbox whose denial counter grew, which bounds the log rate no matter
// how much a sandbox is denied, and it re-checks Docker's DOCKER-USER chain
// in case Docker was (re)started after New.
func (m *Manager) poll(ctx context.Context) {
	defer close(m.pollDone)
	t := time.NewTicker(m.cfg.DenialLogInterval)
	defer t.Stop()
	last := map[netip.Addr]uint64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		counts, err := m.fw.allDenials()
		if err != nil {
			m.log.Warn("read denial counters", "err", err)
			continue
		}
		ids := m.idsByAddr()
		for a, n := range counts {
			if prev := last[a]; n > prev {
				m.log.Warn("sandbox network access denied", "sandbox", ids[a], "addr", a,
					"denied", n-prev, "denied_total", n, "interval", m.cfg.DenialLogInterval)
			}
		}
		last = counts
		if _, err := m.fw.syncDockerUser(true); err != nil {
			m.log.Warn("docker coexistence", "err", err)
		}
		if err := m.refreshHostNets(); err != nil {
			m.log.Warn("refresh host networks", "err", err)
		}
	}
}

func (m *Manager) idsByAddr() map[netip.Addr]sandbox.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[netip.Addr]sandbox.ID, len(m.st.Sandboxes))
	for id, r := range m.st.Sandboxes {
		out[r.Addr] = id
	}
	return out
}
