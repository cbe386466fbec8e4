package netpolicy

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Config configures a Manager. The zero value is usable: every field has a
// default filled in by New.
type Config struct {
	// Bridge is the host bridge sandboxes attach to. It also names the
	// nftables table and tags the DOCKER-USER rules, so managers with
	// different bridges do not collide. Empty: New picks a free one,
	// agentbox<N> (see choose.go); a configured bridge that another daemon
	// or interface holds makes New fail.
	Bridge string
	// Subnet is the IPv4 range sandboxes get addresses from; the bridge takes
	// its first address. Zero: New picks a free one, 10.(88+N).0.0/16,
	// overlapping no address, route or other agentbox subnet of the host; a
	// configured subnet that overlaps one makes New fail. IPv6 is not
	// supported.
	Subnet netip.Prefix

	// Upstream are the resolvers the DNS filter forwards allowed queries to
	// (port 53 when the port is zero). Default: the host's /etc/resolv.conf,
	// loopback resolvers (127.0.0.53 ...) only when nothing else is listed.
	Upstream []netip.AddrPort
	// DNSTimeout bounds one upstream exchange. Default 2s.
	DNSTimeout time.Duration
	// DNSRate is the sustained number of queries per second one sandbox may
	// send (burst twice that); excess queries are REFUSED. Default 100.
	DNSRate int
	// DNSConcurrency bounds queries being forwarded at once across all
	// sandboxes; beyond it queries get SERVFAIL. Default 256.
	DNSConcurrency int

	// AllowHostPorts are TCP/UDP ports on the host that sandboxes may reach
	// (on any host address). Everything else on the host is rejected.
	AllowHostPorts []uint16
	// AllowPrivate are private/reserved IPv4 ranges (or networks of the
	// host's interfaces) that sandboxes may reach
	// (still subject to each sandbox's own AllowOut/DenyOut).
	AllowPrivate []netip.Prefix

	// BandwidthBits limits each sandbox's upload and (separately) download
	// in bits per second. 0 means no limit.
	BandwidthBits uint64
	// MaxConns limits each sandbox's concurrent outbound connections
	// (conntrack entries it started). 0 means no limit.
	MaxConns uint32
	// BrokerPort is the TCP port on the bridge address the egress broker
	// listens on; HTTP and HTTPS of sandboxes with egress rules are
	// redirected to it. 0: no broker, rules are refused.
	BrokerPort uint16

	// StateDir holds the allocation file, which also records the bridge
	// and subnet this manager uses: it is the manager's identity on the
	// host (two running managers cannot share one). Default
	// /var/lib/agentbox/net/<Bridge>, /var/lib/agentbox/net/auto when the
	// bridge is picked.
	StateDir string
	// NetnsDir holds the sandboxes' namespace bind mounts.
	// Default /run/agentbox/netns/<Bridge>.
	NetnsDir string

	// DenialLogInterval is how often denial counters are read and a line is
	// logged for each sandbox whose count grew (this bounds the log rate).
	// Default 10s.
	DenialLogInterval time.Duration

	Logger *slog.Logger
}

const maxIfNameLen = 15

// withDefaults returns c with zero fields filled in and validated. Bridge
// and Subnet may stay unset: New picks them (pickedDefaults fills in what
// depends on them).
func (c Config) withDefaults() (Config, error) {
	if c.Bridge != "" && (len(c.Bridge) > maxIfNameLen || strings.ContainsAny(c.Bridge, "/ \t\n") ||
		strings.HasSuffix(c.Bridge, claimSuffix) || strings.HasPrefix(c.Bridge, ".")) {
		return c, fmt.Errorf("invalid bridge name %q", c.Bridge)
	}
	if c.Subnet.IsValid() {
		c.Subnet = c.Subnet.Masked()
		if !c.Subnet.Addr().Is4() {
			return c, fmt.Errorf("subnet %s: only IPv4 is supported", c.Subnet)
		}
		if c.Subnet.Bits() > 30 {
			return c, fmt.Errorf("subnet %s is too small", c.Subnet)
		}
	}
	if c.DNSTimeout <= 0 {
		c.DNSTimeout = 2 * time.Second
	}
	if c.DNSRate <= 0 {
		c.DNSRate = 100
	}
	if c.DNSConcurrency <= 0 {
		c.DNSConcurrency = 256
	}
	if c.StateDir == "" {
		name := c.Bridge
		if name == "" {
			name = "auto"
		}
		c.StateDir = "/var/lib/agentbox/net/" + name
	}
	// The state directory names its owner in claims: make it one name.
	if abs, err := filepath.Abs(c.StateDir); err == nil {
		c.StateDir = abs
	}
	if c.DenialLogInterval <= 0 {
		c.DenialLogInterval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// Copies: the manager normalizes these in place and keeps them.
	c.AllowPrivate = slices.Clone(c.AllowPrivate)
	c.AllowHostPorts = slices.Clone(c.AllowHostPorts)
	c.Upstream = slices.Clone(c.Upstream)
	for i, p := range c.AllowPrivate {
		if !p.Addr().Is4() {
			return c, fmt.Errorf("allow-private %s: only IPv4 is supported", p)
		}
		c.AllowPrivate[i] = p.Masked()
	}
	if len(c.Upstream) == 0 {
		up, err := hostResolvers()
		if err != nil {
			return c, err
		}
		c.Upstream = up
	}
	for i, u := range c.Upstream {
		if u.Port() == 0 {
			c.Upstream[i] = netip.AddrPortFrom(u.Addr(), 53)
		}
	}
	return c, nil
}

// pickedDefaults fills in what depends on the bridge, once it is known.
func (c Config) pickedDefaults() Config {
	if c.NetnsDir == "" {
		c.NetnsDir = "/run/agentbox/netns/" + c.Bridge
	}
	return c
}

// resolvConfPaths are read in order; the systemd-resolved one lists the real
// upstreams when /etc/resolv.conf only points at the local stub.
var resolvConfPaths = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// hostResolvers returns the host's non-loopback resolvers, or its loopback
// ones when there is nothing else. The DNS filter runs on the host, so a
// loopback stub resolver works too; it is just one more hop.
func hostResolvers() ([]netip.AddrPort, error) {
	var public, loop []netip.AddrPort
	for _, p := range resolvConfPaths {
		addrs, err := readResolvConf(p)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a, 53)
			if a.IsLoopback() {
				loop = append(loop, ap)
			} else {
				public = append(public, ap)
			}
		}
		if len(public) > 0 {
			return public, nil
		}
	}
	if len(loop) > 0 {
		return loop, nil
	}
	return nil, errors.New("no upstream resolver: set Config.Upstream or /etc/resolv.conf")
}

// readResolvConf returns the nameserver addresses of a resolv.conf file.
func readResolvConf(path string) ([]netip.Addr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		// Zoned IPv6 link-local entries ("fe80::1%eth0") parse too; keep them.
		a, err := netip.ParseAddr(fields[1])
		if err != nil {
			continue
		}
		out = append(out, a.Unmap())
	}
	return out, sc.Err()
}
