package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// Reconcile removes the network of every sandbox not in live: recorded
// sandboxes and also anything of ours found in the kernel or the namespace
// directory that no live sandbox owns (left by a crash between steps). Call
// it once after New, with the sandboxes the backend recovered.
func (m *Manager) Reconcile(ctx context.Context, live []sandbox.ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := map[sandbox.ID]bool{}
	for _, id := range live {
		keep[id] = true
	}
	var errs []error
	if err := m.refreshHostNets(); err != nil {
		errs = append(errs, err)
	}
	owned := map[netip.Addr]bool{}
	for id, r := range m.st.Sandboxes {
		if keep[id] {
			owned[r.Addr] = true
			continue
		}
		if err := m.removeKernelState(id, r.Addr); err != nil {
			errs = append(errs, err)
		}
		delete(m.st.Sandboxes, id)
	}
	if err := m.st.save(m.cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(append(errs, err)...)
	}

	// Orphans: objects whose owner is not recorded at all.
	links, err := netlink.LinkList()
	if err != nil {
		errs = append(errs, fmt.Errorf("list links: %w", err))
	}
	for _, l := range links {
		a, ok := vethAddr(l.Attrs().Name)
		if ok && m.cfg.Subnet.Contains(a) && !owned[a] {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete orphan veth %s: %w", l.Attrs().Name, err))
			}
		}
	}
	entries, err := os.ReadDir(m.cfg.NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if _, ok := m.st.Sandboxes[sandbox.ID(e.Name())]; !ok {
			if err := removeNetns(filepath.Join(m.cfg.NetnsDir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	conn, err := nftables.New()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	inv, err := m.fw.inventory(conn)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var orphans []netip.Addr
	for a := range inv.addrs {
		if !owned[a] {
			orphans = append(orphans, a)
		}
	}
	if len(orphans) > 0 {
		if err := m.fw.removeWith(orphans, inv); err != nil {
			errs = append(errs, err)
		}
		m.pmu.Lock()
		for _, a := range orphans {
			delete(m.policies, a)
		}
		m.pmu.Unlock()
	}
	return errors.Join(errs...)
}
