// Package agentclient is the host daemon's client for the in-sandbox
// agent (package agent): process control, file transfer and filesystem
// operations over a unix socket (or TCP).
//
// It is built for latency: one shared HTTP/1.1 transport with keep-alive
// connections to the agent, and the binary protobuf codec. Errors carry
// the error classes of package sandbox (see sandbox.ClassOf).
package agentclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api/proto/process/processconnect"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Endpoint is where an agent listens.
type Endpoint struct {
	Network string // "unix", "tcp", or "http" (an envd a provider serves)
	Address string // socket path, host:port, or a base URL (http: or https:)
	// Pid, when set, is the host pid that must be listening on the unix
	// socket (see dialUnix).
	Pid int
	// Header is sent with every request to an "http" endpoint: the
	// provider's routing headers (E2b-Sandbox-Id, E2b-Sandbox-Port).
	Header http.Header
	// CodeAddress and CodeHeader, when set, are where an "http"
	// endpoint's code interpreter answers (E2B serves it on a port of its
	// own); by default the code routes go to Address with Header.
	CodeAddress string
	CodeHeader  http.Header
}

// Client talks to one agent. It is safe for concurrent use.
type Client struct {
	token   string
	baseURL string
	tr      *http.Transport
	http    *http.Client
	// proc is connect-go's client, used only for the client-streaming
	// StreamInput; everything else goes through rpc.go.
	proc processconnect.ProcessClient
	// roots confine the filesystem calls (see Confined); nil: none.
	roots []string
	// codeBase and codeHeader are where the code routes go (the base URL
	// and no header of their own, unless the endpoint says otherwise).
	codeBase   string
	codeHeader http.Header
}

