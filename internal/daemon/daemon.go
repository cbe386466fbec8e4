// Package daemon assembles agentbox serve: configuration, backend, store,
// manager, HTTP API, and the listener, with graceful shutdown.
package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/broker"
	"github.com/agentbox/agentbox/internal/cluster"
	"github.com/agentbox/agentbox/internal/compat/agentscope"
	"github.com/agentbox/agentbox/internal/compat/e2b"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/doctor"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/history"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/autobuild"
	"github.com/agentbox/agentbox/internal/template/builder"
	"github.com/agentbox/agentbox/internal/template/builder/sandboxrunner"
	"github.com/agentbox/agentbox/internal/version"
	"github.com/agentbox/agentbox/internal/webhook"
)

// Options are what the daemon needs besides the configuration.
type Options struct {
	Config *config.Config
	// Backend overrides the native backend (tests use the fake one).
	Backend backend.Backend
	Logger  *slog.Logger
	// Listener overrides listening on Config.Addr() (tests pass :0 ones).
	Listener net.Listener
	// Ready, when set, is closed once the server accepts requests.
	Ready chan<- string
	// Banner, when set, gets the start's facts for a person (PrintBanner):
	// serve passes stdout.
	Banner io.Writer
}

// Run serves until ctx ends, then shuts down gracefully: in-flight requests
// get a grace period, and with AUTO_CLEANUP every sandbox is destroyed.
func Run(ctx context.Context, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Config.Workers > 1 && workerIndex() < 0 && opts.Listener == nil && opts.Backend == nil {
		return superviseWorkers(ctx, opts.Config, opts.Logger) // workers.go
	}
	s := &server{opts: opts, cfg: opts.Config, log: opts.Logger}
	for _, step := range []func(context.Context) error{
		s.prepareHost,       // limits, the data dir, what is refused before anything is set up
		s.openBackend,       // doctor's checks, sandbox networking, the backends
		s.openStores,        // sandbox records and the template store
		s.buildControlPlane, // builder, node registry, forwarder, manager
		s.mountDoors,        // data plane, the shared server and its doors, the tool kit
		s.start,             // listen, recover, background work, say where
	} {
		if err := step(ctx); err != nil {
			s.close()
			return err
		}
	}
	return s.serveUntilDone(ctx)
}

// server is one run of agentbox serve: each step of Run fills in the
// fields of its part for the steps after it, and pushes what it set up on
// the close path. The close path is one stack, run last-pushed first when
// a step fails and at shutdown, so that what is set up later (and uses
// what came before) is closed first.
//
// A part that calls a part made after it gets a method value of server
// (templateUsers, nodeSelf, hosts, desktopLink, the builder's sandboxes):
// it reads the field when called, and those calls only come once the
// steps are done (a heartbeat, a request, a build).
type server struct {
	opts    Options
	cfg     *config.Config
	log     *slog.Logger
	closers []closer

	// prepareHost
	dataDir                 string
	nofile                  uint64
	maxConns, maxConnsPerIP int
	// openBackend
	backend  backend.Backend // what the manager runs sandboxes on
	built    backend.Backend // the backend made here (not a test's), closed on a failed start
	netMgr   *netpolicy.Manager
	netOff   string // why sandboxes have loopback only
	buildIDs sandboxrunner.HostIDs
	// backendPhases times each step of the native backend's creates,
	// recycles and destroys (nil without the native backend); registered
	// with metrics in buildControlPlane.
	backendPhases *prometheus.HistogramVec
	// openStores
	store     store.Store
	nodes     cluster.Nodes // nil without a shared store
	tmplDir   string
	templates *template.Store
	// buildControlPlane
	node         string
	metrics      *prometheus.Registry
	templateGate func(ctx context.Context) (func(), error)
	builder      *builder.Builder
	builtins     *autobuild.Runner
	registry     *cluster.Registry
	forwarder    *cluster.Forwarder
	m            *manager.Manager
	events       *events.Log         // nil: EVENTS_ENABLED=false
	history      *history.History    // nil: METRICS_HISTORY_RESOLUTION=0
	audit        *audit.Log          // nil: AUDIT_ENABLED=false
	webhooks     *webhook.Registry   // nil without events
	dispatcher   *webhook.Dispatcher // nil without events
	vault        *secrets.Vault      // nil: the store keeps no documents
	brokerCA     *broker.CA          // nil: no egress broker
	// mountDoors
	api *httpapi.Server
	srv *http.Server
	// start
	address, announce string    // this replica's address for the others
	startedAt         time.Time // for the node registry
	serveErr          chan error
	peers             *peerAddrs
	background        sync.WaitGroup // the node registry's and peer set's loops
	stopBackground    context.CancelFunc
	stopBuilds        context.CancelFunc

	// The close path's state: graceful is set when ctx ended (not when a
	// step or the listener failed); managerStarted once Start returned;
	// shutDown once the manager shut down gracefully (the backend and
	// network then close with its AUTO_CLEANUP); shutdownErr is its error.
	graceful, managerStarted, buildsStarted, shutDown bool
	shutdownErr                                       error
}

