// Package manager is the one place that knows the backend, the warm pools,
// the store and the lifecycle rules (owners, end times, limits, sessions).
// Every API front-end (native /v1, agentscope, E2B) goes through it.
package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/admission"
	"github.com/moby/locker"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/volume"
)

// Config holds the lifecycle rules.
type Config struct {
	// Templates maps sandbox type names to templates ("base" -> "host").
	Templates map[string]string
	// Resolver resolves template names; nil serves "host" and Templates.
	Resolver TemplateResolver
	// TemplateNote says why a template or type name cannot be created yet
	// ("building 1m of about 4m", "not built"; "" when it can), for the
	// list of valid names an unknown template's error gives. Nil: none.
	TemplateNote func(name string) string
	// TemplateAdmins may snapshot into shared template names and use every
	// user's private templates; other users' snapshots go to their own
	// private namespace (template.PrivateName).
	TemplateAdmins []string
	// Committer stores snapshots as templates; nil: no snapshots.
	Committer TemplateCommitter
	// StorageQuota caps the bytes each user's private templates hold in
	// the template store (storage.go); 0 = no cap. MaxPrivateTemplates
	// caps their number; 0 = no cap. SnapshotMaxBytes caps one snapshot's
	// layer (its tar: sparse files at their apparent size); 0 = the
	// store's layer limit only. TemplateAdmins are exempt from all three.
	StorageQuota        int64
	MaxPrivateTemplates int
	SnapshotMaxBytes    int64
	// DiskReserve is space of the template store's filesystem a snapshot
	// leaves free: refused at start, aborted while it streams; 0 = none.
	DiskReserve int64
	// PoolTypes are the sandbox types that get a warm pool of PoolSize.
	PoolTypes []string
	PoolSize  int
	// PoolMaxUses > 1: a deleted sandbox that came from a pool is reset
	// in place and returned to it, until it served that many users (needs
	// a backend.Recycler).
	PoolMaxUses int

	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// PausedTTL destroys a sandbox that stayed paused this long; 0 = never.
	PausedTTL time.Duration
	// HeartbeatTimeout destroys session sandboxes idle for longer; 0 = never.
	HeartbeatTimeout time.Duration
	// ServiceStartTimeout bounds the wait for a template's service to be
	// ready at create (0: SERVICE_START_TIMEOUT's default).
	ServiceStartTimeout time.Duration

	// MaxInstances caps live sandboxes (pooled ones included); 0 = no cap.
	MaxInstances int
	// MaxPerUser caps live sandboxes per owner; 0 = no cap.
	MaxPerUser int

	DefaultResources sandbox.Resources
	MaxResources     sandbox.Resources
	ReadonlyMounts   []sandbox.Mount
	// DefaultMountDir, when set, gives each sandbox <dir>/<id> as /workspace.
	DefaultMountDir string

	// DefaultNetworkMode applies to requests without a network mode.
	DefaultNetworkMode sandbox.NetworkMode
	// DefaultIsolation is the isolation level of sandboxes whose request
	// and template name none ("": container). TemplateIsolation sets it
	// per template or sandbox type name; IsolationByUser is each user's
	// minimum level (see isolationFor).
	DefaultIsolation  sandbox.Isolation
	TemplateIsolation map[string]sandbox.Isolation
	IsolationByUser   map[string]sandbox.Isolation
	// ValidateNetwork checks a policy before anything is created (nil: only
	// the mode is checked).
	ValidateNetwork func(sandbox.Network) error
	// CheckRules checks a policy's egress rules for owner (the secrets
	// they use are owner's) before anything is created or changed (nil:
	// rules are refused).
	CheckRules func(ctx context.Context, owner string, n sandbox.Network) error

	// MaxRequestsPerUser caps the heavy requests (exec, code, file
	// transfers, snapshots) one user has in flight; 0 = no cap.
	MaxRequestsPerUser int
	// RequestMemory is the memory all heavy requests may reserve for their
	// buffers together (one user at most half of it); 0 = no limit.
	RequestMemory int64

	// NodeID names this daemon among replicas sharing a store: its records
	// carry it, and recovery leaves other nodes' records alone.
	NodeID string
	// NodeMaxSandboxes caps the sandboxes this daemon hands out at once
	// (pooled ones not counted); 0: no cap. Unlike MaxInstances it is this
	// replica's own room, whatever the others run.
	NodeMaxSandboxes int
	// NodeMaxMemory caps the memory limits of this replica's local
	// sandboxes together (NODE_MAX_MEMORY); 0: no cap.
	NodeMaxMemory int64
	// Overflow maps a template or type name to the remote template
	// (e2b:NAME) its creates go to when this host is full
	// (NODE_MAX_SANDBOXES, NODE_MAX_MEMORY): PROVIDER_ROUTES' overflow
	// entries.
	Overflow map[string]string
	// RemoteMaxPerUser caps the sandboxes each owner holds at remote
	// providers (PROVIDER_MAX_PER_USER); 0: no cap beyond MaxPerUser.
	RemoteMaxPerUser int
	// Nodes lists the live replicas, so the manager can tell a live
	// replica's sandbox from a lost one (nil: a lone daemon).
	Nodes NodeLister
	// PeerDestroy lets ReleaseSession destroy a session's sandboxes other
	// replicas run (nil: none are reached).
	PeerDestroy PeerDestroy

	// Volumes are the tenants' volumes (nil: none on this server).
	Volumes *volume.Service

	// Events records the sandboxes' lifecycle events (nil: none).
	Events *events.Log

	Logger  *slog.Logger
	Metrics *Metrics
}

