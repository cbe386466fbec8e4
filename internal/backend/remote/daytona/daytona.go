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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/remote/e2b"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TemplateKind is the template kind this backend runs; templates named
// TemplatePrefix+SNAPSHOT resolve to it, SNAPSHOT being the provider's.
const (
	TemplateKind   = "daytona"
	TemplatePrefix = "daytona:"
)

// The labels every remote sandbox carries (the E2B remote's names).
const (
	LabelNode    = e2b.LabelNode
	LabelSandbox = e2b.LabelSandbox
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

	mu       sync.Mutex
	boxes    map[sandbox.ID]*state
	inflight map[sandbox.ID]bool
	swept    time.Time
	previews map[previewKey]previewOut

	stop     context.CancelFunc
	loopDone chan struct{}
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

// state is what the backend keeps of one remote sandbox (its state file).
type state struct {
	ID         sandbox.ID        `json:"id"`
	RemoteID   string            `json:"remote_id"`
	Snapshot   string            `json:"snapshot"`
	ToolboxURL string            `json:"toolbox_url"`
	CreatedAt  time.Time         `json:"created_at"`
	State      sandbox.State     `json:"state"`
	Resources  sandbox.Resources `json:"resources"`
	Labels     map[string]string `json:"labels,omitempty"`
}

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
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("remote daytona backend: state dir: %w", err)
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	b := &Backend{
		cfg: cfg, log: cfg.Logger.With("component", "remote", "provider", cfg.Provider),
		api:   &api{base: strings.TrimRight(cfg.APIURL, "/"), key: cfg.APIKey, target: cfg.Target, provider: cfg.Provider, http: cfg.HTTPClient},
		boxes: map[sandbox.ID]*state{}, inflight: map[sandbox.ID]bool{}, previews: map[previewKey]previewOut{},
	}
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
	return backend.Capabilities{ResourceLimits: true, Templates: []string{TemplateKind}, Provider: b.cfg.Provider}
}