// closer is one entry of the close path.
type closer struct {
	name  string
	close func() error
}

// push adds what a step set up to the close path.
func (s *server) push(name string, close func() error) {
	s.closers = append(s.closers, closer{name, close})
}

// close runs the close path, last-pushed first, once; it logs what fails
// to close and goes on.
func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i].close(); err != nil {
			s.log.Error("close "+s.closers[i].name, "err", err)
		}
	}
	s.closers = nil
}

// prepareHost raises the limits the daemon needs, makes the data dir and
// refuses what is wrong before anything is set up.
func (s *server) prepareHost(context.Context) error {
	cfg, log := s.cfg, s.log
	keepReadyPipePrivate()
	if len(cfg.APIKeys) == 0 && !cfg.Loopback() {
		return fmt.Errorf("refusing to listen on %s without an API key: set BEARER_TOKEN or API_KEYS, or HOST=127.0.0.1", cfg.Host)
	}
	for _, name := range cfg.Ignored {
		log.Warn("setting has no effect with this deployment", "setting", name)
	}
	s.nofile = raiseFileLimit(log)
	s.maxConns, s.maxConnsPerIP = connectionLimits(cfg.MaxConnections, cfg.MaxConnectionsPerIP, s.nofile)
	setMemoryLimit(cfg.RequestMemory, s.maxConns, log)
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	var err error
	s.dataDir, err = filepath.Abs(cfg.DataDir)
	return err
}

// openBackend sets up what sandboxes run on: after agentbox doctor's
// required checks (what the host lacks, all at once and in doctor's words,
// before any component trips over the first of it), sandbox networking,
// the native backend and, as configured, Docker and Kubernetes beside it.
// A test's backend (Options.Backend) replaces all of it.
func (s *server) openBackend(ctx context.Context) error {
	cfg, log := s.cfg, s.log
	// A failed start takes back what was set up here (the backend's state
	// mount and cgroups, the sandbox network's bridge and table); the
	// graceful shutdown closes whatever backend served, with AUTO_CLEANUP.
	if s.opts.Backend != nil {
		s.backend, s.netOff = s.opts.Backend, "the "+s.opts.Backend.Name()+" backend"
		s.push("backend", s.closeBackend)
		return nil
	}
	o := doctor.FromConfig(cfg)
	o.SkipOptional = true
	if err := doctor.Required(doctor.Run(ctx, o)); err != nil {
		return err
	}
	agent, err := FindAgent(cfg.AgentPath)
	if err != nil {
		return err
	}
	if s.netMgr, s.netOff, err = startNetwork(ctx, cfg, s.dataDir, log); err != nil {
		return err
	}
	if s.netMgr != nil {
		// Surviving sandboxes keep their networking; after a graceful
		// shutdown with AUTO_CLEANUP there are none, and the bridge and
		// firewall tables go too.
		s.push("sandbox networking", func() error { return s.netMgr.Close(s.shutDown && cfg.AutoCleanup) })
	}
	s.push("backend", s.closeBackend)
	ncfg := native.Config{Root: filepath.Join(s.dataDir, "native"), AgentPath: agent, Defaults: cfg.Resources, Logger: log,
		PrivateDirs: []string{s.dataDir, cfg.DefaultMountDir, cfg.StorageFolder},
		DiskReserve: int64(cfg.DiskReserve), DiskOvercommit: float64(cfg.DiskOvercommit),
		NofileSoft: cfg.NofileSoft, NofileHard: cfg.NofileHard,
		IDBase: cfg.IDBase, IDRanges: cfg.IDRanges, PauseReclaim: cfg.PauseReclaim, NoWarmReset: !cfg.PoolWarmReset || cfg.PoolMaxUses <= 1,
		LeaveCgroupMounts: !cfg.CgroupFavorDynmods, RunscPath: string(cfg.RunscPath)}
	s.backendPhases = newBackendPhases()
	ncfg.PhaseObserver = func(op, phase string, wall time.Duration) {
		s.backendPhases.WithLabelValues(op, phase).Observe(wall.Seconds())
	}
	if s.netMgr != nil {
		ncfg.Network = s.netMgr
		if cfg.NetworkBrokerPort != 0 {
			if ncfg.CABundle, err = s.prepareBroker(); err != nil {
				return err
			}
		}
	}
	nb, err := native.New(ncfg)
	if err != nil {
		return err
	}
	s.built = nb
	if resting, ok := nb.RestingIDs(); ok {
		// The build keeps cache mounts in the host id range no sandbox
		// is given.
		s.buildIDs = sandboxrunner.HostIDs{Base: cfg.IDBase, Ranges: cfg.IDRanges, Resting: resting}
	}
	if err := checkTemplates(cfg, nb); err != nil {
		return err
	}
	if s.built, err = withDocker(ctx, cfg, s.dataDir, agent, nb, s.templateStore, log); err != nil {
		return err
	}
	if s.built, err = withKube(ctx, cfg, s.built, log); err != nil {
		return err
	}
	if s.built, err = withRemote(cfg, s.dataDir, s.built, log); err != nil {
		return err
	}
	s.backend = s.built
	return nil
}