// Manager owns the daemon's sandboxes. Create it with New, then Start it.
type Manager struct {
	cfg     Config
	backend backend.Backend
	store   store.Store
	nodes   NodeLister // the node registry (nil: a lone daemon)
	log     *slog.Logger
	metrics *Metrics

	mu      sync.Mutex
	entries map[sandbox.ID]*entry
	// nodeCreates counts creates holding a NodeMaxSandboxes slot (node.go).
	nodeCreates int
	// creatingMemory is the memory of the local creates under way, and
	// remoteCreates the remote ones per owner (placement.go).
	creatingMemory int64
	remoteCreates  map[string]int
	pools          map[string]*pool.Pool // by template name (Template.Ref)
	// claimPools are the pools the backend keeps itself (claimpool.go).
	claimPools map[string]*claimPool

	sessionLocks keyedMutex
	peerDestroy  PeerDestroy // another replica's sandbox of a session (sessions.go)
	// pauseLocks serialise Pause and Resume (and Stop, Start, Delete) of
	// one sandbox, by id: see lockPause.
	pauseLocks locker.Locker
	admission  *admission.Tracker
	storage    storageAccount
	ready      atomic.Bool
	down       atomic.Bool // Shutdown was called: backend events are ignored
	stopLoops  context.CancelFunc
	loopsDone  chan struct{}
	sweepDone  chan struct{} // lostSweepLoop ended
	// staleRecords are records of destroyed sandboxes whose delete failed
	// (the shared store was away); lostSweepLoop retries them.
	staleRecords map[sandbox.ID]bool
}

// entry is the manager's live view of one sandbox. rec is replaced, never
// mutated in place, so a snapshot handed to callers stays consistent; all
// fields are guarded by Manager.mu.
type entry struct {
	rec        *store.Record
	agent      sandbox.Endpoint
	client     *agentclient.Client
	timer      *time.Timer
	creating   bool // a placeholder counted against limits while the backend works
	destroying bool
	lastActive time.Time
	logs       *eventLog
}

// New returns a manager; call Start before serving requests.
func New(cfg Config, b backend.Backend, s store.Store) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = defaults.DefaultTimeout
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = defaults.MaxTimeout
	}
	if cfg.DefaultNetworkMode == "" {
		cfg.DefaultNetworkMode = sandbox.NetworkMode(defaults.DefaultNetworkMode)
	}
	if cfg.Templates == nil {
		cfg.Templates = map[string]string{"base": "host"}
	}
	if cfg.Resolver == nil {
		cfg.Resolver = builtinResolver{templates: cfg.Templates}
	}
	m := &Manager{
		cfg: cfg, backend: b, store: s, log: cfg.Logger.With("component", "manager"), metrics: cfg.Metrics,
		nodes: cfg.Nodes, peerDestroy: cfg.PeerDestroy,
		entries: map[sandbox.ID]*entry{}, pools: map[string]*pool.Pool{},
		admission: admission.New(cfg.MaxRequestsPerUser, cfg.RequestMemory),
	}
	if w, ok := b.(backend.ExitWatcher); ok {
		w.OnAgentExit(m.agentExited)
	}
	return m
}

// Ready reports whether Start has finished recovering sandboxes.
func (m *Manager) Ready() bool { return m.ready.Load() }

// Backend returns the backend (for front-ends that need its capabilities).
func (m *Manager) Backend() backend.Backend { return m.backend }

// Templates returns the type -> template map.
func (m *Manager) Templates() map[string]string { return m.cfg.Templates }

// Start reconciles the store with what the backend still runs (so a
// restarted daemon reattaches to its sandboxes and drops the dead ones),
// then starts the warm pools and the expiry loops.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.recover(ctx); err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.stopLoops = cancel
	m.loopsDone = make(chan struct{})
	m.sweepDone = make(chan struct{})
	go m.heartbeatLoop(loopCtx)
	go m.lostSweepLoop(loopCtx)
	m.startPools(loopCtx)
	if m.cfg.Volumes != nil {
		// Subpath mounts of sandboxes that ended while the daemon was away.
		m.cfg.Volumes.Sweep(func(id sandbox.ID) bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			_, ok := m.entries[id]
			return ok
		})
	}
	m.ready.Store(true)
	return nil
}

// Shutdown stops the pools and loops. With destroyAll every sandbox is
// destroyed (AUTO_CLEANUP); otherwise they keep running and a restarted
// daemon reattaches to them.
func (m *Manager) Shutdown(ctx context.Context, destroyAll bool) error {
	m.ready.Store(false)
	m.down.Store(true)
	if m.stopLoops != nil {
		m.stopLoops()
		<-m.loopsDone
		<-m.sweepDone
	}
	m.mu.Lock()
	pools := m.pools
	m.pools = map[string]*pool.Pool{}
	m.mu.Unlock()
	for _, p := range pools {
		p.Stop() // pooled sandboxes stay recorded; destroyed below or recovered later
	}
	if destroyAll {
		if err := m.deleteClaimPools(ctx); err != nil {
			m.log.Warn("delete the backend's warm pools", "err", err)
		}
	}
	m.mu.Lock()
	ids := make([]sandbox.ID, 0, len(m.entries))
	for id, e := range m.entries {
		if e.timer != nil {
			e.timer.Stop()
		}
		if !e.creating {
			ids = append(ids, id)
		}
	}
	m.mu.Unlock()
	if !destroyAll {
		m.closeClients()
		return nil
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var errMu sync.Mutex
	var errs []error
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id sandbox.ID) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := m.destroy(ctx, id, "server shutdown"); err != nil {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		}(id)
	}
	wg.Wait()
	m.closeClients()
	return errors.Join(errs...)
}

func (m *Manager) closeClients() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e.client != nil {
			e.client.Close()
			e.client = nil
		}
	}
}

// recover reconciles store records with the backend's sandboxes.
func (m *Manager) recover(ctx context.Context) error {
	recs, err := m.store.List(ctx)
	if err != nil {
		return fmt.Errorf("load sandbox records: %w", err)
	}
	infos, err := m.backend.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover backend sandboxes: %w", err)
	}
	live := map[sandbox.ID]sandbox.Info{}
	for _, in := range infos {
		live[in.ID] = in
	}
	now := time.Now()
	for _, rec := range recs {
		if !m.ownRecord(rec) {
			continue // another replica's sandbox
		}
		in, ok := live[rec.ID]
		delete(live, rec.ID)
		switch {
		case rec.State == sandbox.StateCreating:
			// The placeholder of a create the daemon died in (shared store):
			// whatever booted has no usable record.
			m.log.Warn("dropping sandbox whose create did not finish", "sandbox", rec.ID)
			if ok {
				_ = m.backend.Destroy(ctx, rec.ID)
			}
			_ = m.store.Delete(ctx, rec.ID)
		case !ok:
			m.log.Warn("dropping record of a sandbox the backend no longer has", "sandbox", rec.ID)
			_ = m.store.Delete(ctx, rec.ID)
			m.emit(rec, events.Lost, events.Cause{Kind: events.CauseDaemonRestart, Detail: "the backend no longer has it"}, nil, nil)
		case in.State == sandbox.StateStopped && rec.State == sandbox.StateStopped:
			// Stopped on purpose: it stays, its files kept, until its end time.
			m.mu.Lock()
			m.entries[rec.ID] = &entry{rec: rec, agent: in.Agent, lastActive: now, logs: newEventLog()}
			m.armTimerLocked(rec.ID, m.entries[rec.ID])
			m.mu.Unlock()
		case in.State == sandbox.StatePaused && rec.State != sandbox.StatePaused:
			// The daemon died between freezing it and recording that: the
			// pause did not happen as far as its caller knows.
			m.log.Warn("thawing sandbox a pause did not finish for", "sandbox", rec.ID)
			if pz, ok := m.backend.(backend.Pauser); !ok || pz.Resume(ctx, rec.ID) != nil {
				_ = m.backend.Destroy(ctx, rec.ID)
				_ = m.store.Delete(ctx, rec.ID)
				continue
			}
			in.State = sandbox.StateRunning
			fallthrough
		case in.State == sandbox.StateRunning || in.State == sandbox.StatePaused:
			m.recoverLive(ctx, rec, in, now)
		case in.State != sandbox.StateRunning:
			m.log.Warn("destroying sandbox whose agent died while the daemon was down", "sandbox", rec.ID, "reason", in.Reason)
			_ = m.backend.Destroy(ctx, rec.ID)
			_ = m.store.Delete(ctx, rec.ID)
			m.emit(rec, events.Lost, events.Cause{Kind: events.CauseAgentExit, Detail: in.Reason}, nil, nil)
		}
	}
	for id := range live {
		m.log.Warn("destroying sandbox with no record (crash during create)", "sandbox", id)
		_ = m.backend.Destroy(ctx, id)
	}
	m.metrics.setLive(m.countLive())
	return nil
}

