// Package e2b is a remote backend: sandboxes of template kind "e2b" are
// created at an E2B-compatible provider (E2B's cloud, another agentbox
// daemon, the other servers speaking E2B's API) through its lifecycle API,
// and everything inside them (exec, files, code contexts, PTY, previews)
// goes through the provider's own in-sandbox data plane, envd: the
// endpoint a sandbox reports is the provider's, so the daemon's one agent
// client works against it unchanged.
//
// The provider key is the operator's: it is sent to the provider's
// lifecycle API only, never to a sandbox, a tenant or a log. Each remote
// sandbox carries this daemon's labels (node and agentbox id) in its
// metadata, and the backend keeps a small state file per sandbox with the
// provider's id and envd token, so that a restarted daemon re-lists its
// remote sandboxes and a sweep kills the ones it no longer knows (a crash
// between the provider's create and the state file, a delete the provider
// did not hear). Running remote sandboxes hold a lease at the provider
// (their E2B timeout) that the backend renews: a daemon that never comes
// back leaves nothing running past it.
package e2b

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/remote"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TemplateKind is the template kind this backend runs; templates named
// TemplatePrefix+NAME resolve to it, NAME being the provider's template.
const (
	TemplateKind   = "e2b"
	TemplatePrefix = "e2b:"
)

// The metadata labels every remote sandbox carries.
const (
	LabelNode    = remote.LabelNode
	LabelSandbox = remote.LabelSandbox
)

// E2B's in-sandbox ports.
const (
	envdPort = 49983
	codePort = 49999
)

// Config configures the backend.
type Config struct {
	// Provider names the provider in capabilities, records and errors
	// ("e2b").
	Provider string
	// APIURL is the lifecycle API's base URL (https://api.e2b.app).
	APIURL string
	// SandboxURL, when set, is the one base URL of every in-sandbox call,
	// routed by the E2b-Sandbox-Id and E2b-Sandbox-Port headers (another
	// agentbox daemon: its own address). Empty: E2B's host names,
	// https://<port>-<id>.<Domain>.
	SandboxURL string
	// Domain is the provider's sandbox domain (e2b.app), for SandboxURL's
	// default and preview URLs.
	Domain string
	// APIKey is the operator's provider key (X-API-Key).
	APIKey string
	// StateDir holds one state file per remote sandbox (mode 0600: the
	// envd tokens are secrets).
	StateDir string
	// Node is this daemon's node id, the LabelNode of its sandboxes.
	Node string
	// Lease is the provider timeout a running sandbox is kept alive with,
	// renewed every Lease/3 (default 10 minutes).
	Lease time.Duration
	// HTTPClient calls the lifecycle API (nil: a client with timeouts).
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Backend creates sandboxes at the provider. Create it with New.
type Backend struct {
	cfg  Config
	api  *api
	log  *slog.Logger
	core *remote.Core[own]
}

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Pauser      = (*Backend)(nil)
	_ backend.StatsReader = (*Backend)(nil)
	_ backend.PortDialer  = (*Backend)(nil)
	_ backend.Closer      = (*Backend)(nil)
)

// own is what the backend keeps of a remote sandbox beyond the core's
// fields (in its state file: the envd token is a secret).
type own struct {
	Template     string `json:"template"`
	EnvdToken    string `json:"envd_token,omitempty"`
	TrafficToken string `json:"traffic_token,omitempty"`
	Domain       string `json:"domain,omitempty"`
}

// state is one remote sandbox.
type state = remote.Box[own]

// New returns the backend; nothing is called at the provider until
// Recover or the first Create.
func New(cfg Config) (*Backend, error) {
	if cfg.Provider == "" {
		cfg.Provider = "e2b"
	}
	if cfg.APIURL == "" || cfg.APIKey == "" || cfg.StateDir == "" || cfg.Node == "" {
		return nil, errors.New("remote e2b backend: APIURL, APIKey, StateDir and Node are required")
	}
	if cfg.SandboxURL == "" && cfg.Domain == "" {
		return nil, errors.New("remote e2b backend: a SandboxURL or a Domain is required")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 90 * time.Second,
		}}
	}
	b := &Backend{cfg: cfg, api: &api{base: strings.TrimRight(cfg.APIURL, "/"), key: cfg.APIKey, provider: cfg.Provider, http: cfg.HTTPClient}}
	core, err := remote.New[own](remote.Config{Provider: cfg.Provider, Kind: TemplateKind, Capabilities: b.Capabilities(),
		StateDir: cfg.StateDir, Node: cfg.Node, Lease: cfg.Lease, Logger: cfg.Logger}, provider{b})
	if err != nil {
		return nil, err
	}
	b.core, b.log = core, core.Log()
	return b, nil
}