// closeBackend closes the backend made here when the start failed (its
// sandboxes of an earlier run stay as they are), whatever backend served
// after a graceful shutdown.
func (s *server) closeBackend() error {
	b := s.built
	if s.shutDown {
		b = s.backend
	}
	if c, ok := b.(backend.Closer); ok {
		return c.Close()
	}
	return nil
}

// openStores opens the sandbox records (bbolt, or Redis shared by
// replicas) and the template store.
func (s *server) openStores(ctx context.Context) error {
	st, nodes, closeStore, err := openStore(ctx, s.cfg, s.dataDir, s.log)
	if err != nil {
		return err
	}
	s.store, s.nodes = st, nodes
	s.push("state store", func() error { closeStore(); return nil })
	if s.vault, err = openVault(s.cfg.SecretsSettings, s.store, s.dataDir, s.log); err != nil {
		return err
	}
	s.tmplDir = templateDir(s.cfg, s.dataDir)
	if s.templates, err = openTemplateStore(ctx, s.cfg, s.tmplDir, s.templateUsers, s.log); err != nil {
		return err
	}
	s.push("template store", s.templates.Close)
	return nil
}

// templateUsers counts the live sandboxes of a template digest, for the
// template store (made before the manager that knows them).
func (s *server) templateUsers(digest string) int {
	if s.m == nil {
		return 0
	}
	return s.m.TemplateUsers(digest)
}

// templateStore is the template store once it is open, for the Docker
// backend (made before it) to load images the engine lacks from.
func (s *server) templateStore() *template.Store { return s.templates }

