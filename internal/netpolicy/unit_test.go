package netpolicy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"golang.org/x/net/dns/dnsmessage"
)

func TestParsePolicy(t *testing.T) {
	p, err := parsePolicy(sandbox.Network{
		AllowOut: []string{"203.0.113.0/24", "198.51.100.7", "Example.ORG.", "*.example.net"},
		DenyOut:  []string{"bad.example.net", "2001:db8::/32", "203.0.113.9"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.open {
		t.Fatal("policy with allow entries is open")
	}
	wantAllow := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.7/32")}
	if !slices.Equal(p.allowNets, wantAllow) {
		t.Fatalf("allowNets = %v, want %v", p.allowNets, wantAllow)
	}
	for name, want := range map[string]bool{
		"example.org": true, "EXAMPLE.org.": true, "www.example.org": false,
		"example.net": false, "a.example.net": true, "a.b.example.net": true,
		"bad.example.net": false, "x.bad.example.net": true, "other.test": false,
	} {
		if got := p.nameAllowed(name); got != want {
			t.Errorf("nameAllowed(%q) = %v, want %v", name, got, want)
		}
	}

	open, err := parsePolicy(sandbox.Network{DenyOut: []string{"*.ads.test"}})
	if err != nil || !open.open {
		t.Fatalf("deny-only policy: %+v %v", open, err)
	}
	if !open.nameAllowed("anything.test") || open.nameAllowed("x.ads.test") {
		t.Error("open policy name decisions wrong")
	}
	for _, bad := range []string{"", "not a name", "-x.test", "a..b", "2001:db8::1", "*.", "ex*mple.org"} {
		if _, err := parsePolicy(sandbox.Network{AllowOut: []string{bad}}); err == nil {
			t.Errorf("allow entry %q accepted", bad)
		} else if sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("allow entry %q: error class %v, want invalid", bad, sandbox.ClassOf(err))
		}
	}
}

func TestMergePrefixes(t *testing.T) {
	rs := mergePrefixes([]netip.Prefix{
		netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("11.0.0.0/8"), // adjacent: merged
		netip.MustParsePrefix("192.0.2.1/32"),
		netip.MustParsePrefix("255.255.255.255/32"),
	})
	want := []ipRange{
		{v4ToUint(netip.MustParseAddr("10.0.0.0")), v4ToUint(netip.MustParseAddr("11.255.255.255"))},
		{v4ToUint(netip.MustParseAddr("192.0.2.1")), v4ToUint(netip.MustParseAddr("192.0.2.1"))},
		{^uint32(0), ^uint32(0)},
	}
	if !slices.Equal(rs, want) {
		t.Fatalf("mergePrefixes = %v, want %v", rs, want)
	}
	els := intervalElements(rs)
	if len(els) != 5 { // the range ending at the top has no end marker
		t.Fatalf("%d interval elements, want 5", len(els))
	}
	if all := mergePrefixes([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}); len(all) != 1 || all[0].first != 0 || all[0].last != ^uint32(0) {
		t.Fatalf("0.0.0.0/0 = %v", all)
	}
}

func TestNames(t *testing.T) {
	a := netip.MustParseAddr("10.88.1.2")
	if got, ok := vethAddr(vethName(a)); !ok || got != a {
		t.Fatalf("vethAddr(vethName(%s)) = %v %v", a, got, ok)
	}
	if len(vethName(a)) > maxIfNameLen {
		t.Fatalf("veth name %q too long", vethName(a))
	}
	for _, name := range []string{allowSetName(a), denySetName(a), dnsSetName(a), counterName(a), rejectChainName(a), policyChainName(a)} {
		if got, ok := keyAddr(name); !ok || got != a {
			t.Errorf("keyAddr(%q) = %v %v", name, got, ok)
		}
	}
	for _, name := range []string{setPrivate, mapForward, chainForward, chainFromSandbox, "eth0", "abx1"} {
		if _, ok := keyAddr(name); ok {
			t.Errorf("keyAddr(%q) matched a global object", name)
		}
		if _, ok := vethAddr(name); ok {
			t.Errorf("vethAddr(%q) matched", name)
		}
	}
}

func TestStateAllocationPersists(t *testing.T) {
	dir := t.TempDir()
	subnet := netip.MustParsePrefix("10.9.0.0/29") // hosts .1-.6; .1 is the bridge
	st, err := loadState(dir, "b0", subnet)
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for i := range 5 {
		a, err := st.allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		st.Sandboxes[sandbox.ID("s"+string(rune('a'+i)))] = sandboxRecord{Addr: a}
		got = append(got, a)
	}
	if got[0] != netip.MustParseAddr("10.9.0.2") || got[4] != netip.MustParseAddr("10.9.0.6") {
		t.Fatalf("allocated %v", got)
	}
	if _, err := st.allocate(); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("full subnet: %v", err)
	}
	delete(st.Sandboxes, "sb")
	if err := st.save(dir); err != nil {
		t.Fatal(err)
	}
	st2, err := loadState(dir, "b0", subnet)
	if err != nil {
		t.Fatal(err)
	}
	if len(st2.Sandboxes) != 4 || st2.Sandboxes["sa"].Addr != got[0] {
		t.Fatalf("reloaded state: %+v", st2.Sandboxes)
	}
	if a, _ := st2.allocate(); a != got[1] {
		t.Fatalf("freed address not reused: got %s want %s", a, got[1])
	}
	// Another subnet: old allocations do not apply.
	st3, err := loadState(dir, "b0", netip.MustParsePrefix("10.10.0.0/24"))
	if err != nil || len(st3.Sandboxes) != 0 {
		t.Fatalf("state for another subnet: %+v %v", st3, err)
	}
}

func TestReadResolvConf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("# c\nsearch x\nnameserver 127.0.0.53\nnameserver 192.0.2.53\nnameserver bogus\noptions edns0\n"), 0o644)
	got, err := readResolvConf(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("127.0.0.53"), netip.MustParseAddr("192.0.2.53")}
	if !slices.Equal(got, want) {
		t.Fatalf("readResolvConf = %v, want %v", got, want)
	}
}

