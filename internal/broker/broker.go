// Package broker is the egress broker: a proxy in the daemon that the
// HTTP and HTTPS connections of sandboxes with egress rules are redirected
// to (netpolicy's nftables DNAT), so that credentials reach upstream APIs
// without ever entering the sandbox.
//
// For each connection it reads the original destination back
// (SO_ORIGINAL_DST) and the sandbox from the source address, and applies
// the sandbox's egress policy itself (netpolicy.Manager.Permit) since the
// redirected packets no longer cross the forward filter. TLS to a host one
// of the sandbox's rules names is terminated with a certificate from the
// daemon's CA (which only its sandboxes trust); each request is checked
// (its Host must be the TLS server name), changed as the rules say
// (headers set, bound secrets' placeholders replaced) and sent upstream
// over a new TLS connection that verifies the real server, HTTP/1.1 or
// HTTP/2. Everything else — TLS to other hosts, TLS without a server name,
// plain HTTP — is passed through byte for byte: the broker never injects
// into a connection it cannot verify.
//
// If the broker is down, redirected connections are refused: sandboxes
// with rules fail closed, nothing goes out around it.
package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
)

// Policy is the sandbox networking the broker serves.
type Policy interface {
	// Source returns the sandbox with address src.
	Source(src netip.Addr) (netpolicy.Target, bool)
	// Permit fails (netpolicy.ErrDenied) when src may not connect to dst;
	// name is the host name asked for, if known.
	Permit(src, dst netip.Addr, name string) error
}

// Secrets reveals a tenant's secret values (secrets.Vault).
type Secrets interface {
	Reveal(ctx context.Context, owner, name string) (string, secrets.Meta, error)
}

// Config configures a Broker.
type Config struct {
	Policy  Policy
	Secrets Secrets
	// Owner returns the tenant a sandbox belongs to.
	Owner func(id sandbox.ID) (string, bool)
	CA    *CA
	// RootCAs verify upstream servers (nil: the host's trust store).
	RootCAs *x509.CertPool
	Audit   *audit.Log
	Logger  *slog.Logger
}

// Broker is the egress broker. Serve runs it on a listener.
type Broker struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	conns   map[sandbox.ID]map[*tracked]struct{}
	clients map[sandbox.ID]*http.Transport

	intercept *http.Server
	ln        *chanListener
}

// tracked is one connection from a sandbox.
type tracked struct {
	conn net.Conn
	src  netip.Addr
	dst  netip.AddrPort
	name string
}

// New returns a broker.
func New(cfg Config) *Broker {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, conns: map[sandbox.ID]map[*tracked]struct{}{},
		clients: map[sandbox.ID]*http.Transport{}, ln: newChanListener()}
	b.intercept = &http.Server{
		Handler:           http.HandlerFunc(b.serveHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				if ic, ok := tc.NetConn().(*interceptConn); ok {
					return context.WithValue(ctx, connKey{}, ic.info)
				}
			}
			return ctx
		},
	}
	go func() { _ = b.intercept.Serve(b.ln) }()
	return b
}

type connKey struct{}

// connInfo is what the handler knows about an intercepted connection.
type connInfo struct {
	target netpolicy.Target
	owner  string
	src    netip.Addr
	dst    netip.AddrPort
	name   string // the TLS server name
}

// interceptConn carries connInfo to the HTTP server through tls.Conn,
// and untracks the connection when it closes.
type interceptConn struct {
	net.Conn
	info *connInfo
	once sync.Once
	done func()
}

func (c *interceptConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// Serve accepts redirected connections on ln until it is closed.
func (b *Broker) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go b.handle(c)
	}
}

// Close stops serving intercepted connections and closes every tracked
// connection.
func (b *Broker) Close() error {
	b.mu.Lock()
	for _, m := range b.conns {
		for t := range m {
			_ = t.conn.Close()
		}
	}
	for _, tr := range b.clients {
		tr.CloseIdleConnections()
	}
	b.mu.Unlock()
	return b.intercept.Close()
}

// originalDst reads the destination a redirected connection was sent to.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		// struct sockaddr_in comes back in the ipv6_mreq's 20 bytes.
		m, e := unix.GetsockoptIPv6Mreq(int(fd), syscall.IPPROTO_IP, unix.SO_ORIGINAL_DST)
		if e != nil {
			serr = e
			return
		}
		port := binary.BigEndian.Uint16(m.Multiaddr[2:4])
		ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Multiaddr[4:8])), port)
	})
	if err == nil {
		err = serr
	}
	return ap, err
}

func (b *Broker) track(id sandbox.ID, t *tracked) func() {
	b.mu.Lock()
	m := b.conns[id]
	if m == nil {
		m = map[*tracked]struct{}{}
		b.conns[id] = m
	}
	m[t] = struct{}{}
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.conns[id], t)
		if len(b.conns[id]) == 0 {
			delete(b.conns, id)
		}
		b.mu.Unlock()
	}
}