// buildControlPlane makes the builder and the built-in templates' builds,
// the node registry and the forwarder to the other replicas, and the
// manager over them all.
func (s *server) buildControlPlane(context.Context) error {
	cfg, log := s.cfg, s.log
	if cfg.DefaultNetworkMode == string(sandbox.NetworkEgress) && !s.backend.Capabilities().Egress {
		return fmt.Errorf("setting DEFAULT_NETWORK_MODE=egress: sandbox networking is unavailable (see NETWORK)")
	}
	s.node = nodeID(cfg, s.dataDir)
	if err := s.setUpTracing(); err != nil {
		return err
	}
	s.metrics = prometheus.NewRegistry()
	s.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.backendPhases != nil {
		s.metrics.MustRegister(s.backendPhases)
	}
	s.templateGate = httpapi.NewTemplateGate(cfg.TemplateMaxPulls)
	bld, err := newBuilder(cfg, s.dataDir, s.tmplDir, s.templates, buildSandboxes{s}, s.buildIDs, log)
	if err != nil {
		return err
	}
	s.builder = bld
	autoBuild := cfg.TemplateAutoBuild
	if s.opts.Backend != nil {
		autoBuild = nil // a test's fake backend cannot run build steps
	}
	s.builtins = newAutoBuild(autoBuild, s.tmplDir, s.templates, bld, log)
	// The built-in templates' states answer creates of those not built
	// yet (autobuild.go).
	types := typeTemplates(cfg)
	resolver := &builtinResolver{types: types, states: s.builtins,
		next: typeResolver{types: types, next: remoteResolver{provider: remoteKind(cfg, s.opts.Backend == nil),
			next: kubeResolver{enabled: cfg.Kube.Enabled && s.opts.Backend == nil, next: dockerResolver{enabled: cfg.DockerEnabled && s.opts.Backend == nil,
				next: newAutoPull(s.templates, cfg.TemplateAutoPull, s.templateGate, log)}}}}}
	s.registry = cluster.New(s.nodes, s.nodeSelf, cluster.DefaultTTL, log)
	s.forwarder = forwarder(cfg, s.node, s.store, s.registry, s.hosts, log)
	var peerDestroy manager.PeerDestroy
	if shared(s.store) {
		// A native session's release destroys the sandboxes other
		// replicas run.
		peerDestroy = s.forwarder.DestroyBy
	}
	s.openEvents()
	s.openAudit()
	vols := s.openVolumes()
	s.m = manager.New(manager.Config{
		Volumes:   vols,
		Events:    s.events,
		Templates: cfg.Templates, TemplateAdmins: cfg.TemplateAdmins, PoolTypes: cfg.DefaultTypes, PoolSize: cfg.PoolSize, PoolMaxUses: cfg.PoolMaxUses,
		DefaultTimeout: cfg.DefaultTimeout, MaxTimeout: cfg.MaxTimeout, HeartbeatTimeout: cfg.HeartbeatTimeout,
		PausedTTL:           cfg.PausedTTL,
		ServiceStartTimeout: cfg.ServiceStartTimeout,
		MaxInstances:        cfg.MaxInstances, MaxPerUser: cfg.MaxPerUser,
		DefaultResources: cfg.Resources, MaxResources: cfg.MaxResources,
		ReadonlyMounts: cfg.ReadonlyMounts, DefaultMountDir: cfg.DefaultMountDir,
		Logger: log, Metrics: manager.NewMetrics(s.metrics),
		MaxRequestsPerUser: cfg.MaxRequestsPerUser, RequestMemory: cfg.RequestMemory,
		DefaultNetworkMode: sandbox.NetworkMode(cfg.DefaultNetworkMode),
		DefaultIsolation:   sandbox.Isolation(cfg.DefaultIsolation), TemplateIsolation: cfg.TemplateIsolation, IsolationByUser: cfg.IsolationByUser,
		ValidateNetwork: netpolicy.Validate, Resolver: routeResolver{routes: cfg.ProviderRoutes.Always(), next: resolver}, TemplateNote: resolver.note,
		NodeMaxMemory: int64(cfg.NodeMaxMemory), Overflow: cfg.ProviderRoutes.Overflow(), RemoteMaxPerUser: cfg.ProviderMaxUser, Committer: s.templates, NodeID: s.node, NodeMaxSandboxes: cfg.NodeMaxSandboxes,
		StorageQuota: int64(cfg.StorageQuota), MaxPrivateTemplates: cfg.MaxPrivateTemplates, SnapshotMaxBytes: int64(cfg.SnapshotMaxBytes),
		DiskReserve: int64(cfg.DiskReserve), Nodes: s.registry.List, PeerDestroy: peerDestroy,
		CheckRules: s.checkRules,
	}, s.backend, s.store)
	// Closed in this order: the builds (they run sandboxes on the
	// manager), the manager, then the registry, which keeps this replica
	// announced while the manager shuts down. The registry's loops start
	// with the manager (start).
	s.push("node registry", func() error {
		if s.stopBackground != nil {
			s.stopBackground()
			s.background.Wait()
		}
		return nil
	})
	s.push("manager", s.shutdownManager)
	if err := s.startBroker(); err != nil {
		return err
	}
	if p := remoteKind(cfg, s.opts.Backend == nil); p != "" {
		s.metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentbox_sandboxes_remote",
			Help: "Sandboxes this replica holds at a remote provider.", ConstLabels: prometheus.Labels{"provider": p}},
			func() float64 { return float64(s.m.RemoteCount(p)) }))
	}
	s.openHistory()
	s.push("built-in template builds", func() error {
		if s.buildsStarted {
			// A build in progress stops (its finished steps stay in the
			// build cache for the next start) before the manager it runs
			// sandboxes on.
			s.stopBuilds()
			s.builtins.Wait()
		}
		return nil
	})
	return nil
}

