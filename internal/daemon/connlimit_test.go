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
