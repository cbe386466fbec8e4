package netpolicy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// The host's directly connected networks are denied like the private
// ranges: a LAN (or a cloud VPC) may use public addresses, and the hosts
// on it — the uplink's gateway included — are the host's neighbours, not
// the internet. Denying them by destination does not hinder NAT egress:
// packets to the internet carry the remote address, and only the
// gateway's MAC. NETWORK_ALLOW_PRIVATE opens them like any private range.
//
// The set follows the host's addresses: an address change notified by the
// kernel (netlink) refreshes it at once, and Reconcile and the periodic
// poll refresh it too, in case a notification was lost.

// minHostNetBits is the shortest host prefix that is denied: a shorter one
// (a /0 or /1 on some tunnel) would deny the whole internet.
const minHostNetBits = 8

// hostNets lists the IPv4 networks of the host's interfaces, except the
// sandbox bridge's own and loopback, sorted.
func hostNets(bridge string) ([]netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list host addresses: %w", err)
	}
	skip := map[int]bool{}
	if l, err := netlink.LinkByName(bridge); err == nil {
		skip[l.Attrs().Index] = true
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if skip[a.LinkIndex] || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IPNet.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		bits, _ := a.IPNet.Mask.Size()
		if !ip.Is4() || ip.IsLoopback() || bits < minHostNetBits {
			continue
		}
		p := netip.PrefixFrom(ip, bits).Masked()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out, nil
}

// deniedElements is the content of the always-denied set: the private
// ranges and the host's networks.
func deniedElements(host []netip.Prefix) []nftables.SetElement {
	return intervalElements(mergePrefixes(append(slices.Clone(privateRanges), host...)))
}

// setHostNets replaces the host networks in the always-denied set, in one
// transaction: the set is never seen empty.
func (f *firewall) setHostNets(host []netip.Prefix) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	s := f.set(setPrivate)
	conn.FlushSet(s)
	if err := conn.SetAddElements(s, deniedElements(host)); err != nil {
		return err
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("update the host networks in %s: %w", setPrivate, err)
	}
	return nil
}

// refreshHostNets re-reads the host's networks and updates the firewall
// when they changed.
func (m *Manager) refreshHostNets() error {
	nets, err := hostNets(m.cfg.Bridge)
	if err != nil {
		return err
	}
	m.hmu.Lock()
	defer m.hmu.Unlock()
	if slices.Equal(nets, m.fw.hostNets) {
		return nil
	}
	if err := m.fw.setHostNets(nets); err != nil {
		return err
	}
	m.log.Info("host networks denied to sandboxes", "networks", nets)
	m.fw.hostNets = nets
	return nil
}

// watchHostNets refreshes the host networks on every address change the
// kernel reports, until ctx ends. Without a subscription the poll's
// refresh remains.
func (m *Manager) watchHostNets(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	updates := make(chan netlink.AddrUpdate, 64)
	stop := make(chan struct{})
	defer close(stop)
	if err := netlink.AddrSubscribeWithOptions(updates, stop, netlink.AddrSubscribeOptions{
		ErrorCallback: func(err error) {
			if ctx.Err() == nil { // closing the subscription at shutdown fails its read
				m.log.Warn("host address notifications", "err", err)
			}
		},
	}); err != nil {
		m.log.Warn("cannot follow host address changes; refreshing periodically", "err", err)
		<-ctx.Done()
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				m.log.Warn("host address notifications ended; refreshing periodically")
				<-ctx.Done()
				return
			}
			if u.LinkAddress.IP.To4() == nil {
				continue
			}
			if err := m.refreshHostNets(); err != nil {
				m.log.Warn("refresh host networks", "err", err)
			}
		}
	}
}