// openEvents starts the event log and the webhook deliveries over the
// state store (every replica sharing it reads the same events). They close
// after the manager, whose shutdown records its last events.
func (s *server) openEvents() {
	cfg := s.cfg
	el, ok := s.store.(store.EventLog)
	docs := docsOf(s.store)
	if !cfg.EventsEnabled || !ok || docs == nil {
		return
	}
	s.events = events.New(events.Config{Store: el, Node: s.node, Retention: cfg.EventsRetention, Max: cfg.EventsMax, Logger: s.log.With("component", "events")})
	s.webhooks = webhook.NewRegistry(docs, cfg.WebhookMaxPerUser)
	s.dispatcher = webhook.NewDispatcher(webhook.Config{Registry: s.webhooks, AllowPrivate: cfg.WebhookAllowPrivate,
		Timeout: cfg.WebhookTimeout, MaxAttempts: cfg.WebhookMaxAttempts, Backoff: cfg.WebhookBackoff, Queue: cfg.WebhookQueue,
		Formats: map[string]func(events.Event) ([]byte, error){"e2b": e2b.EncodeEvent},
		Logger:  s.log.With("component", "webhook")})
	s.events.Subscribe(s.dispatcher.Events)
	counter := func(name, help string, f func() float64) {
		s.metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	counter("agentbox_events_recorded_total", "Lifecycle events this replica recorded.", func() float64 { return float64(s.events.Recorded()) })
	counter("agentbox_events_dropped_total", "Lifecycle events this replica could not record (buffer full, store away).", func() float64 { return float64(s.events.Dropped()) })
	for i, name := range []string{"delivered", "failed", "dropped"} {
		counter("agentbox_webhook_deliveries_"+name+"_total", "Webhook deliveries "+name+" by this replica.", func() float64 {
			c := [3]int64{}
			c[0], c[1], c[2] = s.dispatcher.Counts()
			return float64(c[i])
		})
	}
	s.events.Start()
	s.dispatcher.Start()
	s.push("events", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.events.Close(ctx)
		s.dispatcher.Close()
		return nil
	})
}

// openAudit starts the audit log over the state store's second log. It
// closes after the HTTP server, so the last requests' entries are written.
func (s *server) openAudit() {
	al, ok := s.store.(store.AuditLogs)
	if !s.cfg.AuditEnabled || !ok {
		return
	}
	s.audit = audit.New(audit.Config{Store: al.AuditLog(), Node: s.node, Retention: s.cfg.AuditRetention, Max: s.cfg.AuditMax,
		Logger: s.log.With("component", "audit")})
	for name, f := range map[string]func() int64{"recorded": s.audit.Recorded, "dropped": s.audit.Dropped} {
		s.metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "agentbox_audit_" + name + "_total",
			Help: "Audit entries this replica " + name + "."}, func() float64 { return float64(f()) }))
	}
	s.audit.Start()
	s.push("audit log", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.audit.Close(ctx)
		return nil
	})
}

// openHistory starts sampling the manager's sandboxes for the metrics
// history; it stops before the manager does.
func (s *server) openHistory() {
	if s.cfg.MetricsHistoryResolution <= 0 {
		return
	}
	var docs store.Docs
	if s.cfg.MetricsHistoryFlush > 0 {
		docs = docsOf(s.store) // a copy every replica and a restart read
	}
	s.history = history.New(history.Config{Resolution: s.cfg.MetricsHistoryResolution, Points: s.cfg.MetricsHistoryPoints,
		Sandboxes: s.m.Sampled, Stats: s.m.SampleStats, Docs: docs, FlushEvery: s.cfg.MetricsHistoryFlush,
		Logger: s.log.With("component", "history")})
	s.history.Start()
	s.push("metrics history", func() error { s.history.Close(); return nil })
}

// shutdownManager shuts the started manager down: with AUTO_CLEANUP every
// sandbox is destroyed, after a graceful stop only.
func (s *server) shutdownManager() error {
	if !s.managerStarted {
		return nil
	}
	cleanup, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.m.Shutdown(cleanup, s.graceful && s.cfg.AutoCleanup); err != nil {
		s.shutdownErr = err
		return nil // Run returns it
	}
	s.shutDown = s.graceful // the backend and network close as AUTO_CLEANUP says
	return nil
}

// nodeSelf is this replica's entry in the node registry, with its load.
func (s *server) nodeSelf() store.Node {
	l := s.m.Load()
	return store.Node{ID: s.node, Address: s.address, Backends: []string{s.backend.Name()}, Version: version.Version,
		Sandboxes: l.Sandboxes, Pooled: l.Pooled, MemoryBytes: l.MemoryBytes, MaxSandboxes: s.cfg.NodeMaxSandboxes, StartedAt: s.startedAt}
}

// hosts reports whether this replica runs sandbox id, for the forwarder.
func (s *server) hosts(id sandbox.ID) bool { return s.m.Hosts(id) }

// buildSandboxes runs the builder's steps in sandboxes of the server's
// manager (made after the builder: the manager resolves templates through
// the built-in builds' states).
type buildSandboxes struct{ s *server }

func (b buildSandboxes) RunBuildSandbox(ctx context.Context, spec sandbox.Spec, fn func(ctx context.Context, sb manager.BuildSandbox) error) error {
	return b.s.m.RunBuildSandbox(ctx, spec, fn)
}

// Build steps run in image sandboxes.
func (b buildSandboxes) NetworkAvailable() bool { return b.s.m.EgressAvailable(sandbox.TemplateImage) }

// desktopLink is agentscope's desktop URL: the shared server's signed
// noVNC link (the server is made after its doors).
func (s *server) desktopLink(ctx context.Context, owner string, id sandbox.ID, base string) (string, error) {
	return s.api.DesktopLink(ctx, owner, id, base)
}

// mountDoors makes the data plane every front end works inside sandboxes
// through, the protocol front ends, the tool kit, and the shared server
// they are mounted on, with the HTTP server over it.
func (s *server) mountDoors(ctx context.Context) error {
	cfg, log, m := s.cfg, s.log, s.m
	secret, err := loadOrCreateSecret(filepath.Join(s.dataDir, "preview.key"))
	if err != nil {
		return err
	}
	objects, err := workspaceObjects(ctx, cfg)
	if err != nil {
		return err
	}
	dp := dataplane.New(dataplane.Config{MaxExecOutput: cfg.MaxExecOutputBytes, Registry: s.metrics, Logger: log}, m, m.Admission())
	var peers agentscope.Peers
	if shared(s.store) {
		peers = s.forwarder // agentscope's calls are served by the replica that runs the sandbox
	}
	as := agentscope.New(agentscope.Config{DataPlane: dp, APIKeys: cfg.APIKeys, Prefix: cfg.ContainerPrefix, DefaultTypes: cfg.DefaultTypes,
		StorageFolder: cfg.StorageFolder, Objects: objects, SandboxTimeout: cfg.MaxTimeout, MaxOutput: cfg.MaxExecOutputBytes,
		MaxUploadBytes: cfg.MaxUploadBytes, Version: version.Version, Logger: log, DesktopLink: s.desktopLink, Docs: docsOf(s.store), Peers: peers}, m)
	tools := newToolKit(cfg, as, log)
	s.api = httpapi.New(httpapi.Config{DataPlane: dp, APIKeys: cfg.APIKeys, MaxUploadBytes: cfg.MaxUploadBytes, Logger: log, Registry: s.metrics,
		PreviewDomain: string(cfg.PreviewDomain), PreviewSecret: secret, MetricsToken: cfg.MetricsToken, NoVNCDir: string(cfg.NoVNCDir),
		PreviewMaxPerUser: cfg.PreviewMaxPerUser, PreviewHeaderTimeout: cfg.PreviewHeaderTimeout,
		Templates: s.templates, TemplateAdmins: cfg.TemplateAdmins, MaxImportBytes: cfg.TemplateMaxImport,
		ImportDir: filepath.Join(s.tmplDir, "tmp"), AcquireTemplateOp: s.templateGate,
		Nodes: s.registry.List, BuiltinTemplates: s.builtins.Statuses,
		Bootstrap: &httpapi.BootstrapConfig{Store: s.templates, CacheDir: filepath.Join(s.tmplDir, "bootstrap")},
		Builds:    &httpapi.BuildConfig{Builder: s.builder, Store: s.templates},
		Tools:     tools.mcp,
		Events:    s.events, Webhooks: s.webhooks, WebhookDispatcher: s.dispatcher, WebhookAllowPrivate: cfg.WebhookAllowPrivate,
		History: s.history, Audit: s.audit, Secrets: s.vault,
		// The protocol front ends, in the order they claim refusals:
		// agentscope's methods are any path at the root, so it is last.
		Doors: []httpapi.Door{
			e2b.New(e2b.Config{DataPlane: dp, APIKeys: cfg.APIKeys, MaxUploadBytes: cfg.MaxUploadBytes, Templates: s.templates,
				Builtins:       s.builtins.Statuses,
				TemplateAdmins: cfg.TemplateAdmins, Builder: s.builder, BuildDir: filepath.Join(s.tmplDir, "tmp"), Logger: log, Events: s.events,
				Webhooks: s.webhooks, WebhookDispatcher: s.dispatcher, WebhookAllowPrivate: cfg.WebhookAllowPrivate, History: s.history,
				VolumeTokenKey: secret, Secrets: s.vault}, m),
			s.daytonaDoor(dp), // everything under /api
			as,
		},
	}, m)
	s.push("doors", s.api.Close)
	s.srv = &http.Server{
		Handler:           s.handler(),
		ConnContext:       connContext,
		ReadHeaderTimeout: cfg.HeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	s.srv.RegisterOnShutdown(s.api.EndStreams)
	s.push("HTTP server", s.stopHTTP)
	tools.serve(s.api.Handler(), log)
	// First at shutdown: it ends the MCP sessions (destroying their
	// sandboxes) and their streams, which the HTTP server would wait for.
	s.push("tool kit", tools.close)
	return nil
}

// handler is the shared server's, behind the forwarder (a request for a
// sandbox another replica runs goes there), the body timeout and, without
// API keys, the keyless notice (authnotice.go).
func (s *server) handler() http.Handler {
	h := withPeerConns(s.forwarder.Peer, withBodyTimeout(s.forwarder.Wrap(s.api.Handler()), s.cfg.BodyTimeout))
	if len(s.cfg.APIKeys) == 0 {
		h = keylessNotice(h, s.log)
	}
	return h
}

// stopHTTP stops the HTTP server: in-flight requests get a grace period
// after a graceful stop, none when the start failed.
func (s *server) stopHTTP() error {
	if !s.graceful {
		return s.srv.Close()
	}
	grace, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(grace); err != nil {
		return s.srv.Close()
	}
	return nil
}

// start listens and serves (/healthz answers at once; /readyz waits for
// the recovery of old sandboxes), starts the manager, the built-in
// builds and the node registry, and says where it serves.
func (s *server) start(ctx context.Context) error {
	cfg, log := s.cfg, s.log
	ln, own := s.opts.Listener, net.Listener(nil)
	var err error
	switch {
	case ln != nil:
	case workerIndex() >= 0:
		if ln, own, s.announce, err = workerListeners(ctx, cfg); err != nil {
			return err
		}
	default:
		if ln, err = net.Listen("tcp", cfg.Addr()); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	addr := ln.Addr().String()
	s.address, s.startedAt = nodeAddress(cfg, addr, s.announce), time.Now().UTC()
	// Other replicas' connections are counted per replica once they
	// authenticate, and their addresses may have CLUSTER_MAX_CONNS
	// connections awaiting that beyond MAX_CONNECTIONS_PER_IP (connlimit.go).
	var isPeer func(netip.Addr) bool
	if s.nodes != nil && cfg.ClusterSecret != "" {
		s.peers = &peerAddrs{}
		isPeer = s.peers.has
	}
	s.serveErr = make(chan error, 2) // the public listener, and a worker's own
	go func() {
		s.serveErr <- s.srv.Serve(newLimitListener(ln, s.maxConns, s.maxConnsPerIP, cfg.ClusterMaxConns, isPeer, log))
	}()
	if own != nil {
		// A worker's own port, where the other replicas forward to it.
		go func() {
			s.serveErr <- s.srv.Serve(newLimitListener(own, s.maxConns, s.maxConnsPerIP, cfg.ClusterMaxConns, isPeer, log))
		}()
	}
	if len(cfg.APIKeys) > 0 && cfg.MetricsToken == "" {
		log.Info("METRICS_TOKEN is not set: /metrics is refused to every caller")
	}
	if len(cfg.APIKeys) == 0 {
		log.Warn("no API key configured: authentication is off and the server only listens on loopback", "addr", addr)
	}
	log.Info("agentbox serving", "addr", addr, "version", version.Version, "backend", s.backend.Name(),
		"data_dir", s.dataDir, "pool_size", cfg.PoolSize, "auto_cleanup", cfg.AutoCleanup,
		"max_connections", s.maxConns, "max_connections_per_ip", s.maxConnsPerIP, "open_files_limit", s.nofile)
	if err := s.m.Start(ctx); err != nil {
		return err
	}
	s.managerStarted = true
	var buildCtx context.Context
	buildCtx, s.stopBuilds = context.WithCancel(ctx)
	s.builtins.Start(buildCtx)
	s.buildsStarted = true
	var bg context.Context
	bg, s.stopBackground = context.WithCancel(context.WithoutCancel(ctx))
	s.background.Add(1)
	go func() { defer s.background.Done(); s.registry.Run(bg) }()
	if s.peers != nil {
		s.background.Add(1)
		go func() { defer s.background.Done(); s.peers.run(bg, s.registry.List, s.node, log) }()
	}
	info := collectStartInfo(ctx, cfg, addr, s.dataDir, s.backend.Name(), s.templates, s.netMgr, s.netOff)
	LogStart(log, info)
	if s.opts.Banner != nil && workerIndex() <= 0 { // once for WORKERS
		PrintBanner(s.opts.Banner, info)
	}
	if s.opts.Ready != nil {
		s.opts.Ready <- addr
	}
	workerReady()
	return nil
}

// serveUntilDone serves until ctx ends (a graceful stop) or a listener
// fails, then runs the close path.
func (s *server) serveUntilDone(ctx context.Context) error {
	var err error
	select {
	case err = <-s.serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		} else {
			err = fmt.Errorf("serve: %w", err)
		}
	case <-ctx.Done():
	}
	if err == nil {
		log := s.log
		log.Info("shutting down", "auto_cleanup", s.cfg.AutoCleanup)
		s.graceful = true
	}
	s.close()
	switch {
	case err != nil:
		return err
	case s.shutdownErr != nil:
		return fmt.Errorf("shutdown: %w", s.shutdownErr)
	}
	s.log.Info("stopped")
	return nil
}

// loadOrCreateSecret returns the 32-byte secret stored at path, creating it
// on first use.
func loadOrCreateSecret(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return b, nil
}

// startNetwork brings up sandbox networking as NETWORK says: nil (and no
// error) when it is off, or when it is auto and the kernel cannot do it,
// with the reason.
func startNetwork(ctx context.Context, cfg *config.Config, dataDir string, log *slog.Logger) (*netpolicy.Manager, string, error) {
	if cfg.Network == "off" {
		return nil, "NETWORK=off", nil
	}
	m, err := netpolicy.New(ctx, netpolicy.Config{
		Bridge: string(cfg.NetworkBridge), Subnet: cfg.NetworkSubnet.Prefix(), Upstream: cfg.NetworkDNS,
		AllowHostPorts: cfg.NetworkHostPorts, AllowPrivate: cfg.NetworkPrivate,
		BandwidthBits: uint64(cfg.NetworkBandwidth), MaxConns: cfg.NetworkMaxConns, BrokerPort: cfg.NetworkBrokerPort,
		StateDir: filepath.Join(dataDir, "net"), Logger: log,
	})
	if err != nil {
		if cfg.Network == "on" {
			return nil, "", fmt.Errorf("setting NETWORK=on: sandbox networking unavailable: %w", err)
		}
		log.Warn("sandbox networking unavailable; sandboxes get loopback only (NETWORK=auto)", "err", err)
		return nil, "NETWORK=auto: " + err.Error(), nil
	}
	return m, "", nil
}

// FindAgent returns the agent binary: the configured path, else the one
// next to this executable.
func FindAgent(configured string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("setting AGENT_PATH: %w", err)
		}
		return configured, nil
	}
	exe, err := native.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(exe), "agentbox-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("agentbox-agent not found next to the agentbox binary (run make build, or set AGENT_PATH)")
}

// checkTemplates fails the start when a configured template cannot be
// booted or would expose the host (see native's dir: template rules).
func checkTemplates(cfg *config.Config, nb *native.Backend) error {
	names := make([]string, 0, len(cfg.Templates))
	for name := range cfg.Templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		target := cfg.Templates[name]
		if target != sandbox.TemplateHost && !strings.HasPrefix(target, "dir:") {
			continue // a template of the store, checked when resolved
		}
		t, err := manager.ConfiguredTemplate(name, target)
		if err == nil {
			err = nb.CheckTemplate(t)
		}
		if err != nil {
			return fmt.Errorf("setting SANDBOX_TEMPLATES: template %q: %w", name, err)
		}
	}
	return nil
}

// newBackendPhases is agentbox_backend_phase_seconds: the wall time of
// each step of a native create, recycle or destroy, by operation and step
// (the step names of internal/backend/native, about twenty), so that a
// slowdown over a long run can be traced to the step that grew (the soak
// reports each step's mean per segment).
func newBackendPhases() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentbox_backend_phase_seconds",
		Help:    "Wall time of each step of a native sandbox create, recycle or destroy.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 0.1 ms to 3.3 s
	}, []string{"op", "phase"})
}
