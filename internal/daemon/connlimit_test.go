package daemon

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// serve runs h behind the daemon's listener and body timeout.
func serve(t *testing.T, h http.Handler, idle time.Duration, total, perIP int) string {
	t.Helper()
	return servePeers(t, h, idle, total, perIP, 0, nil, func(*http.Request) (string, bool) { return "", false })
}

// servePeers is serve with other replicas' connections counted apart:
// isPeer names their addresses, peer authenticates their requests.
func servePeers(t *testing.T, h http.Handler, idle time.Duration, total, perIP, perPeer int, isPeer func(netip.Addr) bool, peer func(*http.Request) (string, bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: withPeerConns(peer, withBodyTimeout(h, idle)), ConnContext: connContext, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(newLimitListener(ln, total, perIP, perPeer, isPeer, slog.Default()))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// A body that stalls fails the read after the idle timeout, while one that
// trickles in slower than the timeout in total, but never stalls, is read
// whole, and the response after it may take longer than the timeout.
func TestSecurityBodyTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		time.Sleep(3 * idle) // a long answer must not be cut
		if r.Context().Err() != nil {
			return
		}
		fmt.Fprintf(w, "got %d", len(b))
	}), idle, 10, 10)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("stalled body: no answer: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "timeout") {
		t.Fatalf("stalled body: %s %s", resp.Status, body)
	}

	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
	for range 6 {
		time.Sleep(idle / 3)
		c2.Write([]byte("x"))
	}
	_ = c2.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil {
		t.Fatalf("trickled body: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(body) != "got 6" {
		t.Fatalf("trickled body: %s %s", resp.Status, body)
	}
}

