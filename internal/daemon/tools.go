package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/mcpserver"
)

// The tool kit (MCP, function calling) is written over the Go SDK, like
// any client. In the daemon its client talks to the daemon's own handler
// through an in-memory listener: every call passes the same
// authentication, tenant checks and limits as a remote one, without a TCP
// port or the connection limits meant for remote clients.

// toolKit is the daemon's tool kit: the MCP server (its routes are the
// shared server's, Config.Tools) and the in-memory listener its client
// reaches the shared server's handler through.
type toolKit struct {
	mcp *mcpserver.HTTP
	ln  *memListener
	tr  *http.Transport
	srv *http.Server
}

// newToolKit makes the kit; servers are the MCP servers added to
// sandboxes (agentscope's). serve starts its listener.
func newToolKit(cfg *config.Config, servers mcpserver.SandboxServers, log *slog.Logger) *toolKit {
	k := &toolKit{ln: newMemListener()}
	k.tr = &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return k.ln.dial(ctx) },
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
		ForceAttemptHTTP2:   false,
	}
	hc := &http.Client{Transport: k.tr}
	var verify func(string) (string, error)
	if len(cfg.APIKeys) > 0 {
		verify = func(key string) (string, error) { return httpapi.UserForKey(cfg.APIKeys, key) }
	}
	k.mcp = mcpserver.NewHTTP(mcpserver.HTTPConfig{
		NewClient: func(key, host string) (*client.Client, error) {
			// The caller's Host (which the browser guard already let
			// through), so previews and other URLs the server builds are
			// the caller's; the connection itself is in-memory.
			if host == "" {
				host = "localhost"
			}
			return client.New("http://"+host, client.WithHTTPClient(hc), client.WithAPIKey(key), client.WithUserAgent("agentbox-tools"))
		},
		Verify:         verify,
		SessionTimeout: cfg.MCPSessionTimeout,
		// A session's sandbox lives as long as the session may idle
		// (within MAX_TIMEOUT), and is refreshed while used.
		Create:  client.CreateRequest{Template: cfg.MCPTemplate, Timeout: sessionSandboxTimeout(cfg)},
		Servers: servers,
		Logger:  log,
	})
	return k
}

// serve serves h, the shared server's handler, on the in-memory listener.
func (k *toolKit) serve(h http.Handler, log *slog.Logger) {
	k.srv = &http.Server{Handler: h, ReadHeaderTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() { _ = k.srv.Serve(k.ln) }()
}

// close ends the MCP sessions (destroying their sandboxes) and the
// in-memory listener.
func (k *toolKit) close() error {
	k.mcp.Close()
	k.tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.srv.Shutdown(ctx); err != nil {
		return k.srv.Close()
	}
	return nil
}

// sessionSandboxTimeout is the life of an MCP session's sandbox: the
// session's idle timeout, capped at MAX_TIMEOUT (zero: the server's
// default).
func sessionSandboxTimeout(cfg *config.Config) time.Duration {
	d := cfg.MCPSessionTimeout
	if cfg.MaxTimeout > 0 && d > cfg.MaxTimeout {
		d = cfg.MaxTimeout
	}
	return d
}

// memListener is a net.Listener of in-memory connections (net.Pipe).
type memListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) dial(ctx context.Context) (net.Conn, error) {
	server, c := net.Pipe()
	select {
	case l.conns <- server:
		return c, nil
	case <-l.done:
		return nil, errors.New("in-memory listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "agentbox-tools" }