func TestRateLimiter(t *testing.T) {
	r := newRateLimiter(10) // burst 20
	a := netip.MustParseAddr("10.0.0.2")
	now := time.Unix(1000, 0)
	n := 0
	for range 100 {
		if r.allow(a, now) {
			n++
		}
	}
	if n != 20 {
		t.Fatalf("burst allowed %d, want 20", n)
	}
	if !r.allow(a, now.Add(200*time.Millisecond)) {
		t.Fatal("tokens not refilled")
	}
	if !r.allow(netip.MustParseAddr("10.0.0.3"), now) {
		t.Fatal("buckets are not per source")
	}
}

// fakeSource is a dnsPolicySource over a fixed map.
type fakeSource struct {
	mu      sync.Mutex
	p       map[netip.Addr]policy
	learned []learnedAddr
}

func (f *fakeSource) dnsPolicy(src netip.Addr) (policy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.p[src]
	return p, ok
}

func (f *fakeSource) learn(src netip.Addr, name string, addrs []learnedAddr) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.p[src]
	if !ok || !p.nameAllowed(name) {
		return false, nil
	}
	if p.learns() {
		f.learned = append(f.learned, addrs...)
	}
	return true, nil
}

func query4(name string, qtype dnsmessage.Type) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 4242, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qtype, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	return msg
}

func rcodeOf(t *testing.T, msg []byte) dnsmessage.RCode {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		t.Fatalf("parse answer: %v", err)
	}
	if h.ID != 4242 || !h.Response {
		t.Fatalf("answer header %+v", h)
	}
	return h.RCode
}

