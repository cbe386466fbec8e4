package netpolicy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/google/nftables"
	"golang.org/x/net/dns/dnsmessage"
)

// The integration tests build their own "internet" on this machine: a test
// host in a network namespace, reached from the host over a veth, holding
// public-looking addresses from 198.18.0.0/15 (benchmarking range, not in
// the private block list) plus, on its loopback, private and metadata
// addresses. Like a real uplink, the veth is a LAN on a public-looking
// subnet (198.19.x.0/24, directly connected to the host) and the test host
// is also its gateway: the "internet" addresses (198.18.x.0/24) are routed
// via it, not connected. Policy routing sends everything the sandboxes
// emit to that test host, so even a broken rule never lets test traffic
// leave the VM.

// requireRoot skips tests that need the kernel features of a real host.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and nftables rules")
	}
	c, err := nftables.New()
	if err != nil {
		t.Skipf("nftables unavailable: %v", err)
	}
	if _, err := c.ListTables(); err != nil {
		t.Skipf("nftables unavailable: %v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2) to build test hosts")
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ipCmd runs `ip args...`, failing the test on error.
func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// ipCleanup registers `ip args...` as a cleanup, ignoring failure.
func ipCleanup(t testing.TB, args ...string) {
	t.Cleanup(func() { _ = exec.Command("ip", args...).Run() })
}

// testNet is one test's internet plus a Manager configured for it.
type testNet struct {
	t        testing.TB
	id       string
	nsName   string // test host namespace (under /run/netns)
	nsPath   string
	hostIf   string
	gwIP     netip.Addr // host end of the test host link (a host address)
	lanIP    netip.Addr // test host end of the link: the LAN neighbour and gateway
	serverIP netip.Addr // test host: HTTP on :80, DNS on :53
	otherIP  netip.Addr // test host too, used as a "denied" destination
	subnet   netip.Prefix
	bridge   string
	routes   int // routeSandboxes calls so far
}

// Private addresses living on the test host's loopback.
var testPrivate = []string{"10.123.45.1", "169.254.169.254", "172.16.5.5", "192.168.77.1", "100.64.1.1"}

func newTestNet(t testing.TB) *testNet {
	requireRoot(t)
	id := randHex(2)
	b, _ := strconv.ParseUint(id, 16, 16)
	n := &testNet{
		t: t, id: id, nsName: "abt-" + id, nsPath: "/run/netns/abt-" + id, hostIf: "abti" + id,
		gwIP:     netip.AddrFrom4([4]byte{198, 19, byte(b >> 8), 1}),
		lanIP:    netip.AddrFrom4([4]byte{198, 19, byte(b >> 8), 2}),
		serverIP: netip.AddrFrom4([4]byte{198, 18, byte(b >> 8), 2}),
		otherIP:  netip.AddrFrom4([4]byte{198, 18, byte(b >> 8), 3}),
		subnet:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200 + byte(b>>8)%50, byte(b), 0}), 24),
		bridge:   "abtb" + id,
	}
	ipCmd(t, "netns", "add", n.nsName)
	ipCleanup(t, "netns", "del", n.nsName)
	ipCmd(t, "link", "add", n.hostIf, "type", "veth", "peer", "name", "eth0", "netns", n.nsName)
	ipCleanup(t, "link", "del", n.hostIf)
	ipCmd(t, "addr", "add", n.gwIP.String()+"/24", "dev", n.hostIf)
	ipCmd(t, "link", "set", n.hostIf, "up")
	ipCmd(t, "-n", n.nsName, "link", "set", "lo", "up")
	ipCmd(t, "-n", n.nsName, "link", "set", "eth0", "up")
	ipCmd(t, "-n", n.nsName, "addr", "add", n.lanIP.String()+"/24", "dev", "eth0")
	ipCmd(t, "-n", n.nsName, "addr", "add", n.serverIP.String()+"/32", "dev", "lo")
	ipCmd(t, "-n", n.nsName, "addr", "add", n.otherIP.String()+"/32", "dev", "lo")
	// The host (its DNS filter asks serverIP) reaches the internet via
	// the gateway.
	internet := netip.PrefixFrom(n.serverIP, 24).Masked().String()
	ipCmd(t, "route", "add", internet, "via", n.lanIP.String(), "dev", n.hostIf)
	ipCleanup(t, "route", "del", internet, "via", n.lanIP.String(), "dev", n.hostIf)
	for _, a := range testPrivate {
		ipCmd(t, "-n", n.nsName, "addr", "add", a+"/32", "dev", "lo")
	}
	table := strconv.Itoa(10000 + int(b))
	ipCmd(t, "route", "add", "default", "via", n.lanIP.String(), "dev", n.hostIf, "table", table)
	ipCleanup(t, "route", "flush", "table", table)
	n.routeSandboxes(n.subnet, n.bridge)
	n.startServers()
	return n
}

