package dataplane

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
)

// Processes, their options and events, as the agent reports them.
type (
	StartOptions = agentclient.StartOptions
	PTYSize      = agentclient.PTYSize
	Event        = agentclient.Event
	EventKind    = agentclient.EventKind
	ExitResult   = agentclient.ExitResult
)

// Event kinds.
const (
	EventStdout = agentclient.EventStdout
	EventStderr = agentclient.EventStderr
	EventPTY    = agentclient.EventPTY
	EventEnd    = agentclient.EventEnd
)

// Process is a process started in a sandbox: its event stream and
// controls. Reading events must happen from one goroutine; the controls
// may be called concurrently. Closing the stream does not stop the
// process; Kill does. A process may outlive the Request that started it
// (an MCP server, a terminal): it is not counted in the request limits
// after the request's End.
type Process struct {
	*agentclient.Process
	client *agentclient.Client
}

// Start starts a process in the request's sandbox.
func (r *Request) Start(ctx context.Context, opts StartOptions) (*Process, error) {
	p, err := r.client.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Process{Process: p, client: r.client}, nil
}

// Kill kills the process and everything it started.
func (p *Process) Kill(ctx context.Context) error { return p.client.Kill(ctx, p.Pid()) }

// Run runs a process to its end, streaming stdin (when not nil) to it and
// its output to stdout and stderr; it kills the process if it returns
// early (ctx ended, a writer failed).
func (r *Request) Run(ctx context.Context, opts StartOptions, stdin io.Reader, stdout, stderr io.Writer) (ExitResult, error) {
	return r.client.Run(ctx, opts, stdin, stdout, stderr)
}

// Health reports whether the sandbox's agent answers.
func (r *Request) Health(ctx context.Context) error { return r.client.Health(ctx) }

// EnvdTarget is where E2B's envd protocol is served for the sandbox (its
// agent): the base URL, the transport that reaches it and the token the
// agent wants. Only the E2B front end's reverse proxy uses it, for the
// routes of that protocol, within this request's admission. The
// transport records the commands started through it in the exec history
// (envdhistory.go).
func (r *Request) EnvdTarget() (base *url.URL, transport http.RoundTripper, token string) {
	base, transport, token = r.client.ProxyTarget()
	if transport == nil {
		transport = http.DefaultTransport
	}
	return base, &envdRecorder{r: r, next: transport}, token
}

// CodeTarget is EnvdTarget of the code interpreter's routes (E2B's port
// 49999): the agent's own on this host, a port of its own at a provider.
func (r *Request) CodeTarget() (base *url.URL, transport http.RoundTripper, token string) {
	return r.client.CodeProxyTarget()
}

// MarkE2B marks a request passed to EnvdTarget as E2B's: the agent then
// keeps E2B's conventions (one working directory, the user's home, for
// commands and files) instead of agentbox's /workspace default.
func MarkE2B(h http.Header) { agentclient.MarkE2B(h) }

// ProcessInfo describes a running process of a sandbox.
type ProcessInfo = agentclient.ProcessInfo

// Attach attaches to the running process of the request's sandbox that
// carries tag (the oldest, when several do): its further output and its
// end (output from before is not replayed). Closing the stream leaves
// the process running.
func (r *Request) Attach(ctx context.Context, tag string) (*Process, error) {
	p, err := r.client.Connect(ctx, agentclient.Selector{Tag: tag})
	if err != nil {
		return nil, err
	}
	return &Process{Process: p, client: r.client}, nil
}

// Processes lists the processes running in the request's sandbox.
func (r *Request) Processes(ctx context.Context) ([]ProcessInfo, error) {
	return r.client.List(ctx)
}
