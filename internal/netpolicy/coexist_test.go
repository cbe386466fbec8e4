package netpolicy

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/dns/dnsmessage"
)

// defaultsConfig is the test net's configuration with the bridge, subnet and
// namespace directory left to their defaults, as a daemon started without
// NETWORK_BRIDGE and NETWORK_SUBNET has them.
func (n *testNet) defaultsConfig(stateDir string, log *slog.Logger) Config {
	cfg := n.config()
	cfg.Bridge, cfg.Subnet, cfg.NetnsDir, cfg.StateDir = "", netip.Prefix{}, "", stateDir
	if log != nil {
		cfg.Logger = log
	}
	return cfg
}

// sandboxWorks checks that a sandbox of m resolves an allowed name through
// m's DNS filter, is refused a denied one, and reaches the test host.
func sandboxWorks(t *testing.T, n *testNet, m *Manager, path string) {
	t.Helper()
	rc, addrs, err := resolve(path, m.BridgeIP(), "allowed.test")
	if err != nil || rc != dnsmessage.RCodeSuccess || len(addrs) != 1 || addrs[0] != n.serverIP {
		dumpNetState(t, path)
		t.Fatalf("%s: resolve allowed.test through %s: %v %v %v", m.Bridge(), m.BridgeIP(), rc, addrs, err)
	}
	if rc, _, err := resolve(path, m.BridgeIP(), "denied.test"); err != nil || rc != dnsmessage.RCodeNameError {
		t.Fatalf("%s: denied.test: %v %v", m.Bridge(), rc, err)
	}
	mustReach(t, path, n.serverIP)
}

// assertNothingLeft checks that nothing of a manager's bridge is left on
// the host: link, nftables table, claim, namespace directory.
func assertNothingLeft(t *testing.T, bridge string) {
	t.Helper()
	if _, err := netlink.LinkByName(bridge); err == nil {
		t.Errorf("bridge %s left behind", bridge)
	}
	conn, _ := nftables.New()
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == bridge {
			t.Errorf("nftables table %s left behind", bridge)
		}
	}
	if _, err := os.Stat(claimPath(bridge)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("claim %s left behind (%v)", claimPath(bridge), err)
	}
	// The namespace directory is gone, or empty: an older daemon on the
	// same bridge name may have left it bind-mounted on itself, which a
	// manager uses as it is and does not unmount.
	if entries, err := os.ReadDir("/run/agentbox/netns/" + bridge); len(entries) > 0 {
		t.Errorf("namespaces left in /run/agentbox/netns/%s: %v (%v)", bridge, entries, err)
	}
}

// Two managers with default settings on one host (two daemons with their
// own data directories) pick different bridges and subnets, both give their
// sandboxes DNS and egress, refuse each other's bridge and subnet when
// those are configured explicitly, keep theirs across a restart (and
// another manager starting meanwhile does not take it), take over what a
// manager whose data dir was deleted left, and leave nothing behind.
func TestTwoManagersWithDefaults(t *testing.T) {
	n := newTestNet(t)
	ctx := context.Background()
	logA := newLogCapture(t)
	dirA, dirB := t.TempDir(), t.TempDir()

	var bridges []string
	managers := map[*Manager]bool{} // open ones
	start := func(cfg Config) *Manager {
		t.Helper()
		m, err := New(ctx, cfg)
		if err != nil {
			t.Fatalf("New with defaults: %v", err)
		}
		managers[m] = true
		bridges = append(bridges, m.Bridge())
		t.Logf("picked %s %s (%s; skipped %q)", m.Bridge(), m.Subnet(), m.picked.how, m.picked.skipped)
		return m
	}
	closeAll := func() {
		for m := range managers {
			if err := m.Close(true); err != nil {
				t.Errorf("Close(true) %s: %v", m.Bridge(), err)
			}
			delete(managers, m)
		}
	}
	t.Cleanup(func() {
		closeAll()
		for _, b := range bridges {
			assertNothingLeft(t, b)
		}
	})

	a := start(n.defaultsConfig(dirA, slog.New(logA)))
	b := start(n.defaultsConfig(dirB, nil))
	if a.Bridge() == b.Bridge() || a.Subnet().Overlaps(b.Subnet()) {
		t.Fatalf("both picked %s %s / %s %s", a.Bridge(), a.Subnet(), b.Bridge(), b.Subnet())
	}
	if !strings.HasPrefix(a.Bridge(), "agentbox") || a.picked.how != "first free" || !logA.has("sandbox network ready") {
		t.Fatalf("first start: %s (%s)", a.Bridge(), a.picked.how)
	}
	n.routeSandboxes(a.Subnet(), a.Bridge())
	n.routeSandboxes(b.Subnet(), b.Bridge())

	policy := sandboxNetwork([]string{"allowed.test"}, nil)
	idA, idB := sandbox.NewID(), sandbox.NewID()
	pathA, _, err := a.Setup(ctx, idA, policy)
	if err != nil {
		t.Fatal(err)
	}
	pathB, _, err := b.Setup(ctx, idB, policy)
	if err != nil {
		t.Fatal(err)
	}
	sandboxWorks(t, n, a, pathA)
	sandboxWorks(t, n, b, pathB)

	// Configured explicitly, the other's bridge or subnet is refused, and
	// the refusal creates nothing.
	cfg := n.defaultsConfig(t.TempDir(), nil)
	cfg.Bridge = a.Bridge()
	if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "NETWORK_BRIDGE="+a.Bridge()+" is taken") ||
		!strings.Contains(err.Error(), "running agentbox daemon with network state "+dirA) {
		t.Fatalf("New on a running manager's bridge: %v", err)
	}
	cfg = n.defaultsConfig(t.TempDir(), nil)
	cfg.Bridge, cfg.Subnet = "abtx"+n.id, b.Subnet()
	if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "NETWORK_SUBNET="+b.Subnet().String()+" is taken") {
		t.Fatalf("New on a running manager's subnet: %v", err)
	}
	assertNothingLeft(t, "abtx"+n.id)
	// Nor can two managers share one state directory.
	if _, err := New(ctx, n.defaultsConfig(dirA, nil)); err == nil || !strings.Contains(err.Error(), "in use by another running agentbox daemon") {
		t.Fatalf("New on a running manager's state directory: %v", err)
	}

	// A restart of a (its sandbox kept): while it is down, another manager
	// starting with defaults does not take its bridge; a gets it back and
	// reattaches its sandbox.
	if err := a.Close(false); err != nil {
		t.Fatal(err)
	}
	delete(managers, a)
	c := start(n.defaultsConfig(t.TempDir(), nil))
	if c.Bridge() == a.Bridge() || c.Bridge() == b.Bridge() || c.Subnet().Overlaps(a.Subnet()) || c.Subnet().Overlaps(b.Subnet()) {
		t.Fatalf("a manager started while %s was down picked %s %s", a.Bridge(), c.Bridge(), c.Subnet())
	}
	a2 := start(n.defaultsConfig(dirA, nil))
	if a2.Bridge() != a.Bridge() || a2.Subnet() != a.Subnet() || a2.picked.how != "kept from the last start" {
		t.Fatalf("restart picked %s %s (%s), want %s %s", a2.Bridge(), a2.Subnet(), a2.picked.how, a.Bridge(), a.Subnet())
	}
	if err := a2.Reconcile(ctx, []sandbox.ID{idA}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a2.Addr(idA); !a2.Subnet().Contains(got) {
		t.Fatalf("sandbox address after restart: %s", got)
	}
	sandboxWorks(t, n, a2, pathA)
	sandboxWorks(t, n, b, pathB)

	// A manager stopped with its sandbox kept (AUTO_CLEANUP=false) whose
	// data dir is then deleted leaves its bridge behind for good; the next
	// manager configured with (or picking) that name takes it over, veths
	// and all.
	dirD := t.TempDir()
	d := start(n.defaultsConfig(dirD, nil))
	idD := sandbox.NewID()
	if _, _, err := d.Setup(ctx, idD, policy); err != nil {
		t.Fatal(err)
	}
	addrD, _ := d.Addr(idD)
	if err := d.Close(false); err != nil {
		t.Fatal(err)
	}
	delete(managers, d)
	if err := os.RemoveAll(dirD); err != nil {
		t.Fatal(err)
	}
	cfg = n.defaultsConfig(t.TempDir(), nil)
	cfg.Bridge = d.Bridge()
	e := start(cfg)
	if _, err := netlink.LinkByName(vethName(addrD)); err == nil {
		t.Errorf("veth of the left-over sandbox %s still there", addrD)
	}
	if e.Subnet().Overlaps(a2.Subnet()) || e.Subnet().Overlaps(b.Subnet()) || e.Subnet().Overlaps(c.Subnet()) {
		t.Fatalf("the reclaiming manager picked %s", e.Subnet())
	}
	n.routeSandboxes(e.Subnet(), e.Bridge())
	idE := sandbox.NewID()
	pathE, _, err := e.Setup(ctx, idE, policy)
	if err != nil {
		t.Fatal(err)
	}
	sandboxWorks(t, n, e, pathE)
	if err := e.Teardown(ctx, idE); err != nil {
		t.Fatal(err)
	}

	// A clean shutdown removes each manager's own things only: b keeps
	// working while the others go.
	// Stopped without cleanup but with no sandbox network to keep, a
	// manager leaves nothing either.
	if err := c.Close(false); err != nil {
		t.Fatal(err)
	}
	delete(managers, c)
	assertNothingLeft(t, c.Bridge())
	for _, m := range []*Manager{a2, e} {
		if err := m.Close(true); err != nil {
			t.Fatal(err)
		}
		delete(managers, m)
		assertNothingLeft(t, m.Bridge())
	}
	if _, err := netlink.LinkByName(b.Bridge()); err != nil {
		t.Fatalf("closing the others removed %s: %v", b.Bridge(), err)
	}
	sandboxWorks(t, n, b, pathB)
	if err := b.Teardown(ctx, idB); err != nil {
		t.Fatal(err)
	}
}
