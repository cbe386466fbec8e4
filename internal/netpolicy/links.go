package netpolicy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// vethPrefix starts the host-side name of every sandbox veth; the rest is
// the sandbox address in hex (3+8 characters, within IFNAMSIZ).
const vethPrefix = "abx"

// sandboxIfname is the sandbox-side interface name.
const sandboxIfname = "eth0"

func vethName(a netip.Addr) string { return vethPrefix + sandboxKey(a) }

// vethAddr parses the sandbox address out of a host-side veth name.
func vethAddr(name string) (netip.Addr, bool) {
	hex, ok := strings.CutPrefix(name, vethPrefix)
	if !ok || len(hex) != 8 {
		return netip.Addr{}, false
	}
	u, err := strconv.ParseUint(hex, 16, 32)
	if err != nil {
		return netip.Addr{}, false
	}
	return uintToV4(uint32(u)), true
}

// writeSysctl sets a /proc/sys value. Network sysctls apply to the network
// namespace of the calling thread. A missing key (e.g. IPv6 compiled out)
// is ignored.
func writeSysctl(key, value string) error {
	err := os.WriteFile("/proc/sys/"+strings.ReplaceAll(key, ".", "/"), []byte(value), 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

func readSysctl(key string) string {
	b, _ := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
	return strings.TrimSpace(string(b))
}

// ensureBridge creates the bridge if needed, gives it addr and brings it
// up. IPv6 is disabled on it so sandboxes have no IPv6 path to the host.
func ensureBridge(name string, addr netip.Prefix) (netlink.Link, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if !errors.As(err, &notFound) {
			return nil, fmt.Errorf("look up bridge %s: %w", name, err)
		}
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create bridge %s: %w", name, err)
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return nil, fmt.Errorf("look up bridge %s: %w", name, err)
		}
	}
	if link.Type() != "bridge" {
		return nil, fmt.Errorf("%s exists and is a %s, not a bridge", name, link.Type())
	}
	// A bridge without an explicit MAC takes the lowest MAC of its ports and
	// changes it as veths come and go; sandboxes would then keep sending to
	// a stale gateway MAC until their ARP entry expires. A fixed address
	// stops that.
	if mac := bridgeMAC(addr.Addr()); !bytes.Equal(link.Attrs().HardwareAddr, mac) {
		if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
			return nil, fmt.Errorf("set MAC of bridge %s: %w", name, err)
		}
	}
	if err := writeSysctl("net.ipv6.conf."+name+".disable_ipv6", "1"); err != nil {
		return nil, err
	}
	nlAddr := &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}}
	if err := netlink.AddrReplace(link, nlAddr); err != nil {
		return nil, fmt.Errorf("address bridge %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("bring up bridge %s: %w", name, err)
	}
	return link, nil
}

// bridgeMAC derives a locally administered unicast MAC from the bridge
// address, so it is stable across restarts.
func bridgeMAC(a netip.Addr) net.HardwareAddr {
	b := a.As4()
	return net.HardwareAddr{0x02, 0xab, b[0], b[1], b[2], b[3]}
}

// sandboxMAC is the MAC of the sandbox end of a veth: locally
// administered unicast, derived from the sandbox's address (as the
// bridge's is from its own), so whichever sandbox holds an address, the
// host's neighbour entry of it stays right.
func sandboxMAC(a netip.Addr) net.HardwareAddr {
	b := a.As4()
	return net.HardwareAddr{0x02, 0xa5, b[0], b[1], b[2], b[3]}
}

// deleteLink deletes a link by name; a missing link is not an error.
func deleteLink(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return err
	}
	if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

// vethConfig is what connecting one sandbox namespace needs.
type vethConfig struct {
	bridge   netlink.Link
	nsPath   string
	addr     netip.Addr // the sandbox's /32
	gateway  netip.Addr // the bridge address
	rateBits uint64     // 0: no shaping
}

// connectNetns creates the veth pair (host end on the bridge as an isolated
// port, sandbox end eth0 inside the namespace) and configures the sandbox
// side: loopback, a /32 address, an on-link route to the gateway and the
// default route through it.
func connectNetns(c vethConfig) error {
	ns, err := netns.GetFromPath(c.nsPath)
	if err != nil {
		return fmt.Errorf("open %s: %w", c.nsPath, err)
	}
	defer ns.Close()
	hostName := vethName(c.addr)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostName, MasterIndex: c.bridge.Attrs().Index},
		PeerName:      sandboxIfname,
		PeerNamespace: netlink.NsFd(int(ns)),
		// A MAC of the address, not a random one: an address is reused by
		// the next sandbox, and the host's neighbour entry of the previous
		// one (REACHABLE for 15-45 s) would keep sending its frames to a
		// MAC that is gone — a connection the host opens to a new sandbox
		// (a daemon dialling a pod IP) would hang until the entry expired.
		PeerHardwareAddr: sandboxMAC(c.addr),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", hostName, err)
	}
	host, err := netlink.LinkByName(hostName)
	if err != nil {
		return fmt.Errorf("look up veth %s: %w", hostName, err)
	}
	if err := writeSysctl("net.ipv6.conf."+hostName+".disable_ipv6", "1"); err != nil {
		return err
	}
	// Isolated ports cannot exchange frames with each other, only with the
	// bridge itself: no layer-2 path between sandboxes.
	if err := netlink.LinkSetIsolated(host, true); err != nil {
		return fmt.Errorf("isolate %s: %w", hostName, err)
	}
	if c.rateBits > 0 {
		if err := shape(netlink.QdiscReplace, host, c.rateBits); err != nil {
			return err
		}
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("bring up %s: %w", hostName, err)
	}
	return inNetns(c.nsPath, func() error { return configureSandboxSide(c) })
}

// configureSandboxSide runs inside the sandbox namespace. Sandboxes hold no
// capability over this namespace (it belongs to the host user namespace),
// so they cannot undo any of it.
func configureSandboxSide(c vethConfig) error {
	for _, kv := range [][2]string{
		{"net.ipv6.conf.all.disable_ipv6", "1"},
		{"net.ipv6.conf.default.disable_ipv6", "1"},
		{"net.ipv6.conf." + sandboxIfname + ".disable_ipv6", "1"},
		// The host would send redirects for sandbox-to-sandbox packets; with
		// a /32 they are invalid anyway, but ignore them outright.
		{"net.ipv4.conf.all.accept_redirects", "0"},
		{"net.ipv4.conf." + sandboxIfname + ".accept_redirects", "0"},
	} {
		if err := writeSysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink in sandbox namespace: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("look up lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	eth, err := h.LinkByName(sandboxIfname)
	if err != nil {
		return fmt.Errorf("look up %s: %w", sandboxIfname, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: c.addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := h.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("address %s: %w", sandboxIfname, err)
	}
	if c.rateBits > 0 {
		if err := shape(h.QdiscReplace, eth, c.rateBits); err != nil {
			return err
		}
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("bring up %s: %w", sandboxIfname, err)
	}
	gw := c.gateway.AsSlice()
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}}); err != nil {
		return fmt.Errorf("route to gateway: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}
