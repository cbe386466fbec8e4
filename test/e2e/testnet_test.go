package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// testInternet is this test's own "internet": a network namespace holding a
// web server and a DNS server on non-private addresses, wired to the host by
// a veth pair. Nothing a test does leaves the machine. Like a real uplink,
// the veth is a LAN directly connected to the host (198.19.77.0/24, which
// sandboxes may not reach) and the namespace is its gateway to the
// internet addresses (198.18.77.0/24), which are routed via it.
// The test LAN: the host's address on it, and the test internet's
// gateway (which also serves HTTP).
const (
	testLANHost    = "198.19.77.2"
	testLANGateway = "198.19.77.1"
)

type testInternet struct {
	ns      string // network namespace name (ip netns)
	hostIf  string
	addr    string // the web and DNS server: 198.18.x.1
	other   string // a second address on the test host, for deny tests
	records map[string]string

	qmu     sync.Mutex
	queried []string // every name asked of the DNS server, in order
}

// queries returns the names asked of the test internet's DNS server so far.
func (n *testInternet) queries() []string {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	return append([]string(nil), n.queried...)
}

// newTestInternet builds the namespace and starts its servers; everything is
// removed at cleanup.
func newTestInternet(t *testing.T, records map[string]string) *testInternet {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	suffix := string(sandbox.NewID())[:6]
	n := &testInternet{ns: "abxnet-" + suffix, hostIf: "abxh" + suffix, addr: "198.18.77.1", other: "198.18.77.3", records: records}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", n.ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", n.hostIf).Run()
		exec.Command("ip", "netns", "del", n.ns).Run()
	})
	run("link", "add", n.hostIf, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
	run("addr", "add", testLANHost+"/24", "dev", n.hostIf)
	run("link", "set", n.hostIf, "up")
	run("-n", n.ns, "addr", "add", testLANGateway+"/24", "dev", "eth0")
	run("-n", n.ns, "addr", "add", n.addr+"/32", "dev", "lo")
	run("-n", n.ns, "addr", "add", n.other+"/32", "dev", "lo")
	run("-n", n.ns, "link", "set", "eth0", "up")
	run("-n", n.ns, "link", "set", "lo", "up")
	run("-n", n.ns, "route", "add", "default", "via", testLANHost)
	run("route", "add", "198.18.77.0/24", "via", testLANGateway, "dev", n.hostIf)

	web := n.listen(t, "tcp", n.addr+":80")
	web2 := n.listen(t, "tcp", n.other+":80")
	web3 := n.listen(t, "tcp", testLANGateway+":80")
	for _, l := range []net.Listener{web, web2, web3} {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from the test internet (%s)\n", r.Host)
		})}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
	dns := n.listenPacket(t, n.addr+":53")
	go n.serveDNS(dns)
	t.Cleanup(func() { dns.Close() })
	return n
}

// inNetns runs fn on a thread switched into the test namespace. Sockets
// created there stay in that namespace after the thread switches back.
func (n *testInternet) inNetns(t *testing.T, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: if switching back failed, the thread must die
		// rather than run other goroutines in the wrong namespace.
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + n.ns)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func (n *testInternet) listen(t *testing.T, network, addr string) net.Listener {
	var l net.Listener
	n.inNetns(t, func() (err error) { l, err = net.Listen(network, addr); return })
	t.Cleanup(func() { l.Close() })
	return l
}

func (n *testInternet) listenPacket(t *testing.T, addr string) net.PacketConn {
	var c net.PacketConn
	n.inNetns(t, func() (err error) { c, err = net.ListenPacket("udp", addr); return })
	return c
}

// serveDNS answers A queries from n.records, NXDOMAIN otherwise.
func (n *testInternet) serveDNS(c net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		nr, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		hdr, err := p.Start(buf[:nr])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
		n.qmu.Lock()
		if len(n.queried) < 10000 {
			n.queried = append(n.queried, name)
		}
		n.qmu.Unlock()
		ip, ok := n.records[name]
		resp := dnsmessage.Message{Header: dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true},
			Questions: []dnsmessage.Question{q}}
		switch {
		case !ok:
			resp.Header.RCode = dnsmessage.RCodeNameError
		case q.Type == dnsmessage.TypeA:
			a := net.ParseIP(ip).To4()
			resp.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
				Body:   &dnsmessage.AResource{A: [4]byte{a[0], a[1], a[2], a[3]}},
			}}
		}
		out, err := resp.Pack()
		if err == nil {
			c.WriteTo(out, from)
		}
	}
}

// fetchInSandbox tries an HTTP GET of url from inside a sandbox and returns
// "OK <body>" or "ERR <reason>", bounded to a few seconds.
func fetchInSandbox(t *testing.T, d *daemon, key, id, url string) string {
	t.Helper()
	script := fmt.Sprintf(`import urllib.request, sys
try:
    print("OK", urllib.request.urlopen(%q, timeout=4).read().decode().strip())
except Exception as e:
    print("ERR", type(e).__name__, e)`, url)
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key,
		map[string]any{"cmd": []string{"python3", "-c", script}, "timeout": 20})
	if status != 200 {
		t.Fatalf("exec: %d %s", status, data)
	}
	return strings.TrimSpace(mustJSON(t, data)["stdout"].(string))
}

func waitCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
