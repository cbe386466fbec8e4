package netpolicy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"
)

// assertGone checks that nothing of the sandbox at addr is left: no veth,
// no namespace mount or file, no nftables object or map element.
func assertGone(t *testing.T, m *Manager, id sandbox.ID, addr netip.Addr) {
	t.Helper()
	if _, err := netlink.LinkByName(vethName(addr)); err == nil {
		t.Errorf("veth %s of %s still exists", vethName(addr), id)
	}
	if _, err := os.Stat(m.NetnsPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns path of %s still exists (stat: %v)", id, err)
	}
	if mountedAt(t, m.NetnsPath(id)) {
		t.Errorf("netns of %s still mounted", id)
	}
	conn, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	inv, err := m.fw.inventory(conn)
	if err != nil {
		t.Fatal(err)
	}
	if inv.addrs[addr] {
		t.Errorf("nftables objects of %s (%s) still exist: %v", id, addr, inv.present)
	}
}

func mountedAt(t *testing.T, path string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	return false
}

func TestTeardownAndReconcileLeaveNothing(t *testing.T) {
	n := newTestNet(t)
	cfg := n.config()
	ctx := context.Background()
	m1, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			m1.Close(true)
		}
	})
	ids := map[string]sandbox.ID{}
	addrs := map[string]netip.Addr{}
	for _, k := range []string{"a", "b", "c"} {
		ids[k] = sandbox.NewID()
		if _, _, err := m1.Setup(ctx, ids[k], sandboxNetwork([]string{"allowed.test"}, nil)); err != nil {
			t.Fatal(err)
		}
		addrs[k], _ = m1.Addr(ids[k])
	}
	mustResolve(t, m1.NetnsPath(ids["b"]), m1.BridgeIP(), "allowed.test", n.serverIP)

	if err := m1.Teardown(ctx, ids["a"]); err != nil {
		t.Fatal(err)
	}
	assertGone(t, m1, ids["a"], addrs["a"])
	if err := m1.Teardown(ctx, ids["a"]); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}

	// The daemon stops (a crash leaves the same kernel state behind).
	if err := m1.Close(false); err != nil {
		t.Fatal(err)
	}
	closed = true
	m2 := n.newManager(cfg)
	for _, k := range []string{"b", "c"} {
		if got, ok := m2.Addr(ids[k]); !ok || got != addrs[k] {
			t.Fatalf("after restart %s has address %v, want %s", k, got, addrs[k])
		}
	}
	// Learned addresses survive the restart's table rebuild.
	mustReach(t, m2.NetnsPath(ids["b"]), n.serverIP)

	// Orphans nobody recorded: a veth, a namespace mount, firewall objects.
	orphan := netip.MustParseAddr(n.subnet.Addr().String()).Next().Next().Next().Next().Next().Next()
	orphanID := sandbox.ID("orphan")
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: vethName(orphan)}, PeerName: "abtorphan"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteLink(vethName(orphan)) })
	if err := createNetns(m2.NetnsPath(orphanID)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNetns(m2.NetnsPath(orphanID)) })
	conn, _ := nftables.New()
	if err := m2.fw.addSandbox(conn, orphan, policy{open: true}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}

	if err := m2.Reconcile(ctx, []sandbox.ID{ids["b"]}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	assertGone(t, m2, ids["c"], addrs["c"])
	assertGone(t, m2, orphanID, orphan)
	mustReach(t, m2.NetnsPath(ids["b"]), n.serverIP)

	// New allocations never collide with the survivor.
	idD := sandbox.NewID()
	if _, _, err := m2.Setup(ctx, idD, sandboxNetwork(nil, nil)); err != nil {
		t.Fatal(err)
	}
	addrD, _ := m2.Addr(idD)
	if addrD == addrs["b"] {
		t.Fatalf("new sandbox got the live sandbox's address %s", addrD)
	}
	for _, id := range []sandbox.ID{ids["b"], idD} {
		addr, _ := m2.Addr(id)
		if err := m2.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
		assertGone(t, m2, id, addr)
	}
}

