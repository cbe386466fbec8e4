package daemon

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs h behind the daemon's listener and body timeout.
func serve(t *testing.T, h http.Handler, idle time.Duration, total, perIP int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: withBodyTimeout(h, idle), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(newLimitListener(ln, total, perIP, slog.Default()))
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
