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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
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
	LabelNode    = "agentbox-node"
	LabelSandbox = "agentbox-sandbox"
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
	cfg Config
	api *api
	log *slog.Logger

	mu       sync.Mutex
	boxes    map[sandbox.ID]*state
	inflight map[sandbox.ID]bool // creates under way: the sweep spares them
	// swept is when the last sweep of orphans succeeded (zero: never).
	swept time.Time

	stop     context.CancelFunc
	loopDone chan struct{}
}

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Pauser      = (*Backend)(nil)
	_ backend.StatsReader = (*Backend)(nil)
	_ backend.PortDialer  = (*Backend)(nil)
	_ backend.Closer      = (*Backend)(nil)
)

// state is what the backend keeps of one remote sandbox (its state file).
type state struct {
	ID           sandbox.ID        `json:"id"`
	RemoteID     string            `json:"remote_id"`
	Template     string            `json:"template"`
	EnvdToken    string            `json:"envd_token,omitempty"`
	TrafficToken string            `json:"traffic_token,omitempty"`
	Domain       string            `json:"domain,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	State        sandbox.State     `json:"state"`
	Resources    sandbox.Resources `json:"resources"`
	Labels       map[string]string `json:"labels,omitempty"`
}

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
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("remote e2b backend: state dir: %w", err)
	}
	return &Backend{
		cfg: cfg, log: cfg.Logger.With("component", "remote", "provider", cfg.Provider),
		api:   &api{base: strings.TrimRight(cfg.APIURL, "/"), key: cfg.APIKey, provider: cfg.Provider, http: cfg.HTTPClient},
		boxes: map[sandbox.ID]*state{}, inflight: map[sandbox.ID]bool{},
	}, nil
}

// Name implements backend.Backend: the provider's name.
func (b *Backend) Name() string { return b.cfg.Provider }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Pause: true, ResourceLimits: true, Templates: []string{TemplateKind}, Provider: b.cfg.Provider}
}

// remoteTemplate is the provider's template of t.
func remoteTemplate(t sandbox.Template) string {
	if name, ok := strings.CutPrefix(t.Ref, TemplatePrefix); ok {
		return name
	}
	return t.Ref
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if spec.Template.Kind != TemplateKind {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "the %s backend runs %s templates, not %q", b.cfg.Provider, TemplateKind, spec.Template.Kind)
	}
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	// What lives on this host cannot follow a sandbox to the provider:
	// refused, never silently dropped.
	if len(spec.Mounts) > 0 {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "a sandbox at the %s provider cannot mount host directories or volumes", b.cfg.Provider)
	}
	if err := backend.RefuseEgressRules(b.Name(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.CheckIsolation(b.Capabilities(), spec); err != nil {
		return sandbox.Info{}, err
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
	in := createIn{TemplateID: remoteTemplate(spec.Template), Timeout: int(b.cfg.Lease / time.Second), Secure: true,
		Metadata: map[string]string{LabelNode: b.cfg.Node, LabelSandbox: string(spec.ID)}, EnvVars: spec.Env}
	internet := spec.Network.Mode == sandbox.NetworkEgress
	in.AllowInternetAccess = &internet
	if internet && len(spec.Network.AllowOut)+len(spec.Network.DenyOut) > 0 {
		in.Network = &networkIn{AllowOut: spec.Network.AllowOut, DenyOut: spec.Network.DenyOut}
	}
	out, err := b.api.create(ctx, in)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("create at %s: %w", b.cfg.Provider, err)
	}
	st := &state{ID: spec.ID, RemoteID: out.SandboxID, Template: in.TemplateID, EnvdToken: out.EnvdAccessToken,
		CreatedAt: time.Now().UTC(), State: sandbox.StateRunning, Resources: spec.Resources, Labels: spec.Labels}
	if out.TrafficAccessToken != nil {
		st.TrafficToken = *out.TrafficAccessToken
	}
	if out.Domain != nil {
		st.Domain = *out.Domain
	}
	// What the provider gives the sandbox is what it has, whatever was
	// asked (E2B sizes sandboxes by template).
	if d, err := b.api.get(ctx, out.SandboxID); err == nil {
		st.Resources = resourcesOf(d, spec.Resources)
	}
	if err := b.save(st); err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if kerr := b.api.kill(kctx, out.SandboxID); kerr != nil {
			b.log.Warn("kill a remote sandbox whose state was not saved (the sweep retries)", "sandbox", spec.ID, "err", kerr)
		}
		return sandbox.Info{}, fmt.Errorf("save remote sandbox state: %w", err)
	}
	b.mu.Lock()
	b.boxes[spec.ID] = st
	b.mu.Unlock()
	b.log.Debug("created", "sandbox", spec.ID, "remote", out.SandboxID, "template", in.TemplateID)
	return b.info(st, spec), nil
}

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

// info is the sandbox's Info; spec is the create's (zero after Recover).
func (b *Backend) info(st *state, spec sandbox.Spec) sandbox.Info {
	if spec.ID == "" {
		spec = sandbox.Spec{ID: st.ID, Template: sandbox.Template{Ref: TemplatePrefix + st.Template, Kind: TemplateKind}, Labels: st.Labels}
	}
	spec.AccessToken = ""
	spec.Resources = st.Resources
	return sandbox.Info{ID: st.ID, State: st.State, Spec: spec, CreatedAt: st.CreatedAt, Agent: b.endpoint(st)}
}

// endpoint is where the sandbox's envd answers: the provider's data plane.
func (b *Backend) endpoint(st *state) sandbox.Endpoint {
	ep := sandbox.Endpoint{Network: "http", Address: b.portURL(st, envdPort), CodeAddress: b.portURL(st, codePort),
		Header:     map[string]string{"E2b-Sandbox-Id": st.RemoteID, "E2b-Sandbox-Port": fmt.Sprint(envdPort)},
		CodeHeader: map[string]string{"E2b-Sandbox-Port": fmt.Sprint(codePort)},
		Token:      st.EnvdToken}
	return ep
}

// portURL is the base URL of port of the sandbox at the provider.
func (b *Backend) portURL(st *state, port int) string {
	if b.cfg.SandboxURL != "" {
		return strings.TrimRight(b.cfg.SandboxURL, "/")
	}
	domain := b.cfg.Domain
	if st.Domain != "" {
		domain = st.Domain
	}
	return fmt.Sprintf("https://%d-%s.%s", port, st.RemoteID, domain)
}

// box returns the state of sandbox id.
func (b *Backend) box(id sandbox.ID) (*state, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.boxes[id]
	if !ok {
		return nil, sandbox.ErrNotFound(id)
	}
	return st, nil
}

// setState records a new state of sandbox id (and saves it).
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
	b.mu.Unlock()
	return b.save(&c)
}

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
	return b.info(st, sandbox.Spec{}), nil
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
	b.mu.Lock()
	cur, ok := b.boxes[st.ID]
	if !ok {
		b.mu.Unlock()
		return sandbox.ErrNotFound(st.ID)
	}
	c := *cur
	c.State = sandbox.StateRunning
	if out.EnvdAccessToken != "" {
		c.EnvdToken = out.EnvdAccessToken
	}
	b.boxes[st.ID] = &c
	b.mu.Unlock()
	return b.save(&c)
}

// Destroy implements backend.Backend: the sandbox is deleted at the
// provider. A provider that does not answer does not keep the sandbox
// here: its state goes, and the sweep deletes it at the provider once it
// answers again (it carries this daemon's labels and no state).
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
	if err := b.api.kill(ctx, st.RemoteID); err != nil {
		b.log.Warn("delete at the provider failed; the sweep deletes the sandbox when the provider answers", "sandbox", id, "remote", st.RemoteID, "err", err)
		b.mu.Lock()
		b.swept = time.Time{}
		b.mu.Unlock()
	}
	return nil
}

// Inspect implements backend.Backend, from what the backend knows.
func (b *Backend) Inspect(_ context.Context, id sandbox.ID) (sandbox.Info, error) {
	st, err := b.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info(st, sandbox.Spec{}), nil
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

// Recover implements backend.Backend: the sandboxes of the state files,
// as the provider sees them when it answers (those it no longer has are
// dropped), and a sweep of the provider's sandboxes with this daemon's
// label but no state. A provider that does not answer fails nothing:
// the sandboxes are reported as they were left, and the sweep runs later.
// It then starts the loop that renews the leases and sweeps.
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

// reconcile matches the provider's labelled sandboxes with the states:
// a labelled sandbox with no state (and no create under way) is killed;
// with drop, a state whose sandbox the provider no longer has is dropped,
// and the states of the others take the provider's running or paused.
func (b *Backend) reconcile(ctx context.Context, listed []sandboxOut, drop bool) {
	byRemote := map[string]sandboxOut{}
	for _, s := range listed {
		byRemote[s.SandboxID] = s
	}
	var orphans []sandboxOut
	b.mu.Lock()
	known := map[string]bool{}
	for id, st := range b.boxes {
		known[st.RemoteID] = true
		got, ok := byRemote[st.RemoteID]
		switch {
		case !ok && drop:
			b.log.Warn("the provider no longer has a remote sandbox", "sandbox", id, "remote", st.RemoteID)
			delete(b.boxes, id)
			_ = os.Remove(b.statePath(id))
		case ok && got.State == "paused" && st.State == sandbox.StateRunning:
			c := *st
			c.State = sandbox.StatePaused
			b.boxes[id] = &c
		case ok && got.State == "running" && st.State != sandbox.StateRunning:
			c := *st
			c.State = sandbox.StateRunning
			b.boxes[id] = &c
		}
	}
	for _, s := range listed {
		if known[s.SandboxID] || s.Metadata[LabelNode] != b.cfg.Node || b.inflight[sandbox.ID(s.Metadata[LabelSandbox])] {
			continue
		}
		orphans = append(orphans, s)
	}
	b.mu.Unlock()
	for _, s := range orphans {
		b.log.Info("deleting a remote sandbox this daemon no longer knows", "remote", s.SandboxID, "sandbox", s.Metadata[LabelSandbox])
		if err := b.api.kill(ctx, s.SandboxID); err != nil {
			b.log.Warn("delete an orphan remote sandbox", "remote", s.SandboxID, "err", err)
		}
	}
	b.mu.Lock()
	b.swept = time.Now()
	b.mu.Unlock()
}

// Sweep deletes at the provider the sandboxes with this daemon's label
// that it no longer knows (their creates failed half-way, their deletes
// were not heard). The loop calls it; tests may too.
func (b *Backend) Sweep(ctx context.Context) error {
	listed, err := b.api.list(ctx, map[string]string{LabelNode: b.cfg.Node})
	if err != nil {
		return err
	}
	b.reconcile(ctx, listed, false)
	return nil
}

// startLoop starts renewing leases and sweeping, once.
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

// loop renews the lease of every running sandbox every Lease/3, and
// sweeps every few minutes (at once while the last one failed).
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
			if err := b.api.setTimeout(cctx, st.RemoteID, b.cfg.Lease); err != nil && ctx.Err() == nil {
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

// Close implements backend.Closer: the loop stops; the remote sandboxes
// and their states stay for the next start.
func (b *Backend) Close() error {
	b.mu.Lock()
	stop, done := b.stop, b.loopDone
	b.stop = nil
	b.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return nil
}

func (b *Backend) statePath(id sandbox.ID) string {
	return filepath.Join(b.cfg.StateDir, string(id)+".json")
}

// save writes st's state file atomically.
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