func TestCloseRemovesGlobalState(t *testing.T) {
	n := newTestNet(t)
	cfg := n.config()
	m, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := sandbox.NewID()
	if _, _, err := m.Setup(context.Background(), id, sandboxNetwork(nil, nil)); err != nil {
		m.Close(true)
		t.Fatal(err)
	}
	addr, _ := m.Addr(id)
	if err := m.Close(true); err != nil {
		t.Fatal(err)
	}
	assertNoGlobalState(t, cfg)
	if _, err := netlink.LinkByName(vethName(addr)); err == nil {
		t.Errorf("veth left behind")
	}
	if mountedAt(t, cfg.NetnsDir) {
		t.Errorf("netns dir still mounted")
	}
	if _, err := os.Stat(cfg.NetnsDir); !os.IsNotExist(err) {
		t.Errorf("netns dir %s left behind: %v", cfg.NetnsDir, err)
	}
}

func assertNoGlobalState(t *testing.T, cfg Config) {
	t.Helper()
	if _, err := netlink.LinkByName(cfg.Bridge); err == nil {
		t.Errorf("bridge %s left behind", cfg.Bridge)
	}
	conn, _ := nftables.New()
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == cfg.Bridge {
			t.Errorf("nftables table %s left behind", cfg.Bridge)
		}
	}
}

// dockerLikeFilter creates what Docker's iptables-nft leaves in the kernel:
// table ip filter whose FORWARD chain drops by default and first jumps to
// DOCKER-USER. If Docker's own table exists it is used as is.
func dockerLikeFilter(t *testing.T) (*nftables.Table, *nftables.Chain) {
	t.Helper()
	conn, _ := nftables.New()
	table := &nftables.Table{Name: dockerTable, Family: nftables.TableFamilyIPv4}
	if ch, err := conn.ListChain(table, dockerChain); err == nil {
		t.Log("using the existing DOCKER-USER chain")
		// Docker sets FORWARD's policy to DROP when it turns forwarding on
		// itself; on a host where forwarding was already on it leaves ACCEPT.
		// Test against the strict case.
		out, err := exec.Command("iptables", "-S", "FORWARD").Output()
		if err != nil {
			t.Skipf("existing Docker table but no iptables to set its policy: %v", err)
		}
		if strings.Contains(string(out), "-P FORWARD ACCEPT") {
			if err := exec.Command("iptables", "-P", "FORWARD", "DROP").Run(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { exec.Command("iptables", "-P", "FORWARD", "ACCEPT").Run() })
		}
		return table, ch
	}
	tables, _ := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	for _, tb := range tables {
		if tb.Name == dockerTable {
			t.Skip("table ip filter exists without DOCKER-USER; not touching it")
		}
	}
	conn.AddTable(table)
	drop := nftables.ChainPolicyDrop
	fwd := conn.AddChain(&nftables.Chain{Table: table, Name: "FORWARD", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	user := conn.AddChain(&nftables.Chain{Table: table, Name: dockerChain})
	conn.AddRule(&nftables.Rule{Table: table, Chain: fwd, Exprs: one(jumpChain(dockerChain))})
	if err := conn.Flush(); err != nil {
		t.Fatalf("create docker-like filter table: %v", err)
	}
	t.Cleanup(func() {
		c, _ := nftables.New()
		c.DelTable(table)
		if err := c.Flush(); err != nil {
			t.Errorf("remove docker-like filter table: %v", err)
		}
	})
	return table, user
}

func countOurDockerRules(t *testing.T, table *nftables.Table, chain *nftables.Chain, comment string) int {
	t.Helper()
	conn, _ := nftables.New()
	rules, err := conn.GetRules(table, chain)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules {
		if c, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && c == comment {
			n++
		}
	}
	return n
}

func TestDockerForwardDropCoexistence(t *testing.T) {
	n := newTestNet(t)
	table, user := dockerLikeFilter(t) // before New, as on a host with Docker
	cfg := n.config()
	// The poller re-installs missing DOCKER-USER rules; keep it out of the
	// part of the test that removes them on purpose.
	cfg.DenialLogInterval = time.Hour
	m, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			m.Close(true)
		}
	})
	_, path := setup(t, m, sandboxNetwork(nil, nil))
	mustReach(t, path, n.serverIP)
	if got := countOurDockerRules(t, table, user, m.fw.dockerComment()); got != 2 {
		t.Fatalf("%d agentbox rules in DOCKER-USER, want 2", got)
	}

	// Without our rules Docker's policy drops sandbox traffic: this proves
	// the fake Docker table really bites.
	if _, err := m.fw.syncDockerUser(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	c, err := DialInNetns(ctx, path, "tcp4", netip.AddrPortFrom(n.serverIP, 80).String())
	cancel()
	if err == nil {
		c.Close()
		t.Fatal("forwarding worked with Docker's DROP policy and no DOCKER-USER rules")
	}
	if _, err := m.fw.syncDockerUser(true); err != nil {
		t.Fatal(err)
	}
	mustReach(t, path, n.serverIP)

	if err := m.Close(true); err != nil {
		t.Fatal(err)
	}
	closed = true
	if got := countOurDockerRules(t, table, user, m.fw.dockerComment()); got != 0 {
		t.Fatalf("%d agentbox rules left in DOCKER-USER after Close", got)
	}
}

