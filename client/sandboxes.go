package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CreateRequest describes a sandbox to create. The zero value asks for the
// server's defaults.
type CreateRequest struct {
	// Template is "host" or a template name the server's operator
	// registered, such as "base"; empty means the server's default. The
	// server refuses "dir:" paths.
	Template string
	// Timeout is how long until the server destroys the sandbox; zero
	// means the server's default. Sent in seconds.
	Timeout   time.Duration
	Env       map[string]string
	Metadata  map[string]string
	Resources *Resources
	Network   *Network
	// NoService creates the sandbox without running its template's
	// service (start_cmd, a service CMD, a warm code context), never from
	// a warm pool.
	NoService bool
	// AutoPause pauses the sandbox at its timeout instead of destroying
	// it; Resume brings it back.
	AutoPause bool
	// Isolation is "container" or "gvisor" (gVisor's user-space kernel,
	// where the server has it: GET /v1/info); empty means the
	// server's default.
	Isolation string
	// Volumes are the caller's volumes to mount (see CreateVolume).
	Volumes []VolumeMount
}

// createBody is CreateRequest on the wire.
type createBody struct {
	Template  string            `json:"template,omitempty"`
	Timeout   float64           `json:"timeout,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Resources *Resources        `json:"resources,omitempty"`
	Network   *Network          `json:"network,omitempty"`
	Service   *bool             `json:"service,omitempty"`
	AutoPause bool              `json:"auto_pause,omitempty"`
	Isolation string            `json:"isolation,omitempty"`
	Volumes   []VolumeMount     `json:"volumes,omitempty"`
}

// Create creates a sandbox and returns it running. It fails with
// ErrQuotaExceeded when the caller has too many sandboxes.
func (c *Client) Create(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	body := createBody{Template: req.Template, Timeout: seconds(req.Timeout), Env: req.Env,
		Metadata: req.Metadata, Resources: req.Resources, Network: req.Network, AutoPause: req.AutoPause, Isolation: req.Isolation, Volumes: req.Volumes}
	if req.NoService {
		off := false
		body.Service = &off
	}
	var sb Sandbox
	if err := c.doJSON(ctx, "create sandbox", http.MethodPost, "/v1/sandboxes", nil, body, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Get returns the sandbox id, or ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.doJSON(ctx, "get sandbox "+id, http.MethodGet, sandboxPath(id, ""), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListOptions filter and page List.
type ListOptions struct {
	// States keeps only sandboxes in one of these states (default all).
	States []string
	// Metadata keeps only sandboxes whose metadata has all these pairs.
	Metadata map[string]string
	// Limit is the page size (1..1000); zero means the server's default (100).
	Limit int
	// NextToken is the SandboxPage.NextToken of the previous page.
	NextToken string
}

// query encodes o as List's query parameters.
func (o ListOptions) query() url.Values {
	q := url.Values{}
	if len(o.States) > 0 {
		q.Set("state", strings.Join(o.States, ","))
	}
	if len(o.Metadata) > 0 {
		md := url.Values{}
		for k, v := range o.Metadata {
			md.Set(k, v)
		}
		// The spec wants the pairs URL-encoded as one value ("k=v&k2=v2"),
		// which q.Encode then escapes again as a query value.
		q.Set("metadata", md.Encode())
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.NextToken != "" {
		q.Set("next_token", o.NextToken)
	}
	return q
}

// SandboxPage is one page of List. NextToken is empty on the last page.
type SandboxPage struct {
	Sandboxes []*Sandbox `json:"sandboxes"`
	NextToken string     `json:"next_token,omitempty"`
}

// List returns one page of the caller's sandboxes, newest first. See
// ListAll to walk every page.
func (c *Client) List(ctx context.Context, opts ListOptions) (*SandboxPage, error) {
	var page SandboxPage
	if err := c.doJSON(ctx, "list sandboxes", http.MethodGet, "/v1/sandboxes", opts.query(), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// ListAll iterates over every sandbox matching opts, fetching pages as
// needed (opts.NextToken is the starting point). An error ends the
// iteration after being yielded once.
func (c *Client) ListAll(ctx context.Context, opts ListOptions) iter.Seq2[*Sandbox, error] {
	return func(yield func(*Sandbox, error) bool) {
		seen := map[string]bool{}
		for {
			page, err := c.List(ctx, opts)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, sb := range page.Sandboxes {
				if !yield(sb, nil) {
					return
				}
			}
			if page.NextToken == "" {
				return
			}
			// A server handing out a token twice would loop forever.
			if seen[page.NextToken] {
				yield(nil, fmt.Errorf("list sandboxes: server repeated page token %q", page.NextToken))
				return
			}
			seen[page.NextToken] = true
			opts.NextToken = page.NextToken
		}
	}
}

// Delete destroys the sandbox id and everything in it.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.doJSON(ctx, "delete sandbox "+id, http.MethodDelete, sandboxPath(id, ""), nil, nil, nil)
}

// SetTimeout sets the sandbox's end time to now + d, which may shorten its
// life. d is sent in seconds and must be at least one second.
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration) (*Sandbox, error) {
	body := struct {
		Timeout float64 `json:"timeout"`
	}{seconds(d)}
	var sb Sandbox
	if err := c.doJSON(ctx, "set timeout of sandbox "+id, http.MethodPost, sandboxPath(id, "/timeout"), nil, body, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Refresh extends the sandbox's life to at least now + d; it never
// shortens it. Zero d means the server's default timeout.
func (c *Client) Refresh(ctx context.Context, id string, d time.Duration) (*Sandbox, error) {
	body := struct {
		Duration float64 `json:"duration,omitempty"`
	}{seconds(d)}
	var sb Sandbox
	if err := c.doJSON(ctx, "refresh sandbox "+id, http.MethodPost, sandboxPath(id, "/refresh"), nil, body, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Pause freezes every process of the sandbox and stops its clock (see
// docs/pause.md). While paused, exec, files and code fail with a conflict
// (IsConflict) until Resume. Pausing a paused sandbox is not an error.
func (c *Client) Pause(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	// Every POST carries a JSON body: the server's browser guard wants one.
	if err := c.doJSON(ctx, "pause sandbox "+id, http.MethodPost, sandboxPath(id, "/pause"), nil, struct{}{}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Resume thaws a paused sandbox: its processes continue where they
// stopped. timeout > 0 lets it run that long from now (sent in seconds);
// zero gives back the running time it had left when it was paused.
func (c *Client) Resume(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	body := struct {
		Timeout float64 `json:"timeout,omitempty"`
	}{seconds(timeout)}
	var sb Sandbox
	if err := c.doJSON(ctx, "resume sandbox "+id, http.MethodPost, sandboxPath(id, "/resume"), nil, body, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Stats returns the sandbox's resource usage and limit counters.
func (c *Client) Stats(ctx context.Context, id string) (*Stats, error) {
	var st Stats
	if err := c.doJSON(ctx, "stats of sandbox "+id, http.MethodGet, sandboxPath(id, "/stats"), nil, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Logs returns the sandbox's lifecycle events and agent log, oldest first:
// at most limit entries (zero means the server's default, 1000).
func (c *Client) Logs(ctx context.Context, id string, limit int) ([]LogEntry, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Logs []LogEntry `json:"logs"`
	}
	if err := c.doJSON(ctx, "logs of sandbox "+id, http.MethodGet, sandboxPath(id, "/logs"), q, nil, &out); err != nil {
		return nil, err
	}
	return out.Logs, nil
}

// ExecHistory returns the last commands run in the sandbox (at most 100,
// kept by the replica that ran them), newest first.
func (c *Client) ExecHistory(ctx context.Context, id string) ([]ExecRecord, error) {
	var out struct {
		Execs []ExecRecord `json:"execs"`
	}
	if err := c.doJSON(ctx, "exec history of sandbox "+id, http.MethodGet, sandboxPath(id, "/execs"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Execs, nil
}

// Info returns what the server is and can do.
func (c *Client) Info(ctx context.Context) (*ServerInfo, error) {
	var info ServerInfo
	if err := c.doJSON(ctx, "server info", http.MethodGet, "/v1/info", nil, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
