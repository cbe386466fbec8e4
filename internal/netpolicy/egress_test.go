package netpolicy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// mustReach fails unless the sandbox gets the test host's page at addr.
func mustReach(t *testing.T, path string, addr netip.Addr) {
	t.Helper()
	body, err := get(path, addr)
	if err != nil {
		dumpNetState(t, path)
		t.Fatalf("GET http://%s/ from sandbox: %v", addr, err)
	}
	if !strings.HasPrefix(body, "hello from") {
		t.Fatalf("GET http://%s/ from sandbox: body %q", addr, body)
	}
}

// mustBeRejected fails unless a TCP connection from the sandbox to addr is
// actively rejected (reset), which is what makes denials fail fast: a
// silently dropped SYN would end in a timeout instead.
func mustBeRejected(t *testing.T, path string, addr netip.AddrPort) {
	t.Helper()
	c, err := dialFrom(path, "tcp4", addr.String())
	if err == nil {
		c.Close()
		t.Fatalf("connect %s from sandbox: succeeded, want rejection", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("connect %s from sandbox: %v, want connection refused (reset by policy)", addr, err)
	}
}

func mustResolve(t *testing.T, path string, server netip.Addr, name string, want netip.Addr) {
	t.Helper()
	rc, addrs, err := resolve(path, server, name)
	if err != nil || rc != dnsmessage.RCodeSuccess || len(addrs) != 1 || addrs[0] != want {
		t.Fatalf("resolve %s: rcode %v addrs %v err %v, want %s", name, rc, addrs, err, want)
	}
}

func mustNotResolve(t *testing.T, path string, server netip.Addr, name string) {
	t.Helper()
	rc, addrs, err := resolve(path, server, name)
	if err != nil {
		t.Fatalf("resolve %s: %v (want a fast NXDOMAIN, not a timeout)", name, err)
	}
	if rc != dnsmessage.RCodeNameError || len(addrs) != 0 {
		t.Fatalf("resolve %s: rcode %v addrs %v, want NXDOMAIN", name, rc, addrs)
	}
}

func TestOpenEgressWithDenyList(t *testing.T) {
	n := newTestNet(t)
	cfg := n.config()
	logs := newLogCapture(t)
	cfg.Logger = slog.New(logs)
	cfg.DenialLogInterval = 100 * time.Millisecond
	m := n.newManager(cfg)
	id, path := setup(t, m, sandboxNetwork(nil, []string{n.otherIP.String() + "/32", "denied.test"}))

	mustReach(t, path, n.serverIP)
	mustResolve(t, path, m.BridgeIP(), "allowed.test", n.serverIP)
	// DNS sent to any server is answered by the filter.
	mustResolve(t, path, netip.MustParseAddr("198.51.100.53"), "allowed.test", n.serverIP)
	mustNotResolve(t, path, m.BridgeIP(), "denied.test")

	before := m.Denials(id)
	start := time.Now()
	mustBeRejected(t, path, netip.AddrPortFrom(n.otherIP, 80))
	t.Logf("denied connect failed after %v", time.Since(start))
	if got := m.Denials(id); got <= before {
		t.Fatalf("Denials = %d after a denied connection, want > %d", got, before)
	}
	const denialLog = "sandbox network access denied"
	for deadline := time.Now().Add(5 * time.Second); !logs.has(denialLog) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if !logs.has(denialLog) {
		t.Fatalf("no %q log line within 5s", denialLog)
	}
}

func TestAllowListByName(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())
	_, path := setup(t, m, sandboxNetwork([]string{"allowed.test", "*.wild.test"}, nil))

	// Not resolved yet: the address is not allowed.
	mustBeRejected(t, path, netip.AddrPortFrom(n.serverIP, 80))
	mustResolve(t, path, m.BridgeIP(), "allowed.test", n.serverIP)
	mustReach(t, path, n.serverIP)

	mustNotResolve(t, path, m.BridgeIP(), "denied.test")
	mustNotResolve(t, path, m.BridgeIP(), "wild.test") // the wildcard excludes the apex
	mustBeRejected(t, path, netip.AddrPortFrom(n.otherIP, 80))

	mustResolve(t, path, m.BridgeIP(), "www.wild.test", n.otherIP)
	mustReach(t, path, n.otherIP)

	// The same over TCP (forwarded to the upstream over TCP).
	if rc, answers, err := resolveTCP(path, m.BridgeIP(), "allowed.test"); err != nil || rc != dnsmessage.RCodeSuccess || answers != 1 {
		t.Fatalf("TCP query for an allowed name: rcode %v, %d answers, %v", rc, answers, err)
	}
	if rc, _, err := resolveTCP(path, m.BridgeIP(), "denied.test"); err != nil || rc != dnsmessage.RCodeNameError {
		t.Fatalf("TCP query for a denied name: rcode %v, %v", rc, err)
	}
}