func TestDialInNetns(t *testing.T) {
	requireRoot(t)
	path := t.TempDir() + "/ns"
	if err := createNetns(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNetns(path) })
	// A fresh namespace, like a "none" sandbox: loopback only, brought up.
	if err := inNetns(path, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	l := listenIn(t, path, "tcp4", "127.0.0.1:0")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	// Not reachable from the host's own loopback...
	if c, err := net.DialTimeout("tcp4", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("listener inside the namespace reachable from the host namespace")
	}
	echo := func(nsPath, addr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		c, err := DialInNetns(ctx, nsPath, "tcp", addr)
		if err != nil {
			t.Fatalf("DialInNetns(%s, %s): %v", nsPath, addr, err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(dialTimeout))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo: %q %v", buf, err)
		}
	}
	// ... but through DialInNetns, by mount path and "localhost".
	echo(path, net.JoinHostPort("127.0.0.1", itoa(port)))
	echo(path, net.JoinHostPort("localhost", itoa(port)))

	// By /proc/<pid>/ns/net of a process in the namespace, as the backend does.
	if nsenter, err := exec.LookPath("nsenter"); err == nil {
		cmd := exec.Command(nsenter, "--net="+path, "sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// nsenter execs sleep after setns; wait until it has.
		deadline := time.Now().Add(5 * time.Second)
		procNS := "/proc/" + itoa(cmd.Process.Pid) + "/ns/net"
		for time.Now().Before(deadline) {
			if sameFile(procNS, path) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		echo(procNS, net.JoinHostPort("127.0.0.1", itoa(port)))
	} else {
		t.Log("nsenter not installed: skipping the /proc/<pid>/ns/net case")
	}

	// The daemon's own threads stay in the host namespace.
	for range 20 {
		c, err := DialInNetns(context.Background(), path, "tcp", net.JoinHostPort("127.0.0.1", itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if c, err := net.DialTimeout("tcp4", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("a daemon thread was left in the sandbox namespace")
	}

	if _, err := DialInNetns(context.Background(), path, "tcp", "example.org:80"); err == nil {
		t.Fatal("DialInNetns resolved a name")
	}
	if _, err := DialInNetns(context.Background(), path, "tcp", "127.0.0.1:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("closed port: %v, want connection refused", err)
	}
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func itoa(i int) string { return strconv.Itoa(i) }