// routeSandboxes sends everything the sandboxes of subnet on bridge send
// that is not for the host itself or the subnet to the test host. Called
// again for each further manager (a picked bridge and subnet are known
// only after New).
func (n *testNet) routeSandboxes(subnet netip.Prefix, bridge string) {
	t := n.t
	b, _ := strconv.ParseUint(n.id, 16, 16)
	table := strconv.Itoa(10000 + int(b))
	// Preferences below main's (32766); further calls use 1000-4999.
	base := 10000 + int(b)%10000
	if n.routes > 0 {
		base = 1000 + (int(b)%1000)*4 + 2*(n.routes-1)
	}
	n.routes++
	pref, pref2 := strconv.Itoa(base), strconv.Itoa(base+1)
	local := []string{"from", subnet.String(), "to", subnet.String(), "lookup", "main", "pref", pref}
	out := []string{"from", subnet.String(), "iif", bridge, "lookup", table, "pref", pref2}
	ipCmd(t, append([]string{"rule", "add"}, local...)...)
	ipCleanup(t, append([]string{"rule", "del"}, local...)...)
	ipCmd(t, append([]string{"rule", "add"}, out...)...)
	ipCleanup(t, append([]string{"rule", "del"}, out...)...)
}

// listenIn creates a listener inside the namespace at path.
func listenIn(t testing.TB, path, network, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	if err := inNetns(path, func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	}); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (n *testNet) startServers() {
	t := n.t
	l := listenIn(t, n.nsPath, "tcp4", "0.0.0.0:80")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
	mux.HandleFunc("GET /bulk", func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = io.CopyN(w, zeroReader{}, int64(size))
	})
	mux.HandleFunc("POST /bulk", func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, got)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })

	var pc net.PacketConn
	if err := inNetns(n.nsPath, func() (err error) {
		pc, err = net.ListenPacket("udp4", n.serverIP.String()+":53")
		return err
	}); err != nil {
		t.Fatalf("dns listen: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go serveTestDNS(pc, n.records())
	go serveTestDNSTCP(listenIn(t, n.nsPath, "tcp4", n.serverIP.String()+":53"), n.records())
}

// records are the test host's DNS zone.
func (n *testNet) records() map[string]netip.Addr {
	return map[string]netip.Addr{
		"allowed.test.":  n.serverIP,
		"denied.test.":   n.otherIP,
		"www.wild.test.": n.otherIP,
		"rebind.test.":   netip.MustParseAddr("10.123.45.1"),
		"metadata.test.": netip.MustParseAddr("169.254.169.254"),
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// serveTestDNS answers A queries from records, NXDOMAIN otherwise, until
// pc is closed.
func serveTestDNS(pc net.PacketConn, records map[string]netip.Addr) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if msg := answerTestDNS(buf[:n], records); msg != nil {
			_, _ = pc.WriteTo(msg, from)
		}
	}
}

// serveTestDNSTCP is serveTestDNS over TCP (one query per connection).
func serveTestDNSTCP(l net.Listener, records map[string]netip.Addr) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			q, err := readTCPMsg(c)
			if err != nil {
				return
			}
			if msg := answerTestDNS(q, records); msg != nil {
				_ = writeTCPMsg(c, msg)
			}
		}()
	}
}

func answerTestDNS(query []byte, records map[string]netip.Addr) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	a, ok := records[strings.ToLower(q.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	bld := dnsmessage.NewBuilder(nil, rh)
	_ = bld.StartQuestions()
	_ = bld.Question(q)
	if ok && q.Type == dnsmessage.TypeA {
		_ = bld.StartAnswers()
		_ = bld.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 300},
			dnsmessage.AResource{A: a.As4()})
	}
	msg, err := bld.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// config is a Manager configuration for this test net; adjust before newManager.
