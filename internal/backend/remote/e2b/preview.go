package e2b

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// DialPort implements backend.PortDialer for the preview proxy: the
// connection it returns is served here by a reverse proxy to the port's
// URL at the provider (HTTP and WebSocket; a port that speaks another
// protocol is not reachable this way). The provider's traffic token goes
// with every request when it issued one; the sandbox's server never sees
// an agentbox credential.
func (b *Backend) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "port %d out of range", port)
	}
	st, err := b.box(id)
	if err != nil {
		return nil, err
	}
	if st.State != sandbox.StateRunning {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s", id, st.State)
	}
	target, err := url.Parse(b.portURL(st, port))
	if err != nil {
		return nil, fmt.Errorf("preview URL: %w", err)
	}
	rid, traffic := st.RemoteID, st.TrafficToken
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Set("E2b-Sandbox-Id", rid)
			pr.Out.Header.Set("E2b-Sandbox-Port", fmt.Sprint(port))
			pr.Out.Header.Del("X-Access-Token")
			pr.Out.Header.Del("E2b-Traffic-Access-Token")
			if traffic != "" {
				pr.Out.Header.Set("E2b-Traffic-Access-Token", traffic)
			}
		},
		Transport:     b.previewTransport(),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			b.log.Debug("preview at the provider", "sandbox", id, "port", port, "err", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return ServeOne(proxy), nil
}

// ServeOne returns one end of an in-memory connection whose other end h
// serves as HTTP: a preview proxy handed to the daemon as a dialled port.
// Closing the connection stops the server.
func ServeOne(h http.Handler) net.Conn {
	client, server := net.Pipe()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	ln := &oneConn{conn: server, done: make(chan struct{})}
	go func() {
		_ = srv.Serve(ln)
	}()
	return &closeBoth{Conn: client, close: func() { ln.Close(); srv.Close() }}
}

// previewTransport is the transport of previews (made once).
func (b *Backend) previewTransport() http.RoundTripper {
	previewOnce.Do(func() {
		previewRT = &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second, DisableCompression: true}
	})
	return previewRT
}

var (
	previewOnce sync.Once
	previewRT   http.RoundTripper
)

// oneConn is a listener that accepts one connection, then waits until it
// is closed.
type oneConn struct {
	mu     sync.Mutex
	conn   net.Conn
	done   chan struct{}
	closed bool
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	return nil
}

func (l *oneConn) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "remote-preview" }

// closeBoth is the caller's end of the pipe; closing it stops the server
// of the other end.
type closeBoth struct {
	net.Conn
	once  sync.Once
	close func()
}

func (c *closeBoth) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.close)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