// New returns a client for the agent at ep. accessToken is sent as
// X-Access-Token when not empty. No connection is made until the first
// call.
func New(ep Endpoint, accessToken string) *Client {
	if ep.Network == "http" {
		return newHTTP(ep, accessToken)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := newTransport(func(ctx context.Context, _, _ string) (net.Conn, error) {
		if ep.Network == "unix" {
			return dialUnix(ctx, dialer, ep.Address, ep.Pid)
		}
		return dialer.DialContext(ctx, ep.Network, ep.Address)
	})
	base := "http://agent"
	if ep.Network == "tcp" {
		base = "http://" + ep.Address
	}
	return newClient(base, tr, tr, accessToken)
}

// NewVia returns a client for an agent reached through an HTTP proxy at
// baseURL, such as an agentbox daemon's data plane: every request also
// carries header (the daemon routes on E2b-Sandbox-Id), and accessToken as
// X-Access-Token.
func NewVia(baseURL string, header http.Header, accessToken string) *Client {
	tr := newTransport((&net.Dialer{Timeout: 5 * time.Second}).DialContext)
	tr.Proxy = http.ProxyFromEnvironment
	return newClient(strings.TrimRight(baseURL, "/"), tr, headerTransport{header: header, next: tr}, accessToken)
}

// newHTTP is New of an "http" endpoint: an envd a provider serves at a
// base URL, reached through the environment's proxy settings (loopback
// never is), every request carrying the endpoint's headers.
func newHTTP(ep Endpoint, accessToken string) *Client {
	tr := newTransport((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	tr.Proxy = http.ProxyFromEnvironment
	tr.TLSHandshakeTimeout = 10 * time.Second
	c := newClient(strings.TrimRight(ep.Address, "/"), tr, headerTransport{header: ep.Header, next: tr}, accessToken)
	if ep.CodeAddress != "" {
		c.codeBase = strings.TrimRight(ep.CodeAddress, "/")
	}
	c.codeHeader = ep.CodeHeader
	return c
}

// newTransport is the HTTP/1.1 transport of a client, dialling with dial.
func newTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		DialContext: dial,
		// Keep a pool of warm connections: every call reuses one.
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		// Download returns the raw bytes; we never want transparent gzip.
		DisableCompression: true,
		WriteBufferSize:    64 << 10,
		ReadBufferSize:     64 << 10,
	}
}

// newClient makes a client of base whose requests go through rt (tr, or
// a wrapper of it).
func newClient(base string, tr *http.Transport, rt http.RoundTripper, accessToken string) *Client {
	hc := &http.Client{Transport: rt}
	return &Client{
		token:    accessToken,
		baseURL:  base,
		codeBase: base,
		tr:       tr,
		http:     hc,
		proc:     processconnect.NewProcessClient(hc, base),
	}
}

// headerTransport adds header to every request, but for the names the
// request sets itself (a code route's port).
type headerTransport struct {
	header http.Header
	next   http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.header) == 0 {
		return t.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.header {
		if _, ok := r.Header[k]; !ok {
			r.Header[k] = v
		}
	}
	return t.next.RoundTrip(r)
}

// Close releases idle connections. Calls in flight are not interrupted.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// Confined returns a client for the same agent, sharing c's connections,
// whose every request carries roots (absolute, clean directory paths in
// the sandbox; the agent refuses others as ClassInvalid): the agent then
// resolves every path of the filesystem calls (Stat, ListDir, MakeDir,
// Move, Remove, WatchDir, Download, Upload, EditFile) under those roots,
// in the sandbox and without a race against sandbox code: relative paths
// are relative to the first root, and symbolic links are followed only
// while they stay inside the roots. A path leading outside is refused
// with a *sandbox.Error of class ClassForbidden wrapping ErrOutsideRoot.
// Process calls are not affected, nor is ProxyTarget's transport. The
// roots replace any c carries; Confined() with none returns an unconfined
// client.
func (c *Client) Confined(roots ...string) *Client {
	cc := *c
	cc.roots = slices.Clone(roots)
	return &cc
}

// setHeaders adds the access token, the E2B user selector and the roots.
func (c *Client) setHeaders(h http.Header, user string) {
	if c.token != "" {
		h.Set("X-Access-Token", c.token)
	}
	for _, r := range c.roots {
		h.Add(rootHeader, r)
	}
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

// Health reports whether the agent answers GET /health.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/health", nil, "", nil, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Envs returns the agent's default process environment.
func (c *Client) Envs(ctx context.Context) (map[string]string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/envs", nil, "", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	env := map[string]string{}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return nil, mapError("envs", fmt.Errorf("decode response: %w", err))
	}
	return env, nil
}

// SetAccessToken replaces the agent's access token (POST /init): from
// then on only token is accepted. The client keeps sending its own token;
// make a new client with the new one.
func (c *Client) SetAccessToken(ctx context.Context, token string) error {
	return c.postInit(ctx, map[string]any{"accessToken": token})
}

// Warm readies the agent for a first command soon (POST /init with
// nothing to set): the agent starts an exec shim ahead of it, and the
// connection the call opens stays in the client's pool for that command.
func (c *Client) Warm(ctx context.Context) error {
	return c.postInit(ctx, map[string]any{})
}

// SetEnv adds variables to the default environment of every process the
// agent starts from now on (POST /init).
func (c *Client) SetEnv(ctx context.Context, env map[string]string) error {
	return c.postInit(ctx, map[string]any{"envVars": env})
}

// postInit sends body to POST /init.
func (c *Client) postInit(ctx context.Context, body map[string]any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/init", nil, "", bytes.NewReader(data), "application/json")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Of returns a client for the agent at a backend's endpoint ep, with
// accessToken unless ep names a token of its own (a provider's envd).
func Of(ep sandbox.Endpoint, accessToken string) *Client {
	if ep.Token != "" {
		accessToken = ep.Token
	}
	return New(Endpoint{Network: ep.Network, Address: ep.Address, Pid: ep.Pid,
		Header: toHeader(ep.Header), CodeAddress: ep.CodeAddress, CodeHeader: toHeader(ep.CodeHeader)}, accessToken)
}

func toHeader(m map[string]string) http.Header {
	if len(m) == 0 {
		return nil
	}
	h := make(http.Header, len(m))
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}