func (n *testNet) config() Config {
	return Config{
		Bridge:            n.bridge,
		Subnet:            n.subnet,
		Upstream:          []netip.AddrPort{netip.AddrPortFrom(n.serverIP, 53)},
		StateDir:          n.t.TempDir(),
		NetnsDir:          n.t.TempDir(),
		DenialLogInterval: 500 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(testLogWriter{n.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newManager starts a Manager and registers its full removal.
func (n *testNet) newManager(cfg Config) *Manager {
	n.t.Helper()
	m, err := New(context.Background(), cfg)
	if err != nil {
		n.t.Fatalf("New: %v", err)
	}
	n.t.Cleanup(func() {
		if err := m.Close(true); err != nil {
			n.t.Errorf("Close: %v", err)
		}
	})
	return m
}

// setup creates a sandbox network; its teardown is registered.
func setup(t testing.TB, m *Manager, nw sandbox.Network) (sandbox.ID, string) {
	t.Helper()
	id := sandbox.NewID()
	nw.Mode = sandbox.NetworkEgress
	path, ns, err := m.Setup(context.Background(), id, nw)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if len(ns) != 1 || ns[0] != m.BridgeIP().String() {
		t.Fatalf("nameservers = %v, want [%s]", ns, m.BridgeIP())
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), id) })
	return id, path
}

const dialTimeout = 3 * time.Second

// dialFrom connects from inside a sandbox namespace.
func dialFrom(path, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	return DialInNetns(ctx, path, network, addr)
}

// httpClient makes requests from inside a sandbox namespace.
func httpClient(path string) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return DialInNetns(ctx, path, network, addr)
			},
		},
	}
}

// get fetches http://addr/ from the sandbox and returns the body.
func get(path string, addr netip.Addr) (string, error) {
	resp, err := httpClient(path).Get("http://" + addr.String() + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// resolve asks the sandbox's nameserver (server) for name's A records from
// inside the sandbox.
func resolve(path string, server netip.Addr, name string) (dnsmessage.RCode, []netip.Addr, error) {
	c, err := dialFrom(path, "udp4", netip.AddrPortFrom(server, 53).String())
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	id := uint16(time.Now().UnixNano())
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	if _, err := c.Write(msg); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return 0, nil, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil {
		return 0, nil, err
	}
	if h.ID != id {
		return 0, nil, fmt.Errorf("answer id %d, want %d", h.ID, id)
	}
	_ = p.SkipAllQuestions()
	var addrs []netip.Addr
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			break
		}
		if rh.Type != dnsmessage.TypeA {
			_ = p.SkipAnswer()
			continue
		}
		a, err := p.AResource()
		if err != nil {
			break
		}
		addrs = append(addrs, netip.AddrFrom4(a.A))
	}
	return h.RCode, addrs, nil
}

func sandboxNetwork(allow, deny []string) sandbox.Network {
	return sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: allow, DenyOut: deny}
}

// dumpNetState logs what a failing network test may need to be understood,
// using the ip and nft commands when installed.
func dumpNetState(t testing.TB, sandboxPath string) {
	t.Helper()
	for _, c := range [][]string{
		{"nsenter", "--net=" + sandboxPath, "ip", "addr"},
		{"nsenter", "--net=" + sandboxPath, "ip", "route"},
		{"ip", "-br", "link"},
		{"ip", "rule"},
		{"nft", "list", "ruleset"},
	} {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		t.Logf("$ %s (%v)\n%s", strings.Join(c, " "), err, out)
	}
}

// resolveTCP is resolve over TCP; it returns the answer's code and A count.
func resolveTCP(path string, server netip.Addr, name string) (dnsmessage.RCode, int, error) {
	c, err := dialFrom(path, "tcp4", netip.AddrPortFrom(server, 53).String())
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	if err := writeTCPMsg(c, msg); err != nil {
		return 0, 0, err
	}
	resp, err := readTCPMsg(c)
	if err != nil {
		return 0, 0, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return 0, 0, err
	}
	_ = p.SkipAllQuestions()
	answers, _ := p.AllAnswers()
	return h.RCode, len(answers), nil
}

// logCapture is a slog handler that logs to the test and remembers
// messages.
type logCapture struct {
	slog.Handler
	mu   *sync.Mutex
	msgs *[]string
}

func newLogCapture(t testing.TB) logCapture {
	return logCapture{
		Handler: slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}),
		mu:      &sync.Mutex{}, msgs: &[]string{},
	}
}

func (c logCapture) Handle(ctx context.Context, r slog.Record) error {
	c.mu.Lock()
	*c.msgs = append(*c.msgs, r.Message)
	c.mu.Unlock()
	return c.Handler.Handle(ctx, r)
}

func (c logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	return logCapture{Handler: c.Handler.WithAttrs(as), mu: c.mu, msgs: c.msgs}
}

func (c logCapture) WithGroup(name string) slog.Handler {
	return logCapture{Handler: c.Handler.WithGroup(name), mu: c.mu, msgs: c.msgs}
}

func (c logCapture) has(msg string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(*c.msgs, msg)
}