// Name implements backend.Backend: the provider's name.
func (b *Backend) Name() string { return b.cfg.Provider }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	// Egress is the provider's: allowInternetAccess and its network rules.
	return backend.Capabilities{Pause: true, ResourceLimits: true, Egress: true, Templates: []string{TemplateKind}, Provider: b.cfg.Provider}
}

// remoteTemplate is the provider's template of t.
func remoteTemplate(t sandbox.Template) string {
	if name, ok := strings.CutPrefix(t.Ref, TemplatePrefix); ok {
		return name
	}
	return t.Ref
}

// provider is the backend's control plane as the core uses it.
type provider struct{ b *Backend }

func (provider) Validate(sandbox.Spec) error { return nil }

func (p provider) Create(ctx context.Context, spec sandbox.Spec, labels map[string]string) (remote.Created[own], error) {
	b := p.b
	in := createIn{TemplateID: remoteTemplate(spec.Template), Timeout: int(b.cfg.Lease / time.Second), Secure: true,
		Metadata: labels, EnvVars: spec.Env}
	internet := spec.Network.Mode == sandbox.NetworkEgress
	in.AllowInternetAccess = &internet
	if internet && len(spec.Network.AllowOut)+len(spec.Network.DenyOut) > 0 {
		in.Network = &networkIn{AllowOut: spec.Network.AllowOut, DenyOut: spec.Network.DenyOut}
	}
	out, err := b.api.create(ctx, in)
	if err != nil {
		return remote.Created[own]{}, err
	}
	made := remote.Created[own]{RemoteID: out.SandboxID, Resources: spec.Resources, P: own{Template: in.TemplateID, EnvdToken: out.EnvdAccessToken}}
	if out.TrafficAccessToken != nil {
		made.P.TrafficToken = *out.TrafficAccessToken
	}
	if out.Domain != nil {
		made.P.Domain = *out.Domain
	}
	// What the provider gives the sandbox is what it has, whatever was
	// asked (E2B sizes sandboxes by template).
	if d, err := b.api.get(ctx, out.SandboxID); err == nil {
		made.Resources = resourcesOf(d, spec.Resources)
	}
	return made, nil
}

func (p provider) Remove(ctx context.Context, rid string) error { return p.b.api.kill(ctx, rid) }

func (p provider) Renew(ctx context.Context, rid string) error {
	return p.b.api.setTimeout(ctx, rid, p.b.cfg.Lease)
}

func (p provider) List(ctx context.Context, labels map[string]string) ([]remote.Listed, error) {
	listed, err := p.b.api.list(ctx, labels)
	if err != nil {
		return nil, err
	}
	out := make([]remote.Listed, 0, len(listed))
	for _, s := range listed {
		l := remote.Listed{RemoteID: s.SandboxID, Labels: s.Metadata}
		switch s.State {
		case "running":
			l.State = sandbox.StateRunning
		case "paused":
			l.State = sandbox.StatePaused
		}
		out = append(out, l)
	}
	return out, nil
}

func (provider) Template(st *state) sandbox.Template {
	return sandbox.Template{Ref: TemplatePrefix + st.P.Template, Kind: TemplateKind}
}

func (p provider) Endpoint(st *state) sandbox.Endpoint { return p.b.endpoint(st) }

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	return b.core.Create(ctx, spec)
}

// Destroy implements backend.Backend: the sandbox is deleted at the
// provider (or by the sweep, once it answers).
func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error { return b.core.Destroy(ctx, id) }

// Inspect implements backend.Backend, from what the backend knows.
func (b *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	return b.core.Inspect(ctx, id)
}

// Recover implements backend.Backend (see remote.Core.Recover).
func (b *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) { return b.core.Recover(ctx) }

// Sweep deletes at the provider the labelled sandboxes this daemon no
// longer knows. The loop calls it; tests may too.
func (b *Backend) Sweep(ctx context.Context) error { return b.core.Sweep(ctx) }

// Close implements backend.Closer: the loop stops; the remote sandboxes
// and their states stay for the next start.
func (b *Backend) Close() error { return b.core.Close() }

// resourcesOf are the resources a provider's sandbox has, def where it
// does not say.
func resourcesOf(d sandboxOut, def sandbox.Resources) sandbox.Resources {
	r := def
	if d.CPUCount > 0 {
		r.CPUs = float64(d.CPUCount)
	}
	if d.MemoryMB > 0 {
		r.MemoryBytes = d.MemoryMB << 20
	}
	if d.DiskSizeMB > 0 {
		r.DiskBytes = d.DiskSizeMB << 20
	}
	return r
}

