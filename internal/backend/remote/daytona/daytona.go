// Package daytona is a remote backend: sandboxes of template kind
// "daytona" are created at a Daytona-compatible provider (Daytona's cloud
// or a self-hosted Daytona, another agentbox daemon) through its control
// plane (/api/sandbox...), and everything inside them goes through the
// provider's toolbox: the backend bridges the envd calls of the daemon's
// one agent client to toolbox calls (bridge.go), so exec, files and code
// reach a Daytona sandbox through the same data plane as any other.
//
// As with the E2B remote, the provider key is the operator's and never
// leaves this backend; every remote sandbox carries this daemon's labels
// (node and agentbox id), a state file per sandbox lets a restarted
// daemon re-list them, a sweep deletes the labelled ones it no longer
// knows, and running sandboxes hold a lease at the provider (their
// auto-stop interval, renewed; auto-delete after it) so that a daemon that
// never comes back leaves nothing running.
package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/remote"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TemplateKind is the template kind this backend runs; templates named
// TemplatePrefix+SNAPSHOT resolve to it, SNAPSHOT being the provider's.
const (
	TemplateKind   = "daytona"
	TemplatePrefix = "daytona:"
)

// The labels every remote sandbox carries.
const (
	LabelNode    = remote.LabelNode
	LabelSandbox = remote.LabelSandbox
)

// Config configures the backend.
type Config struct {
	// Provider names the provider ("daytona").
	Provider string
	// APIURL is the control plane's base URL, with its /api
	// (DAYTONA_SERVER_URL: https://app.daytona.io/api).
	APIURL string
	// APIKey is the operator's key (Authorization: Bearer).
	APIKey string
	// Target is the provider's region (DAYTONA_TARGET), "" for its default.
	Target   string
	StateDir string
	Node     string
	// Lease is how long a running sandbox lives at the provider unless
	// renewed (its auto-stop interval, whole minutes; renewed every
	// Lease/3); a stopped one is deleted after as long.
	Lease      time.Duration
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Backend creates sandboxes at the provider. Create it with New.
type Backend struct {
	cfg    Config
	api    *api
	log    *slog.Logger
	bridge *bridge
	core   *remote.Core[own]

	mu       sync.Mutex
	previews map[previewKey]previewOut
}

type previewKey struct {
	id   sandbox.ID
	port int
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.PortDialer = (*Backend)(nil)
	_ backend.Closer     = (*Backend)(nil)
)

// own is what the backend keeps of a remote sandbox beyond the core's
// fields.
type own struct {
	Snapshot   string `json:"snapshot"`
	ToolboxURL string `json:"toolbox_url"`
}

// state is one remote sandbox.
type state = remote.Box[own]

// New returns the backend and starts its bridge on loopback; nothing is
// called at the provider until Recover or the first Create.
func New(cfg Config) (*Backend, error) {
	if cfg.Provider == "" {
		cfg.Provider = "daytona"
	}
	if cfg.APIURL == "" || cfg.APIKey == "" || cfg.StateDir == "" || cfg.Node == "" {
		return nil, errors.New("remote daytona backend: APIURL, APIKey, StateDir and Node are required")
	}
	if cfg.Lease < time.Minute {
		cfg.Lease = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Minute, Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second, DisableCompression: true,
		}}
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, previews: map[previewKey]previewOut{},
		api: &api{base: strings.TrimRight(cfg.APIURL, "/"), key: cfg.APIKey, target: cfg.Target, provider: cfg.Provider, http: cfg.HTTPClient}}
	core, err := remote.New[own](remote.Config{Provider: cfg.Provider, Kind: TemplateKind, Capabilities: b.Capabilities(),
		StateDir: cfg.StateDir, Node: cfg.Node, Lease: cfg.Lease, Logger: cfg.Logger}, provider{b})
	if err != nil {
		return nil, err
	}
	b.core, b.log = core, core.Log()
	b.bridge = &bridge{b: b, token: hex.EncodeToString(tok)}
	if err := b.bridge.start(); err != nil {
		return nil, err
	}
	return b, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return b.cfg.Provider }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	// Egress is the provider's: networkBlockAll for none, its allow list
	// for rules.
	return backend.Capabilities{ResourceLimits: true, Egress: true, Templates: []string{TemplateKind}, Provider: b.cfg.Provider}
}

func leaseMinutes(d time.Duration) int { return max(1, int(d/time.Minute)) }

// provider is the backend's control plane as the core uses it.
type provider struct{ b *Backend }

