package netpolicy

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestAddressReuseReachableFromHost: the next sandbox on an address the
// host just talked to answers the host at once. The host's neighbour
// entry of the previous sandbox stays REACHABLE for 15-45 s; with a
// random MAC per sandbox the host kept sending to the old one and a
// connection to the new sandbox (a daemon dialling a pod's agent on an
// agentbox node) hung until the entry expired. Each sandbox's MAC is its
// address's.
func TestAddressReuseReachableFromHost(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())

	serve := func(path string, addr netip.Addr) {
		t.Helper()
		l := listenIn(t, path, "tcp4", net.JoinHostPort(addr.String(), "4000"))
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("hello"))
				c.Close()
			}
		}()
	}
	hello := func(addr netip.Addr) {
		t.Helper()
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(addr.String(), "4000"), dialTimeout)
		if err != nil {
			t.Fatalf("the host connects to %s: %v", addr, err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(dialTimeout))
		if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
			t.Fatalf("from %s: %q, %v", addr, b, err)
		}
	}
	macIn := func(path string) net.HardwareAddr {
		t.Helper()
		var mac net.HardwareAddr
		if err := inNetns(path, func() error {
			l, err := netlink.LinkByName(sandboxIfname)
			if err == nil {
				mac = l.Attrs().HardwareAddr
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return mac
	}

	id, path := setup(t, m, sandbox.Network{})
	addr, ok := m.Addr(id)
	if !ok {
		t.Fatal("no address")
	}
	serve(path, addr)
	hello(addr) // the host now has a neighbour entry of addr
	first := macIn(path)
	if err := m.Teardown(t.Context(), id); err != nil {
		t.Fatal(err)
	}

	id2, path2 := setup(t, m, sandbox.Network{})
	if a, _ := m.Addr(id2); a != addr {
		t.Fatalf("the next sandbox got %s, want the freed %s (lowest free address)", a, addr)
	}
	if second := macIn(path2); !bytes.Equal(first, second) || !bytes.Equal(second, sandboxMAC(addr)) {
		t.Fatalf("MACs on %s: %s then %s, want %s both times", addr, first, second, sandboxMAC(addr))
	}
	serve(path2, addr)
	for i := 0; i < 3; i++ { // each a new connection through the neighbour entry
		hello(addr)
	}
}