func TestAllowListByCIDR(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())
	_, path := setup(t, m, sandboxNetwork([]string{n.serverIP.String()}, nil))
	mustReach(t, path, n.serverIP)
	mustBeRejected(t, path, netip.AddrPortFrom(n.otherIP, 80))
	mustNotResolve(t, path, m.BridgeIP(), "allowed.test") // no names allowed

	// DenyOut wins over a broader AllowOut.
	_, path2 := setup(t, m, sandboxNetwork([]string{"198.18.0.0/15"}, []string{n.otherIP.String()}))
	mustReach(t, path2, n.serverIP)
	mustBeRejected(t, path2, netip.AddrPortFrom(n.otherIP, 80))
}

func TestPrivateRangesBlocked(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())
	// Even an explicit per-sandbox allow entry cannot open private ranges.
	_, path := setup(t, m, sandboxNetwork([]string{"0.0.0.0/0", "rebind.test", "metadata.test"}, nil))
	mustReach(t, path, n.serverIP)
	for _, a := range testPrivate {
		start := time.Now()
		mustBeRejected(t, path, netip.AddrPortFrom(netip.MustParseAddr(a), 80))
		t.Logf("%s rejected after %v", a, time.Since(start))
	}
	// DNS rebinding: an allowed name pointing at a private address.
	mustResolve(t, path, m.BridgeIP(), "rebind.test", netip.MustParseAddr("10.123.45.1"))
	mustBeRejected(t, path, netip.MustParseAddrPort("10.123.45.1:80"))
	mustResolve(t, path, m.BridgeIP(), "metadata.test", netip.MustParseAddr("169.254.169.254"))
	mustBeRejected(t, path, netip.MustParseAddrPort("169.254.169.254:80"))
}

func TestOperatorAllowPrivate(t *testing.T) {
	n := newTestNet(t)
	cfg := n.config()
	cfg.AllowPrivate = []netip.Prefix{netip.MustParsePrefix("10.123.45.0/24")}
	m := n.newManager(cfg)
	_, path := setup(t, m, sandboxNetwork(nil, nil))
	mustReach(t, path, netip.MustParseAddr("10.123.45.1"))
	mustBeRejected(t, path, netip.MustParseAddrPort("169.254.169.254:80"))
}

// hostAddrs returns the host's IPv4 addresses outside loopback.
func hostAddrs(t *testing.T) []netip.Addr {
	t.Helper()
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			out = append(out, p.Addr())
		}
	}
	return out
}