func (p provider) Validate(spec sandbox.Spec) error {
	if len(spec.Network.AllowOut)+len(spec.Network.DenyOut) > 0 {
		return sandbox.Errorf(sandbox.ClassInvalid, "a sandbox at the %s provider takes no allow or deny lists through agentbox", p.b.cfg.Provider)
	}
	return nil
}

func (p provider) Create(ctx context.Context, spec sandbox.Spec, labels map[string]string) (remote.Created[own], error) {
	b := p.b
	snap, _ := strings.CutPrefix(spec.Template.Ref, TemplatePrefix)
	lease := leaseMinutes(b.cfg.Lease)
	in := createIn{Snapshot: snap, Labels: labels, Env: spec.Env,
		AutoStopInterval: lease, AutoDeleteInterval: lease, NetworkBlockAll: spec.Network.Mode == sandbox.NetworkNone}
	if r := spec.Resources; r.CPUs > 0 {
		in.CPU = &r.CPUs
	}
	if m := spec.Resources.MemoryBytes; m > 0 {
		g := float64(max(1, (m+(1<<30)-1)>>30))
		in.Memory = &g
	}
	out, err := b.api.create(ctx, in)
	if err != nil {
		return remote.Created[own]{}, err
	}
	if out, err = b.waitStarted(ctx, out); err != nil {
		b.killQuietly(ctx, spec.ID, out.ID)
		return remote.Created[own]{}, err
	}
	return remote.Created[own]{RemoteID: out.ID, Resources: resourcesOf(out, spec.Resources),
		P: own{Snapshot: snap, ToolboxURL: b.toolboxURL(out)}}, nil
}

func (p provider) Remove(ctx context.Context, rid string) error { return p.b.api.remove(ctx, rid) }

func (p provider) Renew(ctx context.Context, rid string) error {
	return p.b.api.renew(ctx, rid, leaseMinutes(p.b.cfg.Lease))
}

func (p provider) List(ctx context.Context, labels map[string]string) ([]remote.Listed, error) {
	listed, err := p.b.api.list(ctx, labels)
	if err != nil {
		return nil, err
	}
	out := make([]remote.Listed, 0, len(listed))
	for _, s := range listed {
		l := remote.Listed{RemoteID: s.ID, Labels: s.Labels}
		switch s.State {
		case "destroyed":
			continue // gone: neither a box nor an orphan
		case "destroying":
			l.Gone = true
		case "started":
			l.State = sandbox.StateRunning
		case "stopped":
			l.State = sandbox.StateStopped
		}
		out = append(out, l)
	}
	return out, nil
}

func (provider) Template(st *state) sandbox.Template {
	return sandbox.Template{Ref: TemplatePrefix + st.P.Snapshot, Kind: TemplateKind}
}

// Endpoint is the bridge, with the sandbox named in a header.
func (p provider) Endpoint(st *state) sandbox.Endpoint {
	return sandbox.Endpoint{Network: "http", Address: p.b.bridge.url(), Header: map[string]string{headerSandbox: string(st.ID)}, Token: p.b.bridge.token}
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	return b.core.Create(ctx, spec)
}

func (b *Backend) killQuietly(ctx context.Context, id sandbox.ID, rid string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := b.api.remove(kctx, rid); err != nil {
		b.log.Warn("delete a remote sandbox whose create did not finish (the sweep retries)", "sandbox", id, "err", err)
	}
}

