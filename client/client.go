package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// DefaultURL is the address of a local agentbox server with default settings.
const DefaultURL = "http://127.0.0.1:8000"

// DefaultUserAgent is sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "agentbox-go-client/1"

// Environment variables read by FromEnv.
const (
	EnvURL    = "AGENTBOX_URL"
	EnvAPIKey = "AGENTBOX_API_KEY" //nolint:gosec // G101: the variable's name, not a key
)

// Client talks to one agentbox server. Create it with New or FromEnv; it is
// safe for concurrent use by multiple goroutines.
type Client struct {
	base      *url.URL
	http      *http.Client
	apiKey    string
	userAgent string
	roots     []string // Confined
}

// Confined returns a client sharing c's connections whose file operations
// are confined to roots (absolute directories in the sandbox): relative
// paths are relative to the first, and the sandbox resolves every path,
// symbolic links included, under them, refusing one that leads out of all
// of them (IsOutsideRoot). Without roots it is an unconfined copy.
func (c *Client) Confined(roots ...string) *Client {
	cc := *c
	cc.roots = append([]string(nil), roots...)
	return &cc
}

// Option configures a Client in New and FromEnv.
type Option func(*Client)

// WithAPIKey sets the key sent as "Authorization: Bearer <key>" on every
// request. An empty key sends no Authorization header.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithHTTPClient makes the Client send its requests through hc. The client
// should not set a Timeout: streams (exec, downloads, terminals) may last
// long; bound calls with their context instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a Client for the server at baseURL, e.g.
// "http://127.0.0.1:8000" (an empty baseURL means DefaultURL). A path in
// baseURL is kept as a prefix, for servers behind a reverse proxy.
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("agentbox client: parse server URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("agentbox client: server URL %q: want an http:// or https:// URL", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("agentbox client: server URL %q has no host", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	// No client-wide timeout: long streams are normal here, and every call
	// is bounded by its context.
	c := &Client{base: u, http: &http.Client{}, userAgent: DefaultUserAgent}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// FromEnv returns a Client configured from AGENTBOX_URL (default
// DefaultURL) and AGENTBOX_API_KEY. Options given here win over the
// environment.
func FromEnv(opts ...Option) (*Client, error) {
	all := append([]Option{WithAPIKey(os.Getenv(EnvAPIKey))}, opts...)
	return New(os.Getenv(EnvURL), all...)
}

// BaseURL returns the server URL the Client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// endpoint returns the absolute URL of an API path with query. path is
// already escaped ("/v1/sessions/a%20b/connect"): its segments were
// escaped one by one, so an escaped "/" inside one stays part of it.
func (c *Client) endpoint(path string, query url.Values) *url.URL {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + path
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	}
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	return &u
}

// header returns the headers every request carries.
func (c *Client) header() http.Header {
	h := http.Header{}
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		h.Set("User-Agent", c.userAgent)
	}
	for _, r := range c.roots {
		h.Add("Agentbox-Root", r)
	}
	return h
}

// newRequest builds a request to an API path with the client's headers.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, query).String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range c.header() {
		req.Header[k] = v
	}
	return req, nil
}

// send performs req. A non-2xx response is turned into an *Error (its body
// consumed and closed); a transport failure is wrapped with op. On success
// the caller owns the response body.
func (c *Client) send(op string, req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, errorFromResponse(resp)
	}
	return resp, nil
}

// doJSON sends in (when non-nil) as a JSON body and decodes a JSON
// response into out (when non-nil).
func (c *Client) doJSON(ctx context.Context, op, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: encode request: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(op, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		// Drain so the connection can be reused; bounded, the body of a
		// 204 or an acknowledgement is tiny.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: decode response: %w", op, err)
	}
	return nil
}

// sandboxPath returns "/v1/sandboxes/<id><suffix>", escaping id.
func sandboxPath(id, suffix string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + suffix
}
