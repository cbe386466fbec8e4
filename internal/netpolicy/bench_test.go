package netpolicy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// BenchmarkSetupTeardown measures one sandbox network's full life: netns,
// veth, addresses, routes, firewall objects, then their removal.
func BenchmarkSetupTeardown(b *testing.B) {
	n := newTestNet(b)
	m := n.newManager(n.config())
	ctx := context.Background()
	nw := sandboxNetwork([]string{"allowed.test", "203.0.113.0/24"}, []string{"203.0.113.9"})
	b.ResetTimer()
	for b.Loop() {
		id := sandbox.NewID()
		if _, _, err := m.Setup(ctx, id, nw); err != nil {
			b.Fatal(err)
		}
		if err := m.Teardown(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPRoundTrip compares a 1-byte request/response over an open TCP
// connection from a sandbox (bridge, forward filter, NAT) with the same
// exchange from the host straight to the test host.
func BenchmarkTCPRoundTrip(b *testing.B) {
	n := newTestNet(b)
	m := n.newManager(n.config())
	_, path := setup(b, m, sandboxNetwork(nil, nil))
	l := listenIn(b, n.nsPath, "tcp4", n.serverIP.String()+":7")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	target := netip.AddrPortFrom(n.serverIP, 7).String()
	run := func(b *testing.B, c net.Conn) {
		defer c.Close()
		buf := []byte{1}
		for b.Loop() {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("nat", func(b *testing.B) {
		c, err := dialFrom(path, "tcp4", target)
		if err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp4", target)
		if err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
}