// Connections over the per-address cap are closed at once while another
// address is still served; closing a connection frees its slot; the total
// cap applies across addresses.
func TestSecurityLimitListener(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}), time.Second, 3, 2)
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil // reset by a cap before the dial returned
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// get sends a request on c and reports whether it was answered.
	get := func(c net.Conn) bool {
		if c == nil {
			return false
		}
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	if !get(a1) || !get(a2) {
		t.Fatal("connections within the cap not served")
	}
	if get(dial("127.0.0.1")) {
		t.Fatal("third connection from one address served; the per-address cap is 2")
	}
	b1 := dial("127.0.0.2")
	if !get(b1) {
		t.Fatal("another address not served while the first is at its cap")
	}
	if get(dial("127.0.0.3")) {
		t.Fatal("fourth connection served; the total cap is 3")
	}
	a1.Close()
	var served bool
	for range 50 { // the server notices the close asynchronously
		if served = get(dial("127.0.0.1")); served {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !served {
		t.Fatal("closing a connection did not free its slot")
	}
}

func TestSecurityConnectionLimitDefaults(t *testing.T) {
	for _, c := range []struct {
		total, perIP int
		nofile       uint64
		wantTotal    int
		wantPerIP    int
	}{
		{0, 0, 1024, 512, 64},
		{0, 0, 1 << 20, maxAutoConnections, maxAutoConnections / 8},
		{0, 0, 20, minConnectionsPerIP, minConnectionsPerIP},
		{100, 0, 1 << 20, 100, minConnectionsPerIP},
		{100, 500, 1 << 20, 100, 100},
	} {
		total, perIP := connectionLimits(c.total, c.perIP, c.nofile)
		if total != c.wantTotal || perIP != c.wantPerIP {
			t.Errorf("connectionLimits(%d, %d, %d) = %d, %d; want %d, %d", c.total, c.perIP, c.nofile, total, perIP, c.wantTotal, c.wantPerIP)
		}
	}
}

// Connections of another replica are counted as that replica's, not as
// its address's, once a request on them authenticates (the forwarding
// header); the address of a live replica may have connections pending that
// proof beyond the per-address cap, and such a connection that does not
// give it is refused and closed. Here the per-address cap is 2, the
// replica's 3, and 127.0.0.1 is the replica r1's address.
func TestSecurityPeerConnections(t *testing.T) {
	const perIP, perPeer = 2, 3
	replica := netip.MustParseAddr("127.0.0.1")
	// The forwarding header stands for a valid HMAC; "forged" for any
	// other value (cluster.Forwarder.Peer is tested in its package).
	peer := func(r *http.Request) (string, bool) {
		if r.Header.Get("X-Test-Forwarded") == "r1" {
			return "r1", true
		}
		return "", false
	}
	addr := servePeers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }),
		time.Second, 100, perIP, perPeer, func(a netip.Addr) bool { return a == replica }, peer)
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil // reset by a cap before the dial returned
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// get sends a request on c (forwarded by node, unless ""): its status,
	// 0 when the connection was reset or closed unanswered.
	get := func(c net.Conn, node string) (int, *http.Response) {
		if c == nil {
			return 0, nil
		}
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n")
		if node != "" {
			fmt.Fprintf(c, "X-Test-Forwarded: %s\r\n", node)
		}
		fmt.Fprint(c, "\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, nil
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Close {
			// The server closes after a refusal: wait for it, so that the
			// connection's slot is given back before the test goes on.
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("refused connection not closed: %v", err)
			}
		}
		return resp.StatusCode, resp
	}
	refused := func(c net.Conn, node, what string) {
		t.Helper()
		code, resp := get(c, node)
		if code != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !resp.Close {
			t.Fatalf("%s: %d; want 429 with Retry-After, and the connection closed", what, code)
		}
	}

	// A burst of the replica's connections, over the per-address cap before
	// any of them sent a request: each authenticates and is served.
	var fromReplica []net.Conn
	for range perPeer {
		fromReplica = append(fromReplica, dial("127.0.0.1"))
	}
	for i, c := range fromReplica {
		if code, _ := get(c, "r1"); code != http.StatusOK {
			t.Fatalf("replica connection %d of %d (per-address cap %d): %d; want it served", i+1, perPeer, perIP, code)
		}
	}
	// They no longer count as the address's: two ordinary clients there
	// are served while the replica's connections stay open.
	var clients []net.Conn
	for i := range perIP {
		c := dial("127.0.0.1")
		if code, _ := get(c, ""); code != http.StatusOK {
			t.Fatalf("client %d at the replica's address while the replica holds %d connections: %d; want it served", i+1, perPeer, code)
		}
		clients = append(clients, c)
	}
	// Held open through the checks below, which count them.
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	// No bypass: over the per-address cap, a connection at the replica's
	// address must authenticate; plain, forged, or the replica's own over
	// its cap (it holds perPeer), it is refused and closed.
	refused(dial("127.0.0.1"), "", "a plain request over the per-address cap")
	refused(dial("127.0.0.1"), "forged", "a forged forwarding header over the per-address cap")
	refused(dial("127.0.0.1"), "r1", "the replica's request with its connections at their cap")
	// Pending connections are bounded too: perPeer, then reset at once.
	var pending []net.Conn
	for range perPeer {
		pending = append(pending, dial("127.0.0.1"))
	}
	if code, _ := get(dial("127.0.0.1"), ""); code != 0 {
		t.Fatalf("a connection over both caps of the replica's address: %d; want it reset", code)
	}
	for _, c := range pending {
		refused(c, "", "a pending connection's plain request")
	}
	// Another address gets no pending room: its third connection is reset.
	for range perIP {
		if code, _ := get(dial("127.0.0.2"), ""); code != http.StatusOK {
			t.Fatalf("another address within its cap: %d", code)
		}
	}
	if code, _ := get(dial("127.0.0.2"), ""); code != 0 {
		t.Fatalf("another address over its cap: %d; want it reset", code)
	}
	// A replica connection that closes gives its slot back to the replica.
	fromReplica[0].Close()
	served := false
	for range 50 { // the server notices the close asynchronously
		if code, _ := get(dial("127.0.0.1"), "r1"); code == http.StatusOK {
			served = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !served {
		t.Fatal("closing a replica connection did not free its slot")
	}
}
