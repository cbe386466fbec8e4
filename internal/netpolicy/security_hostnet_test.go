package netpolicy

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestSecurityHostNetworksDenied: the host's directly connected networks
// are denied to egress sandboxes even when they use public addresses —
// here the test host's LAN, whose neighbour is also the gateway to the
// test internet. The internet behind the gateway stays reachable, the set
// follows address changes, and NETWORK_ALLOW_PRIVATE opens a network.
func TestSecurityHostNetworksDenied(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())
	_, path := setup(t, m, sandboxNetwork([]string{"0.0.0.0/0"}, nil))

	mustReach(t, path, n.serverIP) // via the gateway's MAC
	mustBeRejected(t, path, netip.AddrPortFrom(n.lanIP, 80))

	// An address added to the host later: the internet's network becomes a
	// connected one, and is denied once the kernel reports the change.
	extra := netip.PrefixFrom(n.serverIP.Prev(), 24).String() // 198.18.x.1/24
	ipCmd(t, "addr", "add", extra, "dev", n.hostIf, "noprefixroute")
	ipCleanup(t, "addr", "del", extra, "dev", n.hostIf)
	waitRejected(t, path, netip.AddrPortFrom(n.serverIP, 80), true)
	ipCmd(t, "addr", "del", extra, "dev", n.hostIf)
	waitRejected(t, path, netip.AddrPortFrom(n.serverIP, 80), false)

	// The operator may open the LAN.
	n2 := newTestNet(t)
	cfg := n2.config()
	cfg.AllowPrivate = []netip.Prefix{netip.PrefixFrom(n2.lanIP, 24).Masked()}
	m2 := n2.newManager(cfg)
	_, path2 := setup(t, m2, sandboxNetwork(nil, nil))
	mustReach(t, path2, n2.lanIP)
	mustReach(t, path2, n2.serverIP)
}

// waitRejected waits (at most 10s, 100 tries) until a connection from the
// sandbox to addr is rejected by policy (want) or accepted (!want).
func waitRejected(t *testing.T, path string, addr netip.AddrPort, want bool) {
	t.Helper()
	var last error
	for range 100 {
		c, err := dialFrom(path, "tcp4", addr.String())
		if err == nil {
			c.Close()
		}
		if rejected := errors.Is(err, syscall.ECONNREFUSED); rejected == want && (want || err == nil) {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	dumpNetState(t, path)
	t.Fatalf("connect %s: rejected=%v never reached (last error %v)", addr, want, last)
}