func TestHostUnreachable(t *testing.T) {
	n := newTestNet(t)
	cfg := n.config()
	open, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close() })
	go acceptAndClose(open)
	openPort := uint16(open.Addr().(*net.TCPAddr).Port)
	cfg.AllowHostPorts = []uint16{openPort}
	m := n.newManager(cfg)

	closed, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closed.Close() })
	go acceptAndClose(closed)
	onBridge, err := net.Listen("tcp4", netip.AddrPortFrom(m.BridgeIP(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { onBridge.Close() })
	go acceptAndClose(onBridge)

	_, path := setup(t, m, sandboxNetwork(nil, nil))
	closedPort := uint16(closed.Addr().(*net.TCPAddr).Port)
	for _, a := range hostAddrs(t) {
		mustBeRejected(t, path, netip.AddrPortFrom(a, closedPort))
	}
	mustBeRejected(t, path, netip.MustParseAddrPort(onBridge.Addr().String()))
	// The operator's exception works, DNS on the bridge works.
	c, err := dialFrom(path, "tcp4", netip.AddrPortFrom(m.BridgeIP(), openPort).String())
	if err != nil {
		t.Fatalf("allowed host port: %v", err)
	}
	c.Close()
	mustResolve(t, path, m.BridgeIP(), "allowed.test", n.serverIP)
}

func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func TestPolicyUpdateOnLiveSandbox(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())
	id, path := setup(t, m, sandboxNetwork(nil, nil))
	mustReach(t, path, n.serverIP)
	mustReach(t, path, n.otherIP)

	// The hook (the broker's) asks Permit and Source, as the broker does
	// for its own connections: it runs outside the manager's locks.
	var hooked []sandbox.ID
	m.SetPolicyHook(func(id sandbox.ID, _ sandbox.Network) {
		_, _ = m.Source(n.serverIP)
		_ = m.Permit(n.serverIP, n.otherIP, "")
		hooked = append(hooked, id)
	})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- m.UpdatePolicy(ctx, id, sandboxNetwork(nil, []string{n.serverIP.String()})) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("UpdatePolicy never returned: its hook deadlocked on the manager's locks")
	}
	if len(hooked) != 1 || hooked[0] != id {
		t.Fatalf("the policy hook was told %v", hooked)
	}
	mustBeRejected(t, path, netip.AddrPortFrom(n.serverIP, 80))
	mustReach(t, path, n.otherIP)

	if err := m.UpdatePolicy(ctx, id, sandboxNetwork([]string{"allowed.test"}, nil)); err != nil {
		t.Fatal(err)
	}
	mustBeRejected(t, path, netip.AddrPortFrom(n.otherIP, 80))
	mustResolve(t, path, m.BridgeIP(), "allowed.test", n.serverIP)
	mustReach(t, path, n.serverIP)

	// Back to open: everything public again.
	if err := m.UpdatePolicy(ctx, id, sandboxNetwork(nil, nil)); err != nil {
		t.Fatal(err)
	}
	mustReach(t, path, n.otherIP)
	if err := m.UpdatePolicy(ctx, id, sandboxNetwork([]string{"bad entry!"}, nil)); err == nil {
		t.Fatal("UpdatePolicy accepted an invalid entry")
	}
}

func TestSandboxesIsolated(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())
	idA, pathA := setup(t, m, sandboxNetwork(nil, nil))
	idB, pathB := setup(t, m, sandboxNetwork(nil, nil))
	addrA, _ := m.Addr(idA)
	addrB, _ := m.Addr(idB)
	if addrA == addrB {
		t.Fatalf("two sandboxes share address %s", addrA)
	}
	lB := listenIn(t, pathB, "tcp4", "0.0.0.0:8000")
	go acceptAndClose(lB)
	lA := listenIn(t, pathA, "tcp4", "0.0.0.0:8000")
	go acceptAndClose(lA)
	mustBeRejected(t, pathA, netip.AddrPortFrom(addrB, 8000))
	mustBeRejected(t, pathB, netip.AddrPortFrom(addrA, 8000))
	// Each one still reaches its own service and the internet.
	c, err := dialFrom(pathB, "tcp4", "127.0.0.1:8000")
	if err != nil {
		t.Fatalf("own service: %v", err)
	}
	c.Close()
	mustReach(t, pathA, n.serverIP)
}

func TestConnectionLimit(t *testing.T) {
	n := newTestNet(t)
	cfg := n.config()
	cfg.MaxConns = 2
	m := n.newManager(cfg)
	_, path := setup(t, m, sandboxNetwork(nil, nil))
	target := netip.AddrPortFrom(n.serverIP, 80).String()
	for i := range 2 {
		c, err := dialFrom(path, "tcp4", target)
		if err != nil {
			t.Fatalf("connection %d within the limit: %v", i+1, err)
		}
		t.Cleanup(func() { c.Close() })
	}
	mustBeRejected(t, path, netip.AddrPortFrom(n.serverIP, 80))
}
