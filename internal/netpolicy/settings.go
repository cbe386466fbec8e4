package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are sandbox networking's settings (internal/settings). The
// daemon gives them to Config.
type Settings struct {
	Network          string    `env:"NETWORK" envDefault:"auto" oneof:"auto on off" help:"sandbox networking: auto (when the kernel supports it), on, or off (loopback only)"`
	NetworkBridge    Bridge    `env:"NETWORK_BRIDGE" envDefault:"" help:"host bridge (and nftables table) of sandbox networking; empty: a free one, agentbox<N> (docs/configuration.md)"`
	NetworkSubnet    Subnet    `env:"NETWORK_SUBNET" envDefault:"" help:"IPv4 range sandbox addresses come from; empty: a free one, 10.(88+N).0.0/16 (docs/configuration.md)"`
	NetworkDNS       Resolvers `env:"NETWORK_DNS" envDefault:"" help:"upstream resolvers for sandboxes, comma-separated ip[:port] (default: the host's)"`
	NetworkHostPorts Ports     `env:"NETWORK_ALLOW_HOST_PORTS" envDefault:"" help:"host TCP/UDP ports sandboxes may reach, comma-separated (default none)"`
	NetworkPrivate   Prefixes  `env:"NETWORK_ALLOW_PRIVATE" envDefault:"" help:"private ranges and host networks sandboxes may reach, comma-separated CIDRs (default none)"`
	NetworkBandwidth Bandwidth `env:"NETWORK_BANDWIDTH" envDefault:"0" help:"per-sandbox bandwidth limit in bits/s each way, e.g. 100M; 0 = unlimited"`
	NetworkMaxConns  uint32    `env:"NETWORK_MAX_CONNS" envDefault:"0" min:"0" max:"1048576" help:"per-sandbox limit of concurrent outbound connections, 0 = unlimited"`
	// The egress broker (internal/broker, docs/secrets.md).
	NetworkBrokerPort   uint16 `env:"NETWORK_BROKER_PORT" envDefault:"15443" min:"0" max:"65535" help:"TCP port of the egress broker on the sandbox bridge address (each daemon has its own bridge address, so daemons side by side do not collide); HTTP and HTTPS of sandboxes with egress rules are redirected to it; 0 = no broker (rules refused)"`
	NetworkBrokerCAFile string `env:"NETWORK_BROKER_CA_FILE" envDefault:"" help:"PEM file of extra CA certificates the egress broker trusts for upstream servers, besides the host's trust store"`
}

// Bridge is NETWORK_BRIDGE: a host interface name ("" picks a free one).
type Bridge string

// UnmarshalText checks the name.
func (b *Bridge) UnmarshalText(t []byte) error {
	v := string(t)
	if len(v) > 15 || strings.ContainsAny(v, "/ \t") {
		return fmt.Errorf("want an interface name of at most 15 characters")
	}
	*b = Bridge(v)
	return nil
}

// Subnet is NETWORK_SUBNET: an IPv4 range of /28 or larger, masked (the
// zero Prefix picks a free one).
type Subnet netip.Prefix

// UnmarshalText reads the CIDR; empty is none.
func (s *Subnet) UnmarshalText(t []byte) error {
	if len(t) == 0 {
		*s = Subnet{}
		return nil
	}
	p, err := netip.ParsePrefix(string(t))
	if err != nil || !p.Addr().Is4() || p.Bits() > 28 {
		return fmt.Errorf("want an IPv4 CIDR of /28 or larger")
	}
	*s = Subnet(p.Masked())
	return nil
}

// Prefix is the subnet as a netip.Prefix.
func (s Subnet) Prefix() netip.Prefix { return netip.Prefix(s) }

func (s Subnet) String() string { return s.Prefix().String() }

// Resolvers is NETWORK_DNS: comma-separated ip[:port] (port 53 by default).
type Resolvers []netip.AddrPort

// UnmarshalText reads the list.
func (r *Resolvers) UnmarshalText(t []byte) error {
	*r = nil
	for _, e := range settings.SplitList(string(t)) {
		ap, err := netip.ParseAddrPort(e)
		if err != nil {
			a, err2 := netip.ParseAddr(e)
			if err2 != nil {
				return fmt.Errorf("%q is not an address", e)
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		*r = append(*r, ap)
	}
	return nil
}

// Ports is NETWORK_ALLOW_HOST_PORTS: comma-separated ports.
type Ports []uint16

// UnmarshalText reads the list.
func (p *Ports) UnmarshalText(t []byte) error {
	*p = nil
	for _, e := range settings.SplitList(string(t)) {
		n, err := strconv.ParseUint(e, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("%q is not a port", e)
		}
		*p = append(*p, uint16(n))
	}
	return nil
}

// Prefixes is NETWORK_ALLOW_PRIVATE: comma-separated CIDRs, masked.
type Prefixes []netip.Prefix

// UnmarshalText reads the list.
func (p *Prefixes) UnmarshalText(t []byte) error {
	*p = nil
	for _, e := range settings.SplitList(string(t)) {
		pf, err := netip.ParsePrefix(e)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR", e)
		}
		*p = append(*p, pf.Masked())
	}
	return nil
}

// Bandwidth is NETWORK_BANDWIDTH in bits/s, decimal multiples (100M,
// 1.5Gbit, 250kbps); 0 is unlimited.
type Bandwidth uint64

// UnmarshalText reads the rate.
func (b *Bandwidth) UnmarshalText(t []byte) error {
	v := string(t)
	*b = 0
	if v == "0" || v == "" {
		return nil
	}
	n, err := settings.ParseSize(strings.TrimSuffix(strings.TrimSuffix(v, "bit"), "bps"))
	if err != nil {
		return err
	}
	// Sizes use binary multiples; bandwidths are decimal.
	*b = Bandwidth(float64(n) * decimalFactor(v))
	return nil
}

// decimalFactor converts a binary-multiple size (K = 1024) of v into its
// decimal reading (K = 1000), the convention for bandwidths.
func decimalFactor(v string) float64 {
	u := strings.ToUpper(v)
	switch {
	case strings.Contains(u, "K"):
		return 1000.0 / 1024
	case strings.Contains(u, "M"):
		return 1e6 / (1 << 20)
	case strings.Contains(u, "G"):
		return 1e9 / (1 << 30)
	}
	return 1
}
