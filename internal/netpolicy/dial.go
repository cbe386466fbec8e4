package netpolicy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// DialInNetns connects to addr from inside the network namespace at
// netnsPath (a bind mount such as Manager.NetnsPath, or /proc/<pid>/ns/net),
// so the daemon can reach a sandbox's loopback-only services, e.g.
// 127.0.0.1:<port>, including sandboxes without network.
//
// network is "tcp", "tcp4", "udp" or "udp4" (IPv6 works too where the
// namespace has it). The host of addr must be an IP literal or "localhost":
// names are never resolved, because resolution would happen outside the
// namespace. The returned connection works from any goroutine; a socket
// stays in the namespace it was created in.
func DialInNetns(ctx context.Context, netnsPath, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("dial in netns: unsupported network %q", network)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial in netns: %w", err)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("dial in netns: host %q is not an IP address", host)
	}
	target := net.JoinHostPort(ip.String(), port)

	var conn net.Conn
	// With a single literal address net.Dialer creates the socket and waits
	// for connect on the calling goroutine, so the socket is created on the
	// thread that entered the namespace; no helper goroutine is involved.
	err = inNetns(netnsPath, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, target)
		conn = c
		return err
	})
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("dial %s %s in %s: %w", network, target, netnsPath, err)
	}
	return conn, nil
}