// PolicyChanged closes the sandbox's connections its new policy denies,
// and the upstream connections kept for it.
func (b *Broker) PolicyChanged(id sandbox.ID, _ sandbox.Network) {
	b.mu.Lock()
	var check []*tracked
	for t := range b.conns[id] {
		check = append(check, t)
	}
	tr := b.clients[id]
	delete(b.clients, id)
	b.mu.Unlock()
	if tr != nil {
		tr.CloseIdleConnections()
	}
	for _, t := range check {
		if err := b.cfg.Policy.Permit(t.src, t.dst.Addr(), t.name); err != nil {
			// A reset: the sandbox's client fails at once rather than
			// reading an end of stream as a complete answer.
			reset(t.conn)
		}
	}
}

func (b *Broker) handle(c net.Conn) {
	src, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		_ = c.Close()
		return
	}
	target, ok := b.cfg.Policy.Source(src.Addr().Unmap())
	if !ok {
		_ = c.Close()
		return
	}
	dst, err := originalDst(c)
	if err != nil {
		b.log.Debug("broker: no original destination", "sandbox", target.ID, "err", err)
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(c, 16<<10+5) // one TLS record: a whole ClientHello
	first, err := br.Peek(1)
	if err != nil {
		_ = c.Close()
		return
	}
	var name string
	if first[0] == 0x16 { // a TLS handshake record
		name = readServerName(br)
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := b.cfg.Policy.Permit(src.Addr().Unmap(), dst.Addr(), name); err != nil {
		b.log.Debug("broker: denied", "sandbox", target.ID, "dst", dst, "name", name)
		reset(c)
		return
	}
	t := &tracked{conn: c, src: src.Addr().Unmap(), dst: dst, name: name}
	untrack := b.track(target.ID, t)
	pc := &prefixConn{Conn: c, r: br}
	if name != "" && hasRule(target.Network.Rules, name) && first[0] == 0x16 {
		owner, ok := b.cfg.Owner(target.ID)
		if !ok {
			untrack()
			_ = c.Close()
			return
		}
		info := &connInfo{target: target, owner: owner, src: t.src, dst: dst, name: strings.ToLower(name)}
		tc := tls.Server(&interceptConn{Conn: pc, info: info, done: untrack}, &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return b.cfg.CA.Leaf(info.name)
			},
		})
		b.ln.push(tc)
		return
	}
	defer untrack()
	b.passThrough(pc, dst)
}

// passThrough relays c to dst unchanged.
func (b *Broker) passThrough(c net.Conn, dst netip.AddrPort) {
	defer func() { _ = c.Close() }()
	d := net.Dialer{Timeout: 30 * time.Second}
	up, err := d.Dial("tcp", dst.String())
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

// reset closes c with a TCP reset, as the firewall answers a denied
// connection: the client fails at once.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func closeWrite(c net.Conn) {
	type cw interface{ CloseWrite() error }
	if w, ok := c.(cw); ok {
		_ = w.CloseWrite()
	}
}

func hasRule(rules []sandbox.EgressRule, host string) bool {
	for _, r := range rules {
		if netpolicy.RuleMatchesHost(r, host) {
			return true
		}
	}
	return false
}

// readServerName reads the TLS ClientHello's server name without
// consuming it from br: crypto/tls parses the hello on a connection that
// only replays the peeked bytes and then aborts.
func readServerName(br *bufio.Reader) string {
	var name string
	// A record header, then up to the record's length (a ClientHello
	// fits one record in practice; bufio holds up to its size).
	hdr, err := br.Peek(5)
	if err != nil {
		return ""
	}
	n := int(binary.BigEndian.Uint16(hdr[3:5])) + 5
	if n > br.Size() {
		n = br.Size()
	}
	rec, err := br.Peek(n)
	if err != nil {
		return ""
	}
	errDone := errors.New("done")
	_ = tls.Server(&replayConn{data: rec}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name = h.ServerName
			return nil, errDone
		},
	}).Handshake()
	return name
}

// replayConn reads data and nothing else; writes fail.
type replayConn struct {
	net.Conn
	data []byte
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}
func (r *replayConn) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (r *replayConn) Close() error                     { return nil }
func (r *replayConn) SetDeadline(time.Time) error      { return nil }
func (r *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (r *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (r *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (r *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// prefixConn reads through the buffered reader that peeked.
type prefixConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *prefixConn) CloseWrite() error {
	if tc, ok := p.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}

// chanListener hands the HTTP server the connections the broker decided
// to intercept.
type chanListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.closed:
		_ = c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }
