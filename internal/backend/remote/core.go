// Package remote is the core of the remote backends, the part every
// cloud provider shares: what the daemon keeps of each remote sandbox (a
// state file per sandbox, so a restarted daemon re-lists them), creates
// and deletes with their book-keeping, the lease loop that keeps running
// sandboxes alive at the provider while this daemon lives, and the sweep
// that reconciles the provider's sandboxes labelled with this daemon's
// node with the states (deleting the ones it no longer knows). A provider
// (internal/backend/remote/e2b, internal/backend/remote/daytona) brings
// its control plane through the small Provider interface and its data
// plane through the endpoint a sandbox reports; what differs in lifecycle
// (stop, pause, previews, metrics) stays in the provider's package, on top
// of the Core's state.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The labels (E2B metadata, Daytona labels) every remote sandbox carries.
const (
	LabelNode    = "agentbox-node"
	LabelSandbox = "agentbox-sandbox"
)

// Box is what the core keeps of one remote sandbox, its state file: the
// fields every provider has, and P, the provider's own (its fields sit
// beside the common ones in the one JSON object).
type Box[P any] struct {
	ID        sandbox.ID        `json:"id"`
	RemoteID  string            `json:"remote_id"`
	CreatedAt time.Time         `json:"created_at"`
	State     sandbox.State     `json:"state"`
	Resources sandbox.Resources `json:"resources"`
	Labels    map[string]string `json:"labels,omitempty"`
	P         P                 `json:"-"`
}

// boxFields are Box's common fields (its JSON without P).
type boxFields struct {
	ID        sandbox.ID        `json:"id"`
	RemoteID  string            `json:"remote_id"`
	CreatedAt time.Time         `json:"created_at"`
	State     sandbox.State     `json:"state"`
	Resources sandbox.Resources `json:"resources"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// MarshalJSON writes the common fields and P's in one object.
func (b Box[P]) MarshalJSON() ([]byte, error) {
	common, err := json.Marshal(boxFields{b.ID, b.RemoteID, b.CreatedAt, b.State, b.Resources, b.Labels})
	if err != nil {
		return nil, err
	}
	own, err := json.Marshal(b.P)
	if err != nil {
		return nil, err
	}
	own = bytes.TrimSpace(own)
	if len(own) < 2 || own[0] != '{' {
		return nil, fmt.Errorf("remote box: the provider's state is not a JSON object")
	}
	if string(own) == "{}" {
		return common, nil
	}
	// {common..., own...}
	out := append(common[:len(common)-1:len(common)-1], ',')
	return append(out, own[1:]...), nil
}

// UnmarshalJSON reads the common fields and P's from one object.
func (b *Box[P]) UnmarshalJSON(raw []byte) error {
	var c boxFields
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	var p P
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	*b = Box[P]{ID: c.ID, RemoteID: c.RemoteID, CreatedAt: c.CreatedAt, State: c.State, Resources: c.Resources, Labels: c.Labels, P: p}
	return nil
}

// Listed is one sandbox of a provider's list, as the core reads it.
type Listed struct {
	RemoteID string
	Labels   map[string]string
	// State is StateRunning, StatePaused or StateStopped; anything else
	// leaves the box's state as it is.
	State sandbox.State
	// Gone marks a sandbox the provider is deleting: a box of it is
	// dropped as if it were not listed.
	Gone bool
}

// Created is what a provider's create made.
type Created[P any] struct {
	RemoteID  string
	Resources sandbox.Resources
	P         P
}

// Provider is a provider's control plane and data plane, as the core
// uses them.
type Provider[P any] interface {
	// Validate refuses what the provider cannot do of spec (before any
	// call).
	Validate(spec sandbox.Spec) error
	// Create makes the sandbox at the provider, labelled with labels, and
	// returns once it runs; on an error after the provider made it, it
	// deletes it.
	Create(ctx context.Context, spec sandbox.Spec, labels map[string]string) (Created[P], error)
	// Remove deletes a sandbox at the provider (one it does not know is
	// not an error).
	Remove(ctx context.Context, remoteID string) error
	// List lists the provider's sandboxes that carry all of labels.
	List(ctx context.Context, labels map[string]string) ([]Listed, error)
	// Renew extends a running sandbox's lease by the configured lease.
	Renew(ctx context.Context, remoteID string) error
	// Template is the agentbox template of a box (after Recover).
	Template(box *Box[P]) sandbox.Template
	// Endpoint is where the daemon's agent client reaches the box's data
	// plane.
	Endpoint(box *Box[P]) sandbox.Endpoint
}

// Config configures a Core.
type Config struct {
	// Provider names the provider ("e2b", "daytona").
	Provider string
	// Kind is the template kind the backend runs.
	Kind string
	// Capabilities are the backend's (isolation checks on create).
	Capabilities backend.Capabilities
	// StateDir holds one state file per remote sandbox (mode 0600: they
	// may hold data-plane tokens).
	StateDir string
	// Node is this daemon's node id, the LabelNode of its sandboxes.
	Node string
	// Lease is how long a running sandbox lives at the provider unless
	// renewed; it is renewed every Lease/3.
	Lease  time.Duration
	Logger *slog.Logger
}

// Core is the shared part of a remote backend. Create it with New.
type Core[P any] struct {
	cfg  Config
	prov Provider[P]
	log  *slog.Logger

	mu       sync.Mutex
	boxes    map[sandbox.ID]*Box[P]
	inflight map[sandbox.ID]bool // creates under way: the sweep spares them
	// swept is when the last sweep of orphans succeeded (zero: never).
	swept time.Time

	stop     context.CancelFunc
	loopDone chan struct{}
}

// New returns the core of a backend over prov; nothing is called at the
// provider until Recover or the first Create.
func New[P any](cfg Config, prov Provider[P]) (*Core[P], error) {
	if cfg.StateDir == "" || cfg.Node == "" || cfg.Lease <= 0 {
		return nil, errors.New("remote backend: StateDir, Node and Lease are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("remote %s backend: state dir: %w", cfg.Provider, err)
	}
	return &Core[P]{cfg: cfg, prov: prov, log: cfg.Logger.With("component", "remote", "provider", cfg.Provider),
		boxes: map[sandbox.ID]*Box[P]{}, inflight: map[sandbox.ID]bool{}}, nil
}

// Log is the backend's logger.
func (c *Core[P]) Log() *slog.Logger { return c.log }

// Create makes the sandbox at the provider and keeps its state.
func (c *Core[P]) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if spec.Template.Kind != c.cfg.Kind {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "the %s backend runs %s templates, not %q", c.cfg.Provider, c.cfg.Kind, spec.Template.Kind)
	}
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	// What lives on this host cannot follow a sandbox to the provider:
	// refused, never silently dropped.
	if len(spec.Mounts) > 0 {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "a sandbox at the %s provider cannot mount host directories or volumes", c.cfg.Provider)
	}
	if err := backend.RefuseEgressRules(c.cfg.Provider, spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.CheckIsolation(c.cfg.Capabilities, spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := c.prov.Validate(spec); err != nil {
		return sandbox.Info{}, err
	}
	c.mu.Lock()
	if _, ok := c.boxes[spec.ID]; ok || c.inflight[spec.ID] {
		c.mu.Unlock()
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	c.inflight[spec.ID] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inflight, spec.ID)
		c.mu.Unlock()
	}()
	made, err := c.prov.Create(ctx, spec, map[string]string{LabelNode: c.cfg.Node, LabelSandbox: string(spec.ID)})
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("create at %s: %w", c.cfg.Provider, err)
	}
	box := &Box[P]{ID: spec.ID, RemoteID: made.RemoteID, CreatedAt: time.Now().UTC(), State: sandbox.StateRunning,
		Resources: made.Resources, Labels: spec.Labels, P: made.P}
	if err := c.save(box); err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if kerr := c.prov.Remove(kctx, made.RemoteID); kerr != nil {
			c.log.Warn("delete a remote sandbox whose state was not saved (the sweep retries)", "sandbox", spec.ID, "err", kerr)
		}
		return sandbox.Info{}, fmt.Errorf("save remote sandbox state: %w", err)
	}
	c.mu.Lock()
	c.boxes[spec.ID] = box
	c.mu.Unlock()
	c.log.Debug("created", "sandbox", spec.ID, "remote", made.RemoteID, "template", spec.Template.Ref)
	return c.Info(box, spec), nil
}

// Info is the box's Info; spec is the create's (zero after Recover).
func (c *Core[P]) Info(box *Box[P], spec sandbox.Spec) sandbox.Info {
	if spec.ID == "" {
		spec = sandbox.Spec{ID: box.ID, Template: c.prov.Template(box), Labels: box.Labels}
	}
	spec.AccessToken = ""
	spec.Resources = box.Resources
	return sandbox.Info{ID: box.ID, State: box.State, Spec: spec, CreatedAt: box.CreatedAt, Agent: c.prov.Endpoint(box)}
}

// Box returns the state of sandbox id (a snapshot: change it with
// Update).
func (c *Core[P]) Box(id sandbox.ID) (*Box[P], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	box, ok := c.boxes[id]
	if !ok {
		return nil, sandbox.ErrNotFound(id)
	}
	return box, nil
}

// Update changes a copy of the box of id with fn, keeps it and saves it.
func (c *Core[P]) Update(id sandbox.ID, fn func(*Box[P])) error {
	c.mu.Lock()
	box, ok := c.boxes[id]
	if !ok {
		c.mu.Unlock()
		return sandbox.ErrNotFound(id)
	}
	cp := *box
	fn(&cp)
	c.boxes[id] = &cp
	c.mu.Unlock()
	return c.save(&cp)
}

// SetState records a new state of sandbox id (and saves it).
func (c *Core[P]) SetState(id sandbox.ID, s sandbox.State) error {
	return c.Update(id, func(b *Box[P]) { b.State = s })
}

// Destroy deletes the sandbox at the provider. A provider that does not
// answer does not keep the sandbox here: its state goes, and the sweep
// deletes it at the provider once it answers again (it carries this
// daemon's labels and no state).
func (c *Core[P]) Destroy(ctx context.Context, id sandbox.ID) error {
	c.mu.Lock()
	box, ok := c.boxes[id]
	delete(c.boxes, id)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	if err := os.Remove(c.statePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("remove remote sandbox state", "sandbox", id, "err", err)
	}
	if err := c.prov.Remove(ctx, box.RemoteID); err != nil {
		c.log.Warn("delete at the provider failed; the sweep deletes the sandbox when the provider answers", "sandbox", id, "remote", box.RemoteID, "err", err)
		c.mu.Lock()
		c.swept = time.Time{}
		c.mu.Unlock()
	}
	return nil
}

// Inspect is the sandbox's Info from what the core knows.
func (c *Core[P]) Inspect(_ context.Context, id sandbox.ID) (sandbox.Info, error) {
	box, err := c.Box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return c.Info(box, sandbox.Spec{}), nil
}

// Recover reads the state files, matches them with the provider's list
// when it answers (those it no longer has are dropped) and sweeps the
// labelled sandboxes with no state. A provider that does not answer fails
// nothing: the sandboxes are reported as they were left, and the sweep
// runs later. It then starts the loop that renews the leases and sweeps.
func (c *Core[P]) Recover(ctx context.Context) ([]sandbox.Info, error) {
	entries, err := os.ReadDir(c.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("remote state dir: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(c.cfg.StateDir, e.Name()))
		var box Box[P]
		if err == nil {
			err = json.Unmarshal(raw, &box)
		}
		if err == nil {
			err = box.ID.Validate()
		}
		if err != nil || box.RemoteID == "" {
			c.log.Warn("dropping a remote sandbox state that does not read", "file", e.Name(), "err", err)
			_ = os.Remove(filepath.Join(c.cfg.StateDir, e.Name()))
			continue
		}
		c.mu.Lock()
		c.boxes[box.ID] = &box
		c.mu.Unlock()
	}
	listed, err := c.prov.List(ctx, map[string]string{LabelNode: c.cfg.Node})
	if err != nil {
		c.log.Warn("the provider does not answer: remote sandboxes are listed as they were left, the sweep retries", "err", err)
	} else {
		c.reconcile(ctx, listed, true)
	}
	var out []sandbox.Info
	c.mu.Lock()
	for _, box := range c.boxes {
		out = append(out, c.Info(box, sandbox.Spec{}))
	}
	c.mu.Unlock()
	c.startLoop()
	return out, nil
}

// reconcile matches the provider's labelled sandboxes with the boxes: a
// labelled sandbox with no box (and no create under way) is deleted; with
// drop, a box whose sandbox the provider no longer has is dropped, and
// the others take the provider's running, paused or stopped.
func (c *Core[P]) reconcile(ctx context.Context, listed []Listed, drop bool) {
	byRemote := map[string]Listed{}
	for _, s := range listed {
		byRemote[s.RemoteID] = s
	}
	var orphans []Listed
	c.mu.Lock()
	known := map[string]bool{}
	for id, box := range c.boxes {
		known[box.RemoteID] = true
		got, ok := byRemote[box.RemoteID]
		switch {
		case (!ok || got.Gone) && drop:
			c.log.Warn("the provider no longer has a remote sandbox", "sandbox", id, "remote", box.RemoteID)
			delete(c.boxes, id)
			_ = os.Remove(c.statePath(id))
		case ok && (got.State == sandbox.StatePaused || got.State == sandbox.StateStopped) && box.State == sandbox.StateRunning:
			cp := *box
			cp.State = got.State
			c.boxes[id] = &cp
		case ok && got.State == sandbox.StateRunning && box.State != sandbox.StateRunning:
			cp := *box
			cp.State = sandbox.StateRunning
			c.boxes[id] = &cp
		}
	}
	for _, s := range listed {
		if known[s.RemoteID] || s.Labels[LabelNode] != c.cfg.Node || c.inflight[sandbox.ID(s.Labels[LabelSandbox])] {
			continue
		}
		orphans = append(orphans, s)
	}
	c.mu.Unlock()
	for _, s := range orphans {
		c.log.Info("deleting a remote sandbox this daemon no longer knows", "remote", s.RemoteID, "sandbox", s.Labels[LabelSandbox])
		if err := c.prov.Remove(ctx, s.RemoteID); err != nil {
			c.log.Warn("delete an orphan remote sandbox", "remote", s.RemoteID, "err", err)
		}
	}
	c.mu.Lock()
	c.swept = time.Now()
	c.mu.Unlock()
}

// Sweep deletes at the provider the sandboxes with this daemon's label
// that it no longer knows (their creates failed half-way, their deletes
// were not heard). The loop calls it; tests may too.
func (c *Core[P]) Sweep(ctx context.Context) error {
	listed, err := c.prov.List(ctx, map[string]string{LabelNode: c.cfg.Node})
	if err != nil {
		return err
	}
	c.reconcile(ctx, listed, false)
	return nil
}

// startLoop starts renewing leases and sweeping, once.
func (c *Core[P]) startLoop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background()) //nolint:gosec // G118: cancel is kept in c.stop; Close calls it
	c.stop, c.loopDone = cancel, make(chan struct{})
	go c.loop(ctx)
}

// loop renews the lease of every running sandbox every Lease/3, and
// sweeps every few minutes (at once after a delete that failed).
func (c *Core[P]) loop(ctx context.Context) {
	defer close(c.loopDone)
	t := time.NewTicker(c.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		var running []*Box[P]
		for _, box := range c.boxes {
			if box.State == sandbox.StateRunning {
				running = append(running, box)
			}
		}
		due := time.Since(c.swept) > 5*time.Minute
		c.mu.Unlock()
		for _, box := range running {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := c.prov.Renew(cctx, box.RemoteID); err != nil && ctx.Err() == nil {
				c.log.Warn("renew a remote sandbox's lease", "sandbox", box.ID, "err", err)
			}
			cancel()
		}
		if due {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := c.Sweep(cctx); err != nil && ctx.Err() == nil {
				c.log.Warn("sweep of remote sandboxes", "err", err)
			}
			cancel()
		}
	}
}

// Close stops the loop; the remote sandboxes and their states stay for
// the next start.
func (c *Core[P]) Close() error {
	c.mu.Lock()
	stop, done := c.stop, c.loopDone
	c.stop = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return nil
}

func (c *Core[P]) statePath(id sandbox.ID) string {
	return filepath.Join(c.cfg.StateDir, string(id)+".json")
}

// save writes box's state file atomically.
func (c *Core[P]) save(box *Box[P]) error {
	raw, err := json.Marshal(box)
	if err != nil {
		return err
	}
	tmp := c.statePath(box.ID) + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.statePath(box.ID))
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