// waitStarted polls a sandbox the provider is still creating or starting
// until it runs (bounded: three minutes).
func (b *Backend) waitStarted(ctx context.Context, out sandboxOut) (sandboxOut, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; out.State != "started" && i < 400; i++ {
		switch out.State {
		case "error", "build_failed", "destroyed", "destroying":
			return out, sandbox.Errorf(sandbox.ClassUnavailable, "the sandbox provider %s could not start the sandbox (%s): %s", b.cfg.Provider, out.State, out.ErrorReason)
		}
		if time.Now().After(deadline) {
			return out, sandbox.Errorf(sandbox.ClassTimeout, "the sandbox provider %s did not start the sandbox in 3 minutes (it is %s)", b.cfg.Provider, out.State)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		got, err := b.api.get(ctx, out.ID)
		if err != nil {
			return out, err
		}
		got.ToolboxProxyURL = firstNonEmpty(got.ToolboxProxyURL, out.ToolboxProxyURL)
		out = got
	}
	return out, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// toolboxURL is where the sandbox's toolbox answers: the provider's
// toolbox proxy, or the control plane's /toolbox when it names none.
func (b *Backend) toolboxURL(out sandboxOut) string {
	if out.ToolboxProxyURL != "" {
		return strings.TrimRight(out.ToolboxProxyURL, "/")
	}
	return b.api.base + "/toolbox"
}

func resourcesOf(d sandboxOut, def sandbox.Resources) sandbox.Resources {
	r := def
	if d.CPU > 0 {
		r.CPUs = d.CPU
	}
	if d.Memory > 0 {
		r.MemoryBytes = int64(d.Memory * (1 << 30))
	}
	if d.Disk > 0 {
		r.DiskBytes = int64(d.Disk * (1 << 30))
	}
	return r
}

func (b *Backend) box(id sandbox.ID) (*state, error) { return b.core.Box(id) }

// setState records the sandbox's new state; its previews' URLs go.
func (b *Backend) setState(id sandbox.ID, s sandbox.State) error {
	b.forgetPreviews(id)
	return b.core.SetState(id, s)
}

// forgetPreviews drops the sandbox's cached preview URLs: after a state
// change they may be stale, after a destroy they would only grow the map.
func (b *Backend) forgetPreviews(id sandbox.ID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.previews {
		if k.id == id {
			delete(b.previews, k)
		}
	}
}

// Stop implements backend.Backend: the provider stops the sandbox (its
// files stay; it is deleted after the lease unless started again).
func (b *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	st, err := b.box(id)
	if err != nil {
		return err
	}
	if st.State == sandbox.StateStopped {
		return nil
	}
	if err := b.api.stop(ctx, st.RemoteID); err != nil {
		return fmt.Errorf("stop at %s: %w", b.cfg.Provider, err)
	}
	return b.setState(id, sandbox.StateStopped)
}

// Start implements backend.Backend: the provider starts the sandbox.
func (b *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	st, err := b.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	if st.State != sandbox.StateRunning {
		if err := b.api.start(ctx, st.RemoteID); err != nil {
			return sandbox.Info{}, fmt.Errorf("start at %s: %w", b.cfg.Provider, err)
		}
		got, err := b.api.get(ctx, st.RemoteID)
		if err == nil {
			_, err = b.waitStarted(ctx, got)
		}
		if err != nil {
			return sandbox.Info{}, fmt.Errorf("start at %s: %w", b.cfg.Provider, err)
		}
		if err := b.api.renew(ctx, st.RemoteID, leaseMinutes(b.cfg.Lease)); err != nil {
			b.log.Warn("renew a started remote sandbox's lease", "sandbox", id, "err", err)
		}
		if err := b.setState(id, sandbox.StateRunning); err != nil {
			return sandbox.Info{}, err
		}
	}
	st, err = b.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.core.Info(st, sandbox.Spec{}), nil
}

// Destroy implements backend.Backend: the sandbox is deleted at the
// provider (or by the sweep, once it answers).
func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	err := b.core.Destroy(ctx, id)
	b.forgetPreviews(id)
	return err
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	return b.core.Inspect(ctx, id)
}

// Recover implements backend.Backend (see remote.Core.Recover).
func (b *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) { return b.core.Recover(ctx) }

// Sweep deletes at the provider the labelled sandboxes this daemon no
// longer knows. The loop calls it; tests may too.
func (b *Backend) Sweep(ctx context.Context) error { return b.core.Sweep(ctx) }

// Close implements backend.Closer: the loop and the bridge stop; the
// remote sandboxes and their states stay for the next start.
func (b *Backend) Close() error {
	err := b.core.Close()
	b.bridge.close()
	return err
}

// DialPort implements backend.PortDialer: a reverse proxy to the port's
// preview URL at the provider, with its preview token (HTTP and
// WebSocket).
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
	key := previewKey{id, port}
	b.mu.Lock()
	pv, ok := b.previews[key]
	b.mu.Unlock()
	if !ok {
		if pv, err = b.api.preview(ctx, st.RemoteID, port); err != nil {
			return nil, fmt.Errorf("preview at %s: %w", b.cfg.Provider, err)
		}
		b.mu.Lock()
		b.previews[key] = pv
		b.mu.Unlock()
	}
	target, err := url.Parse(pv.URL)
	if err != nil {
		return nil, fmt.Errorf("preview URL: %w", err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Del("X-Access-Token")
			pr.Out.Header.Del("Authorization")
			if pv.Token != "" {
				pr.Out.Header.Set("X-Daytona-Preview-Token", pv.Token)
			}
		},
		Transport:     b.cfg.HTTPClient.Transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			b.log.Debug("preview at the provider", "sandbox", id, "port", port, "err", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return remote.ServeOne(proxy), nil
}
