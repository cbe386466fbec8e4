package daemon

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Client connections are capped, in total and per remote address, so that
// connections nobody authenticated (slow headers, idle keep-alives) cannot
// use up the daemon's file descriptors: sandboxes need them too (agent
// sockets, container setup), and /healthz must keep answering.

const (
	// maxAutoConnections bounds the derived connection cap: each
	// connection may hold a goroutine and up to maxHeaderBytes of headers.
	maxAutoConnections = 4096
	// minConnectionsPerIP keeps the derived per-address cap usable.
	minConnectionsPerIP = 16
	// maxHeaderBytes bounds the headers of one request (net/http's default
	// of 1 MiB would let slow-header connections hold a GiB).
	maxHeaderBytes = 64 << 10
)

// raiseFileLimit raises the soft open-files limit to the hard one and
// returns the soft limit in effect.
func raiseFileLimit(log *slog.Logger) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("read the open-files limit", "err", err)
		return 1024
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("raise the open-files limit", "from", lim.Cur, "to", lim.Max, "err", err)
			return lim.Cur
		}
		return raised.Cur
	}
	return lim.Cur
}

// connectionLimits resolves the MAX_CONNECTIONS settings (0 = derived):
// half the open-files limit goes to client connections, the other half
// stays for sandbox work.
func connectionLimits(total, perIP int, nofile uint64) (int, int) {
	if total == 0 {
		total = int(min(nofile/2, maxAutoConnections))
		total = max(total, minConnectionsPerIP)
	}
	if perIP == 0 {
		perIP = max(total/8, minConnectionsPerIP)
	}
	return total, min(perIP, total)
}

// limitListener closes connections over its caps as soon as they are
// accepted, which frees their descriptor and tells the client at once,
// instead of leaving them queued where they would delay everyone.
type limitListener struct {
	net.Listener
	max, perIP int
	log        *slog.Logger

	mu      sync.Mutex
	total   int
	byAddr  map[netip.Addr]int
	refused atomic.Uint64
}

func newLimitListener(ln net.Listener, total, perIP int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: total, perIP: perIP, log: log, byAddr: map[netip.Addr]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteAddr(c)
		if reason := l.take(addr); reason != "" {
			// Reset instead of a graceful close: no TIME_WAIT left behind.
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			if n := l.refused.Add(1); n&(n-1) == 0 { // log the 1st, 2nd, 4th, ... refusal
				l.log.Warn("client connection refused", "remote", addr.String(), "reason", reason, "refused_so_far", n)
			}
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.give(addr) }}, nil
	}
}

// take counts a connection from addr, or says which cap it is over.
func (l *limitListener) take(addr netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.max:
		return "MAX_CONNECTIONS reached"
	case l.byAddr[addr] >= l.perIP:
		return "MAX_CONNECTIONS_PER_IP reached"
	}
	l.total++
	l.byAddr[addr]++
	return ""
}

func (l *limitListener) give(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

// remoteAddr is the peer address of c (IPv4-mapped IPv6 unmapped, so one
// client counts once); the zero Addr for non-IP listeners.
func remoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// limitedConn gives its slot back once, when it is closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// withBodyTimeout fails a request whose body stalls: every read of the
// body must bring data within idle, however long the whole body takes, so
// a live upload of any size goes through while a client that stops
// sending (and holds a connection and a handler) is cut. Responses are not
// affected: the deadline is only set while the handler reads the body.
func withBodyTimeout(next http.Handler, idle time.Duration) http.Handler {
	if idle <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: idle}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody moves the connection's read deadline before each read of
// the body, and clears it when the body ends: net/http then reads from the
// connection in the background to notice a client that goes away, and a
// deadline left behind would cancel a long response. (A body the handler
// leaves unfinished keeps its deadline: net/http reads the rest after the
// handler, and drops the connection if that stalls.)
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	// Fails (harmlessly) for HTTP/2 streams and hijacked connections.
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	// After any other error the deadline stays: net/http reads what is
	// left of the body before answering, and must not wait for a client
	// that stalled.
	return n, err
}

// baseMemory is the daemon's memory besides request buffers and client
// connections: the runtime, the manager's records, the agent clients.
const baseMemory = 256 << 20

// nonGoMemory is kept out of the runtime's limit: resident memory it does
// not account for (the executable's pages, C allocations), and room for
// the collector to overshoot its soft limit under a burst of allocation.
const nonGoMemory = 128 << 20

// connectionMemory is what one client connection may hold: its goroutine,
// buffers and up to maxHeaderBytes of headers.
const connectionMemory = maxHeaderBytes + 16<<10

// setMemoryLimit tells the Go runtime the daemon's memory budget
// (baseMemory + REQUEST_MEMORY + connections), so the collector works
// harder, and returns memory to the system, as the heap nears it instead
// of letting it reach twice the live data. GOMEMLIMIT, when set, wins.
func setMemoryLimit(requestMemory int64, maxConns int, log *slog.Logger) {
	if requestMemory <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := baseMemory + requestMemory + int64(maxConns)*connectionMemory
	// The runtime keeps its own memory under the limit; the executable's
	// pages and C allocations come on top.
	debug.SetMemoryLimit(limit - nonGoMemory)
	log.Debug("memory budget", "bytes", limit)
}