func leaseMinutes(d time.Duration) int { return max(1, int(d/time.Minute)) }

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if spec.Template.Kind != TemplateKind {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "the %s backend runs %s templates, not %q", b.cfg.Provider, TemplateKind, spec.Template.Kind)
	}
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	if len(spec.Mounts) > 0 {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "a sandbox at the %s provider cannot mount host directories or volumes", b.cfg.Provider)
	}
	if err := backend.RefuseEgressRules(b.Name(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.CheckIsolation(b.Capabilities(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if len(spec.Network.AllowOut)+len(spec.Network.DenyOut) > 0 {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "a sandbox at the %s provider takes no allow or deny lists through agentbox", b.cfg.Provider)
	}
	b.mu.Lock()
	if _, ok := b.boxes[spec.ID]; ok || b.inflight[spec.ID] {
		b.mu.Unlock()
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	b.inflight[spec.ID] = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.inflight, spec.ID)
		b.mu.Unlock()
	}()
	snap, _ := strings.CutPrefix(spec.Template.Ref, TemplatePrefix)
	lease := leaseMinutes(b.cfg.Lease)
	in := createIn{Snapshot: snap, Labels: map[string]string{LabelNode: b.cfg.Node, LabelSandbox: string(spec.ID)}, Env: spec.Env,
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
		return sandbox.Info{}, fmt.Errorf("create at %s: %w", b.cfg.Provider, err)
	}
	if out, err = b.waitStarted(ctx, out); err != nil {
		b.killQuietly(ctx, spec.ID, out.ID)
		return sandbox.Info{}, fmt.Errorf("create at %s: %w", b.cfg.Provider, err)
	}
	st := &state{ID: spec.ID, RemoteID: out.ID, Snapshot: snap, ToolboxURL: b.toolboxURL(out), CreatedAt: time.Now().UTC(),
		State: sandbox.StateRunning, Resources: resourcesOf(out, spec.Resources), Labels: spec.Labels}
	if err := b.save(st); err != nil {
		b.killQuietly(ctx, spec.ID, out.ID)
		return sandbox.Info{}, fmt.Errorf("save remote sandbox state: %w", err)
	}
	b.mu.Lock()
	b.boxes[spec.ID] = st
	b.mu.Unlock()
	b.log.Debug("created", "sandbox", spec.ID, "remote", out.ID, "snapshot", snap)
	return b.info(st, spec), nil
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

func (b *Backend) info(st *state, spec sandbox.Spec) sandbox.Info {
	if spec.ID == "" {
		spec = sandbox.Spec{ID: st.ID, Template: sandbox.Template{Ref: TemplatePrefix + st.Snapshot, Kind: TemplateKind}, Labels: st.Labels}
	}
	spec.AccessToken = ""
	spec.Resources = st.Resources
	return sandbox.Info{ID: st.ID, State: st.State, Spec: spec, CreatedAt: st.CreatedAt,
		Agent: sandbox.Endpoint{Network: "http", Address: b.bridge.url(), Header: map[string]string{headerSandbox: string(st.ID)}, Token: b.bridge.token}}
}

func (b *Backend) box(id sandbox.ID) (*state, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.boxes[id]
	if !ok {
		return nil, sandbox.ErrNotFound(id)
	}
	return st, nil
}

func (b *Backend) setState(id sandbox.ID, s sandbox.State) error {
	b.mu.Lock()
	st, ok := b.boxes[id]
	if !ok {
		b.mu.Unlock()
		return sandbox.ErrNotFound(id)
	}
	c := *st
	c.State = s
	b.boxes[id] = &c
	for k := range b.previews {
		if k.id == id {
			delete(b.previews, k)
		}
	}
	b.mu.Unlock()
	return b.save(&c)
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
	return b.info(st, sandbox.Spec{}), nil
}

// Destroy implements backend.Backend: the sandbox is deleted at the
// provider; one that does not answer is swept later.
func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	b.mu.Lock()
	st, ok := b.boxes[id]
	delete(b.boxes, id)
	b.mu.Unlock()
	if !ok {
		return nil
	}
	if err := os.Remove(b.statePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		b.log.Warn("remove remote sandbox state", "sandbox", id, "err", err)
	}
	if err := b.api.remove(ctx, st.RemoteID); err != nil {
		b.log.Warn("delete at the provider failed; the sweep deletes the sandbox when the provider answers", "sandbox", id, "remote", st.RemoteID, "err", err)
		b.mu.Lock()
		b.swept = time.Time{}
		b.mu.Unlock()
	}
	return nil
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(_ context.Context, id sandbox.ID) (sandbox.Info, error) {
	st, err := b.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info(st, sandbox.Spec{}), nil
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
	return e2b.ServeOne(proxy), nil
}

// Recover implements backend.Backend: the sandboxes of the state files as
// the provider sees them (those it no longer has are dropped), a sweep of
// the labelled ones with no state, then the lease and sweep loop.
func (b *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) {
	entries, err := os.ReadDir(b.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("remote state dir: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(b.cfg.StateDir, e.Name()))
		var st state
		if err == nil {
			err = json.Unmarshal(raw, &st)
		}
		if err == nil {
			err = st.ID.Validate()
		}
		if err != nil || st.RemoteID == "" {
			b.log.Warn("dropping a remote sandbox state that does not read", "file", e.Name(), "err", err)
			_ = os.Remove(filepath.Join(b.cfg.StateDir, e.Name()))
			continue
		}
		b.mu.Lock()
		b.boxes[st.ID] = &st
		b.mu.Unlock()
	}
	listed, err := b.api.list(ctx, map[string]string{LabelNode: b.cfg.Node})
	if err != nil {
		b.log.Warn("the provider does not answer: remote sandboxes are listed as they were left, the sweep retries", "err", err)
	} else {
		b.reconcile(ctx, listed, true)
	}
	var out []sandbox.Info
	b.mu.Lock()
	for _, st := range b.boxes {
		out = append(out, b.info(st, sandbox.Spec{}))
	}
	b.mu.Unlock()
	b.startLoop()
	return out, nil
}

// reconcile matches the provider's labelled sandboxes with the states (as
// the E2B remote's does): orphans are deleted; with drop, states the
// provider no longer has go, and the others take its started or stopped.
func (b *Backend) reconcile(ctx context.Context, listed []sandboxOut, drop bool) {
	byRemote := map[string]sandboxOut{}
	for _, s := range listed {
		byRemote[s.ID] = s
	}
	var orphans []sandboxOut
	b.mu.Lock()
	known := map[string]bool{}
	for id, st := range b.boxes {
		known[st.RemoteID] = true
		got, ok := byRemote[st.RemoteID]
		gone := !ok || got.State == "destroyed" || got.State == "destroying"
		switch {
		case gone && drop:
			b.log.Warn("the provider no longer has a remote sandbox", "sandbox", id, "remote", st.RemoteID)
			delete(b.boxes, id)
			_ = os.Remove(b.statePath(id))
		case ok && got.State == "stopped" && st.State == sandbox.StateRunning:
			c := *st
			c.State = sandbox.StateStopped
			b.boxes[id] = &c
		case ok && got.State == "started" && st.State != sandbox.StateRunning:
			c := *st
			c.State = sandbox.StateRunning
			b.boxes[id] = &c
		}
	}
	for _, s := range listed {
		if known[s.ID] || s.Labels[LabelNode] != b.cfg.Node || b.inflight[sandbox.ID(s.Labels[LabelSandbox])] || s.State == "destroyed" {
			continue
		}
		orphans = append(orphans, s)
	}
	b.mu.Unlock()
	for _, s := range orphans {
		b.log.Info("deleting a remote sandbox this daemon no longer knows", "remote", s.ID, "sandbox", s.Labels[LabelSandbox])
		if err := b.api.remove(ctx, s.ID); err != nil {
			b.log.Warn("delete an orphan remote sandbox", "remote", s.ID, "err", err)
		}
	}
	b.mu.Lock()
	b.swept = time.Now()
	b.mu.Unlock()
}

// Sweep deletes at the provider the labelled sandboxes this daemon no
// longer knows. The loop calls it; tests may too.
func (b *Backend) Sweep(ctx context.Context) error {
	listed, err := b.api.list(ctx, map[string]string{LabelNode: b.cfg.Node})
	if err != nil {
		return err
	}
	b.reconcile(ctx, listed, false)
	return nil
}

func (b *Backend) startLoop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stop, b.loopDone = cancel, make(chan struct{})
	go b.loop(ctx)
}

// loop renews the lease of every running sandbox every Lease/3 and sweeps
// every few minutes (at once after a failed delete).
func (b *Backend) loop(ctx context.Context) {
	defer close(b.loopDone)
	t := time.NewTicker(b.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		var running []*state
		for _, st := range b.boxes {
			if st.State == sandbox.StateRunning {
				running = append(running, st)
			}
		}
		due := time.Since(b.swept) > 5*time.Minute
		b.mu.Unlock()
		for _, st := range running {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := b.api.renew(cctx, st.RemoteID, leaseMinutes(b.cfg.Lease)); err != nil && ctx.Err() == nil {
				b.log.Warn("renew a remote sandbox's lease", "sandbox", st.ID, "err", err)
			}
			cancel()
		}
		if due {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := b.Sweep(cctx); err != nil && ctx.Err() == nil {
				b.log.Warn("sweep of remote sandboxes", "err", err)
			}
			cancel()
		}
	}
}

// Close implements backend.Closer: the loop and the bridge stop; the
// remote sandboxes and their states stay for the next start.
func (b *Backend) Close() error {
	b.mu.Lock()
	stop, done := b.stop, b.loopDone
	b.stop = nil
	b.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	b.bridge.close()
	return nil
}

func (b *Backend) statePath(id sandbox.ID) string {
	return filepath.Join(b.cfg.StateDir, string(id)+".json")
}

func (b *Backend) save(st *state) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := b.statePath(st.ID) + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, b.statePath(st.ID))
}