// TestDNSFilterDecisions runs the filter's decision and forwarding logic
// against an upstream on loopback (no root needed).
func TestDNSFilterDecisions(t *testing.T) {
	up, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	go serveTestDNS(up, map[string]netip.Addr{"ok.test.": netip.MustParseAddr("203.0.113.5")})

	sbAllow := netip.MustParseAddr("10.88.0.2")
	sbOpen := netip.MustParseAddr("10.88.0.3")
	allowList, _ := parsePolicy(sandbox.Network{AllowOut: []string{"ok.test", "missing.test"}})
	src := &fakeSource{p: map[netip.Addr]policy{sbAllow: allowList, sbOpen: {open: true}}}
	d := &dnsFilter{
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), src: src,
		upstream: []netip.AddrPort{netip.MustParseAddrPort(up.LocalAddr().String())},
		timeout:  2 * time.Second, limiter: newRateLimiter(5),
	}
	d.ctx, d.cancel = contextBackground()
	defer d.cancel()

	ask := func(from netip.Addr, name string, qt dnsmessage.Type) []byte {
		msg := query4(name, qt)
		resp, q, fwd := d.decide(from, msg)
		if fwd {
			resp = d.forward(from, msg, q, false)
		}
		return resp
	}
	if rc := rcodeOf(t, ask(sbAllow, "ok.test.", dnsmessage.TypeA)); rc != dnsmessage.RCodeSuccess {
		t.Fatalf("allowed name: %v", rc)
	}
	if len(src.learned) != 1 || src.learned[0].addr != netip.MustParseAddr("203.0.113.5") || src.learned[0].ttl != 300*time.Second {
		t.Fatalf("learned %+v", src.learned)
	}
	if rc := rcodeOf(t, ask(sbAllow, "other.test.", dnsmessage.TypeA)); rc != dnsmessage.RCodeNameError {
		t.Fatalf("name not on the list: %v, want NXDOMAIN", rc)
	}
	if rc := rcodeOf(t, ask(sbAllow, "missing.test.", dnsmessage.TypeA)); rc != dnsmessage.RCodeNameError {
		t.Fatalf("upstream NXDOMAIN passed through as %v", rc)
	}
	if rc := rcodeOf(t, ask(sbAllow, "ok.test.", dnsmessage.TypeAAAA)); rc != dnsmessage.RCodeSuccess {
		t.Fatalf("AAAA: %v, want empty NOERROR", rc)
	}
	learnedBefore := len(src.learned)
	if rc := rcodeOf(t, ask(sbOpen, "ok.test.", dnsmessage.TypeA)); rc != dnsmessage.RCodeSuccess {
		t.Fatalf("open policy: %v", rc)
	}
	if len(src.learned) != learnedBefore {
		t.Fatal("open policy learned addresses")
	}
	if rc := rcodeOf(t, ask(netip.MustParseAddr("10.88.0.99"), "ok.test.", dnsmessage.TypeA)); rc != dnsmessage.RCodeRefused {
		t.Fatalf("unknown source: %v, want REFUSED", rc)
	}
	if resp, _, _ := d.decide(sbOpen, []byte{1, 2, 3}); resp != nil {
		t.Fatal("answered garbage")
	}
	// The rate limit (burst 10) turns a flood into REFUSED.
	refused := 0
	for range 30 {
		resp, _, _ := d.decide(sbOpen, query4("other.", dnsmessage.TypeA))
		if resp != nil && rcodeOf(t, resp) == dnsmessage.RCodeRefused {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no query refused by the rate limit")
	}

	// An upstream that never answers: SERVFAIL within the timeout.
	dead, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	d.upstream = []netip.AddrPort{netip.MustParseAddrPort(dead.LocalAddr().String())}
	d.timeout = 200 * time.Millisecond
	d.limiter = newRateLimiter(100)
	if rc := rcodeOf(t, ask(sbAllow, "ok.test.", dnsmessage.TypeA)); rc != dnsmessage.RCodeServerFailure {
		t.Fatalf("dead upstream: %v, want SERVFAIL", rc)
	}
}

func contextBackground() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
