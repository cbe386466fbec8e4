package daemon

import (
	"context"
	"encoding/json"
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
//
// Connections of other replicas are counted apart. A replica forwards the
// requests of all its clients to the replica that runs their sandbox, so
// counted by address it is one client, and one tenant's slow requests
// through it (previews of a port that never answers) would use up the
// per-address cap and cut every other tenant off from that replica. The
// cap is applied when a connection is accepted, before any byte of it is
// read, so no address is trusted for what it is: a connection leaves its
// address's count only once a request on it carries a valid forwarding
// header (an HMAC under CLUSTER_SECRET, checked by withPeerConns), and is
// then counted against its replica's own cap, perPeer. Fairness between the
// users behind a replica is then up to the per-user limits, which the
// hosting replica applies to forwarded requests as to direct ones (it
// authenticates the caller's own credentials).
//
// A burst of new connections from a replica would still meet the
// per-address cap before their first request is read. So the addresses of
// live replicas (from the node registry, isPeer) may have up to perPeer
// connections more, pending: such a connection must authenticate with its
// first request, or it is answered 429 and closed. Someone else at a
// replica's address gains no request from this, only a bounded number of
// connections that must send their headers within HEADER_TIMEOUT.
type limitListener struct {
	net.Listener
	max, perIP, perPeer int
	// isPeer reports whether an address is a live replica's (nil: none).
	isPeer func(netip.Addr) bool
	log    *slog.Logger

	mu      sync.Mutex
	total   int
	byAddr  map[netip.Addr]int // unauthenticated connections, per address
	pending map[netip.Addr]int // over perIP from a replica's address, not authenticated yet
	byPeer  map[string]int     // authenticated forwarding connections, per replica
	refused atomic.Uint64
}

// connClass is which count a connection is in.
type connClass int

const (
	classAddr    connClass = iota // byAddr
	classPending                  // pending
	classPeer                     // byPeer
)

func newLimitListener(ln net.Listener, total, perIP, perPeer int, isPeer func(netip.Addr) bool, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: total, perIP: perIP, perPeer: perPeer, isPeer: isPeer, log: log,
		byAddr: map[netip.Addr]int{}, pending: map[netip.Addr]int{}, byPeer: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteAddr(c)
		class, reason := l.take(addr)
		if reason != "" {
			// Reset instead of a graceful close: no TIME_WAIT left behind.
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			l.noteRefused(addr, reason)
			continue
		}
		return &limitedConn{Conn: c, l: l, addr: addr, class: class}, nil
	}
}

func (l *limitListener) noteRefused(addr netip.Addr, reason string) {
	if n := l.refused.Add(1); n&(n-1) == 0 { // log the 1st, 2nd, 4th, ... refusal
		l.log.Warn("client connection refused", "remote", addr.String(), "reason", reason, "refused_so_far", n)
	}
}

// take counts a connection from addr, or says which cap it is over.
func (l *limitListener) take(addr netip.Addr) (connClass, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var class connClass
	switch {
	case l.total >= l.max:
		return 0, "MAX_CONNECTIONS reached"
	case l.byAddr[addr] < l.perIP:
		class = classAddr
		l.byAddr[addr]++
	case l.perPeer > 0 && l.pending[addr] < l.perPeer && l.isPeer != nil && l.isPeer(addr):
		class = classPending
		l.pending[addr]++
	default:
		return 0, "MAX_CONNECTIONS_PER_IP reached"
	}
	l.total++
	return class, ""
}

// uncount takes c out of its count. l.mu held.
func (l *limitListener) uncount(c *limitedConn) {
	switch c.class {
	case classAddr:
		if l.byAddr[c.addr]--; l.byAddr[c.addr] <= 0 {
			delete(l.byAddr, c.addr)
		}
	case classPending:
		if l.pending[c.addr]--; l.pending[c.addr] <= 0 {
			delete(l.pending, c.addr)
		}
	case classPeer:
		if l.byPeer[c.node]--; l.byPeer[c.node] <= 0 {
			delete(l.byPeer, c.node)
		}
	}
}

func (l *limitListener) give(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uncount(c)
	l.total--
	c.closed = true
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
	l    *limitListener
	addr netip.Addr
	// class and node (of classPeer) are guarded by l.mu.
	class connClass
	node  string
	// closed (guarded by l.mu) keeps a late promote from counting a
	// connection that already gave its slot back.
	closed bool
	once   sync.Once
}

func (c *limitedConn) Close() error {
	// The slot first: once the client sees the connection end, another
	// one of its connections finds the slot free.
	c.once.Do(func() { c.l.give(c) })
	return c.Conn.Close()
}

// promote counts c as a connection of replica node, once a request on it
// proved it is one. It reports false when that replica is at its cap: c
// stays counted as it was.
func (c *limitedConn) promote(node string) bool {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.class == classPeer || c.closed {
		return true
	}
	if l.byPeer[node] >= l.perPeer {
		return false
	}
	l.uncount(c)
	c.class, c.node = classPeer, node
	l.byPeer[node]++
	return true
}

// isPending reports whether c was let in over its address's cap and has
// not authenticated as a replica yet.
func (c *limitedConn) isPending() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.class == classPending
}

// connKey carries a request's *limitedConn (http.Server.ConnContext).
type connKey struct{}

// connContext is the server's ConnContext: it lets withPeerConns find the
// connection of a request.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// withPeerConns moves the connection of a request another replica
// forwarded (peer returns its node when the forwarding header is valid)
// out of its address's count into that replica's, and refuses requests on
// a pending connection (let in over its address's cap because the address
// is a replica's) that do not prove they come from one: 429, and the
// connection is closed.
func withPeerConns(peer func(*http.Request) (string, bool), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*limitedConn)
		if c == nil {
			next.ServeHTTP(w, r)
			return
		}
		node, ok := peer(r)
		if ok && c.promote(node) || !c.isPending() {
			next.ServeHTTP(w, r)
			return
		}
		c.l.noteRefused(c.addr, "MAX_CONNECTIONS_PER_IP reached (a connection let in for a replica did not authenticate as one)")
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(map[string]string{"code": "quota_exceeded",
			"message": "too many connections from this address (MAX_CONNECTIONS_PER_IP); retry later"})
	})
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