// endpoint is where the sandbox's envd answers: the provider's data plane.
func (b *Backend) endpoint(st *state) sandbox.Endpoint {
	ep := sandbox.Endpoint{Network: "http", Address: b.portURL(st, envdPort), CodeAddress: b.portURL(st, codePort),
		Header:     map[string]string{"E2b-Sandbox-Id": st.RemoteID, "E2b-Sandbox-Port": fmt.Sprint(envdPort)},
		CodeHeader: map[string]string{"E2b-Sandbox-Port": fmt.Sprint(codePort)},
		Token:      st.P.EnvdToken}
	return ep
}

// portURL is the base URL of port of the sandbox at the provider.
func (b *Backend) portURL(st *state, port int) string {
	if b.cfg.SandboxURL != "" {
		return strings.TrimRight(b.cfg.SandboxURL, "/")
	}
	domain := b.cfg.Domain
	if st.P.Domain != "" {
		domain = st.P.Domain
	}
	return fmt.Sprintf("https://%d-%s.%s", port, st.RemoteID, domain)
}

func (b *Backend) box(id sandbox.ID) (*state, error) { return b.core.Box(id) }

func (b *Backend) setState(id sandbox.ID, s sandbox.State) error { return b.core.SetState(id, s) }

// Stop implements backend.Backend: the provider pauses the sandbox (E2B
// has no stop; a paused sandbox keeps its files, and its memory too).
func (b *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	st, err := b.box(id)
	if err != nil {
		return err
	}
	if st.State == sandbox.StateStopped {
		return nil
	}
	if st.State != sandbox.StatePaused {
		if err := b.api.pause(ctx, st.RemoteID); err != nil {
			return fmt.Errorf("stop at %s: %w", b.cfg.Provider, err)
		}
	}
	return b.setState(id, sandbox.StateStopped)
}

// Start implements backend.Backend: the provider resumes the sandbox.
func (b *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	st, err := b.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	if st.State != sandbox.StateRunning {
		if err := b.resume(ctx, st); err != nil {
			return sandbox.Info{}, err
		}
	}
	st, err = b.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.core.Info(st, sandbox.Spec{}), nil
}

// Pause implements backend.Pauser.
func (b *Backend) Pause(ctx context.Context, id sandbox.ID) error {
	st, err := b.box(id)
	if err != nil {
		return err
	}
	switch st.State {
	case sandbox.StatePaused:
		return nil
	case sandbox.StateStopped:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped", id)
	}
	if err := b.api.pause(ctx, st.RemoteID); err != nil {
		return fmt.Errorf("pause at %s: %w", b.cfg.Provider, err)
	}
	return b.setState(id, sandbox.StatePaused)
}

// Resume implements backend.Pauser.
func (b *Backend) Resume(ctx context.Context, id sandbox.ID) error {
	st, err := b.box(id)
	if err != nil {
		return err
	}
	switch st.State {
	case sandbox.StateRunning:
		return nil
	case sandbox.StateStopped:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped", id)
	}
	return b.resume(ctx, st)
}

func (b *Backend) resume(ctx context.Context, st *state) error {
	out, err := b.api.connect(ctx, st.RemoteID, b.cfg.Lease)
	if err != nil {
		return fmt.Errorf("resume at %s: %w", b.cfg.Provider, err)
	}
	return b.core.Update(st.ID, func(c *state) {
		c.State = sandbox.StateRunning
		if out.EnvdAccessToken != "" {
			c.P.EnvdToken = out.EnvdAccessToken
		}
	})
}

// Stats implements backend.StatsReader with the provider's latest metric.
func (b *Backend) Stats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	st, err := b.box(id)
	if err != nil {
		return backend.Stats{}, err
	}
	ms, err := b.api.metrics(ctx, st.RemoteID)
	if err != nil {
		return backend.Stats{}, fmt.Errorf("metrics at %s: %w", b.cfg.Provider, err)
	}
	s := backend.Stats{MemoryLimit: st.Resources.MemoryBytes, DiskTotalBytes: st.Resources.DiskBytes}
	if len(ms) > 0 {
		m := ms[len(ms)-1]
		s.MemoryBytes, s.DiskUsedBytes = m.MemUsed, m.DiskUsed
		if m.MemTotal > 0 {
			s.MemoryLimit = m.MemTotal
		}
		if m.DiskTotal > 0 {
			s.DiskTotalBytes = m.DiskTotal
		}
	}
	return s, nil
}