// recoverLive takes back a sandbox the backend still runs or keeps paused.
func (m *Manager) recoverLive(ctx context.Context, rec *store.Record, in sandbox.Info, now time.Time) {
	if in.State == sandbox.StateRunning && rec.State == sandbox.StatePaused {
		// Thawed, but the daemon died before recording it: it runs again
		// with the time it had left.
		rec = rec.Clone()
		rec.State, rec.EndAt = sandbox.StateRunning, now.Add(max(rec.Remaining, m.cfg.DefaultTimeout))
		rec.PausedAt, rec.Remaining = time.Time{}, 0
		_ = m.store.Put(ctx, rec)
	}
	if rec.Pool == "" && rec.FromPool && rec.EndAt.IsZero() && rec.State == sandbox.StateRunning {
		// Taken from a shared pool, but the daemon died before the
		// hand-over gave it an end time: nobody got it.
		m.log.Info("destroying pooled sandbox whose hand-over did not finish", "sandbox", rec.ID)
		_ = m.backend.Destroy(ctx, rec.ID)
		_ = m.store.Delete(ctx, rec.ID)
		return
	}
	expired := !rec.EndAt.IsZero() && rec.EndAt.Before(now) && rec.Pool == ""
	if expired && (!rec.AutoPause || rec.State == sandbox.StatePaused) {
		m.log.Info("destroying sandbox that expired while the daemon was down", "sandbox", rec.ID)
		_ = m.backend.Destroy(ctx, rec.ID)
		_ = m.store.Delete(ctx, rec.ID)
		m.emit(rec, events.Expired, events.Cause{Kind: events.CauseTimeout, Detail: "while the daemon was down"}, nil, nil)
		return
	}
	e := &entry{rec: rec, agent: in.Agent, lastActive: now, logs: newEventLog()}
	e.logs.add("info", "reattached after daemon restart", map[string]any{"state": rec.State})
	m.emit(rec, events.Recovered, events.Cause{Kind: events.CauseDaemonRestart}, nil, map[string]any{"state": rec.State})
	m.mu.Lock()
	m.entries[rec.ID] = e
	if rec.Pool == "" {
		// An auto-pause sandbox that expired while the daemon was down
		// gets its timer at once: it is paused, not destroyed.
		m.armTimerLocked(rec.ID, e)
	}
	m.mu.Unlock()
}

// entryFor returns the entry of a sandbox owned by owner. Other owners'
// sandboxes, pooled ones and placeholders are not found: a user cannot even
// learn that someone else's sandbox exists.
func (m *Manager) entryFor(owner string, id sandbox.ID) (*entry, error) {
	if id.Validate() != nil {
		return nil, sandbox.ErrNotFound(id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok || e.creating || e.destroying || e.rec.Pool != "" || e.rec.Owner != owner {
		return nil, sandbox.ErrNotFound(id)
	}
	return e, nil
}

// clientLocked returns the entry's agent client, creating it on first use.
func (m *Manager) clientLocked(e *entry) *agentclient.Client {
	if e.client == nil {
		e.client = agentclient.Of(e.agent, e.rec.AccessToken)
	}
	return e.client
}

func (m *Manager) countLive() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

func newToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("manager: random token: %v", err))
	}
	return hex.EncodeToString(b)
}

// lockPause takes the pause lock of sandbox id and returns its release.
func (m *Manager) lockPause(id sandbox.ID) func() {
	m.pauseLocks.Lock(string(id))
	return func() { _ = m.pauseLocks.Unlock(string(id)) }
}

// keyedMutex serialises work per key (e.g. per session).
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	held chan struct{} // one element while locked: a wait can give up
	refs int
}

// lockCtx locks key with a wait that ends with ctx (its error then).
func (k *keyedMutex) lockCtx(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{held: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	drop := func() {
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.held <- struct{}{}:
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
	return func() {
		<-l.held
		drop()
	}, nil
}
