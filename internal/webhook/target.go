package webhook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// blockedPrefixes are ranges no tenant may aim a webhook at (besides
// loopback, private, link-local, multicast and unspecified addresses,
// which netip tells): the daemon would be a tenant's way into the
// operator's network.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 maps to IPv4 inside
}

// blocked reports why ip may not be a delivery target ("" : it may).
func blocked(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "a link-local address"
	case ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
		return "not a unicast address"
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return "a reserved address"
		}
	}
	if ownAddress(ip) {
		return "an address of the daemon's host"
	}
	return ""
}

// ownAddress reports whether ip is one of this host's interface addresses.
func ownAddress(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if own, ok := netip.AddrFromSlice(n.IP); ok && own.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// CheckURL checks a webhook URL when it is registered: http or https, a
// host, no credentials, and (unless allowPrivate) no address a tenant may
// not reach from the daemon. Names are resolved now and again at every
// connection (the dialer checks the address it connects to), so a name
// that later resolves elsewhere is refused then.
func CheckURL(ctx context.Context, raw string, allowPrivate bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, sandbox.Invalid("url", "want an http or https URL with a host, got %q", raw)
	}
	if u.User != nil {
		return nil, sandbox.Invalid("url", "no credentials in the URL: the signature authenticates deliveries")
	}
	if len(raw) > 2048 {
		return nil, sandbox.Invalid("url", "URL longer than 2048 bytes")
	}
	u.Fragment = ""
	if allowPrivate {
		return u, nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := blocked(ip); why != "" {
			return nil, sandbox.Invalid("url", "%s is %s; the operator allows such targets with WEBHOOK_ALLOW_PRIVATE", host, why)
		}
		return u, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return u, nil // unresolvable now: every delivery checks again
	}
	for _, ip := range ips {
		if why := blocked(ip); why != "" {
			return nil, sandbox.Invalid("url", "%s resolves to %s, %s; the operator allows such targets with WEBHOOK_ALLOW_PRIVATE", host, ip, why)
		}
	}
	return u, nil
}

// dialControl refuses a connection to a blocked address, checked on the
// address actually dialled (after resolution, so a name re-pointed at a
// private address after registration is caught).
func dialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook target %s: %w", address, err)
		}
		if why := blocked(ap.Addr()); why != "" {
			return fmt.Errorf("webhook target %s is %s (WEBHOOK_ALLOW_PRIVATE is off)", ap.Addr(), why)
		}
		return nil
	}
}
