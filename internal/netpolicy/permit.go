package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// learnedName is an address the DNS filter handed out for name, allowed
// until until.
type learnedName struct {
	name  string
	until time.Time
}

// ErrDenied is returned by Permit for a destination the sandbox's policy
// does not allow.
var ErrDenied = errors.New("the sandbox's egress policy denies this destination")

// Target is a sandbox the broker serves, found by its address.
type Target struct {
	ID      sandbox.ID
	Network sandbox.Network
}

// Source returns the sandbox whose address src is.
func (m *Manager) Source(src netip.Addr) (Target, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, rec := range m.st.Sandboxes {
		if rec.Addr == src {
			return Target{ID: id, Network: rec.Network}, true
		}
	}
	return Target{}, false
}

// SetPolicyHook has f called after every UpdatePolicy (the broker cuts
// its own connections the new policy denies). Call it before sandboxes
// change.
func (m *Manager) SetPolicyHook(f func(id sandbox.ID, n sandbox.Network)) { m.onPolicy = f }

// Permit reports whether the sandbox at src may open a connection to dst,
// as the firewall would decide for a packet it forwards: for the broker,
// which opens the connections of the sandboxes it serves itself. name,
// when not empty, is the host name the sandbox asked for (TLS SNI or HTTP
// Host): it must be a name the DNS filter would resolve.
func (m *Manager) Permit(src, dst netip.Addr, name string) error {
	m.pmu.RLock()
	p, ok := m.policies[src]
	m.pmu.RUnlock()
	if !ok {
		return fmt.Errorf("%s is no sandbox: %w", src, ErrDenied)
	}
	if name != "" && !p.nameAllowed(name) {
		return fmt.Errorf("%s: %w", name, ErrDenied)
	}
	if !m.permitAddr(src, dst, p) {
		return fmt.Errorf("%s: %w", dst, ErrDenied)
	}
	return nil
}

func (m *Manager) permitAddr(src, dst netip.Addr, p policy) bool {
	dst = dst.Unmap()
	if !dst.Is4() {
		return false
	}
	in := func(nets []netip.Prefix) bool {
		return slices.ContainsFunc(nets, func(n netip.Prefix) bool { return n.Contains(dst) })
	}
	if in(p.denyNets) {
		return false
	}
	if (in(privateRanges) || in(m.fw.hostNets) || dst == m.bridgeIP) && !in(m.fw.allowPrivate) {
		return false
	}
	if p.open || in(p.allowNets) {
		return true
	}
	m.lmu.Lock()
	ln, ok := m.learned[src][dst]
	m.lmu.Unlock()
	if ok && time.Now().Before(ln.until) && p.nameAllowed(ln.name) {
		return true
	}
	if ok {
		return false
	}
	// Learned before a restart: the kernel's set still has it.
	conn, err := nftables.New()
	if err != nil {
		return false
	}
	els, err := conn.GetSetElements(m.fw.dnsSet(src))
	if err != nil {
		return false
	}
	key := ip4Bytes(dst)
	return slices.ContainsFunc(els, func(e nftables.SetElement) bool { return slices.Equal(e.Key, key) })
}

// keepLearned drops the learned addresses of src whose name p no longer
// allows and returns the others as dns-set elements with their remaining
// lifetime. Called with pmu held for writing.
func (m *Manager) keepLearned(src netip.Addr, p policy) []nftables.SetElement {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	var els []nftables.SetElement
	now := time.Now()
	for a, ln := range m.learned[src] {
		left := ln.until.Sub(now)
		if !p.learns() || !p.nameAllowed(ln.name) || left < time.Second {
			delete(m.learned[src], a)
			continue
		}
		els = append(els, nftables.SetElement{Key: ip4Bytes(a), Timeout: left.Truncate(time.Second)})
	}
	return els
}

// deniedFlows matches the conntrack entries of connections src opened to a
// destination p denies.
type deniedFlows struct {
	m   *Manager
	src netip.Addr
	p   policy
}

func (f deniedFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	s, ok1 := netip.AddrFromSlice(flow.Forward.SrcIP)
	d, ok2 := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok1 || !ok2 || s.Unmap() != f.src {
		return false
	}
	d = d.Unmap()
	if d == f.m.bridgeIP {
		return false // DNS and the broker: they apply the policy themselves
	}
	// A connection redirected to the broker (its replies come from the
	// bridge address): the broker cuts it itself, with a reset that still
	// finds its mapping back to the sandbox. Deleting the entry first
	// would leave the sandbox's end waiting on a peer it can no longer
	// hear from.
	if r, ok := netip.AddrFromSlice(flow.Reverse.SrcIP); ok && r.Unmap() == f.m.bridgeIP {
		return false
	}
	return !f.m.permitAddr(f.src, d, f.p)
}

// cutDenied deletes the conntrack entries of src's connections that p
// denies.
func (m *Manager) cutDenied(src netip.Addr, p policy) error {
	filter := deniedFlows{m: m, src: src, p: p}
	var err error
	for range 3 {
		if _, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filter); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("flush conntrack of %s: %w", src, err)
	}
	return nil
}
