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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/compat/agentscope"
	"github.com/agentbox/agentbox/internal/compat/e2b"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/doctor"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/builder/sandboxrunner"
	"github.com/agentbox/agentbox/internal/version"
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
	cfg := opts.Config
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Workers > 1 && workerIndex() < 0 && opts.Listener == nil && opts.Backend == nil {
		return superviseWorkers(ctx, cfg, log) // workers.go
	}
	keepReadyPipePrivate()
	if len(cfg.APIKeys) == 0 && !cfg.Loopback() {
		return fmt.Errorf("refusing to listen on %s without an API key: set BEARER_TOKEN or API_KEYS, or HOST=127.0.0.1", cfg.Host)
	}
	for _, name := range cfg.Ignored {
		log.Warn("setting has no effect with this deployment", "setting", name)
	}
	nofile := raiseFileLimit(log)
	maxConns, maxConnsPerIP := connectionLimits(cfg.MaxConnections, cfg.MaxConnectionsPerIP, nofile)
	setMemoryLimit(cfg.RequestMemory, maxConns, log)
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}

	b := opts.Backend
	var netMgr *netpolicy.Manager
	netOff := "" // why sandboxes have loopback only
	// Where the native backend's sandboxes have their host ids: the build
	// keeps cache mounts in the range none of them is given.
	var buildIDs sandboxrunner.HostIDs
	// The Docker backend loads store templates into its engine; the store
	// opens after the backends.
	var dockerStore atomic.Pointer[template.Store]
	// A start that fails takes back what it set up (the backend's state
	// mount and cgroups, the sandbox network's bridge and table) on this
	// one path, whatever step failed; a started daemon closes them at its
	// shutdown below. built is the backend made here (not a test's).
	var built backend.Backend
	started := false
	defer func() {
		if !started {
			closeBackend(built, netMgr, log)
		}
	}()
	if b == nil {
		// What the host lacks, all at once and in agentbox doctor's words,
		// before any component trips over the first of it.
		o := doctor.FromConfig(cfg)
		o.SkipOptional = true
		if err := doctor.Required(doctor.Run(ctx, o)); err != nil {
			return err
		}
		agent, err := FindAgent(cfg.AgentPath)
		if err != nil {
			return err
		}
		netMgr, netOff, err = startNetwork(ctx, cfg, dataDir, log)
		if err != nil {
			return err
		}
		ncfg := native.Config{Root: filepath.Join(dataDir, "native"), AgentPath: agent, Defaults: cfg.Resources, Logger: log,
			PrivateDirs: []string{dataDir, cfg.DefaultMountDir, cfg.StorageFolder},
			DiskReserve: cfg.DiskReserve, DiskOvercommit: cfg.DiskOvercommit,
			NofileSoft: cfg.NofileSoft, NofileHard: cfg.NofileHard,
			IDBase: cfg.IDBase, IDRanges: cfg.IDRanges, PauseReclaim: cfg.PauseReclaim, NoWarmReset: !cfg.PoolWarmReset || cfg.PoolMaxUses <= 1,
			LeaveCgroupMounts: !cfg.CgroupFavorDynmods}
		if netMgr != nil {
			ncfg.Network = netMgr
		}
		nb, err := native.New(ncfg)
		if err != nil {
			return err
		}
		built = nb
		if resting, ok := nb.RestingIDs(); ok {
			buildIDs = sandboxrunner.HostIDs{Base: cfg.IDBase, Ranges: cfg.IDRanges, Resting: resting}
		}
		if err := checkTemplates(cfg, nb); err != nil {
			return err
		}
		if b, err = withDocker(ctx, cfg, dataDir, agent, nb, &dockerStore, log); err != nil {
			return err
		}
		built = b
		if b, err = withKube(ctx, cfg, b, log); err != nil {
			return err
		}
		built = b
	}
	st, nodes, closeStore, err := openStore(ctx, cfg, dataDir, log)
	if err != nil {
		return err
	}
	defer closeStore()
	node := nodeID(cfg, dataDir)
	// The store counts a template's users from the manager's records; the
	// manager is made after the store, so the count is bound late.
	var m *manager.Manager
	inUse := func(digest string) int {
		if m == nil {
			return 0
		}
		return m.TemplateUsers(digest)
	}
	tmplDir := templateDir(cfg, dataDir)
	templates, err := openTemplateStore(ctx, cfg, tmplDir, inUse, log)
	if err != nil {
		return err
	}
	defer templates.Close()
	dockerStore.Store(templates)
	templateGate := httpapi.NewTemplateGate(cfg.TemplateMaxPulls)
	// The built-in templates' states answer creates of those not built
	// yet (autobuild.go); the runner is bound once the builder exists.
	resolver := &builtinResolver{types: typeTemplates(cfg)}
	resolver.next = typeResolver{types: resolver.types, next: kubeResolver{enabled: cfg.Kube.Enabled && opts.Backend == nil, next: dockerResolver{enabled: cfg.DockerEnabled && opts.Backend == nil,
		next: newAutoPull(templates, cfg.TemplateAutoPull, templateGate, log)}}}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m = manager.New(manager.Config{
		Templates: cfg.Templates, TemplateAdmins: cfg.TemplateAdmins, PoolTypes: cfg.DefaultTypes, PoolSize: cfg.PoolSize, PoolMaxUses: cfg.PoolMaxUses,
		DefaultTimeout: cfg.DefaultTimeout, MaxTimeout: cfg.MaxTimeout, HeartbeatTimeout: cfg.HeartbeatTimeout,
		PausedTTL:           cfg.PausedTTL,
		ServiceStartTimeout: cfg.ServiceStartTimeout,
		MaxInstances:        cfg.MaxInstances, MaxPerUser: cfg.MaxPerUser,
		DefaultResources: cfg.Resources, MaxResources: cfg.MaxResources,
		ReadonlyMounts: cfg.ReadonlyMounts, DefaultMountDir: cfg.DefaultMountDir,
		Logger: log, Metrics: manager.NewMetrics(reg),
		MaxRequestsPerUser: cfg.MaxRequestsPerUser, RequestMemory: cfg.RequestMemory,
		DefaultNetworkMode: sandbox.NetworkMode(cfg.DefaultNetworkMode), NetworkAvailable: netMgr != nil,
		ValidateNetwork: netpolicy.Validate, Resolver: resolver, TemplateNote: resolver.note, Committer: templates, NodeID: node, NodeMaxSandboxes: cfg.NodeMaxSandboxes,
		StorageQuota: cfg.StorageQuota, MaxPrivateTemplates: cfg.MaxPrivateTemplates, SnapshotMaxBytes: cfg.SnapshotMaxBytes,
		DiskReserve: cfg.DiskReserve,
	}, b, st)
	if cfg.DefaultNetworkMode == string(sandbox.NetworkEgress) && netMgr == nil && opts.Backend == nil {
		return fmt.Errorf("setting DEFAULT_NETWORK_MODE=egress: sandbox networking is unavailable (see NETWORK)")
	}
	secret, err := loadOrCreateSecret(filepath.Join(dataDir, "preview.key"))
	if err != nil {
		return err
	}
	// Every front end works inside sandboxes through this one service.
	dp := dataplane.New(dataplane.Config{MaxExecOutput: cfg.MaxExecOutputBytes, Registry: reg, Logger: log}, m, m.Admission())
	api := httpapi.New(httpapi.Config{DataPlane: dp, APIKeys: cfg.APIKeys, MaxUploadBytes: cfg.MaxUploadBytes, Logger: log, Registry: reg,
		PreviewDomain: cfg.PreviewDomain, PreviewSecret: secret, MetricsToken: cfg.MetricsToken, NoVNCDir: cfg.NoVNCDir,
		PreviewMaxPerUser: cfg.PreviewMaxPerUser, PreviewHeaderTimeout: cfg.PreviewHeaderTimeout,
		Templates: templates, TemplateAdmins: cfg.TemplateAdmins, MaxImportBytes: cfg.TemplateMaxImport,
		ImportDir: filepath.Join(tmplDir, "tmp"), AcquireTemplateOp: templateGate}, m)
	api.RegisterBootstrap(httpapi.BootstrapConfig{Store: templates, CacheDir: filepath.Join(tmplDir, "bootstrap")})
	bld, err := newBuilder(cfg, dataDir, tmplDir, templates, m, buildIDs, log)
	if err != nil {
		return err
	}
	api.RegisterBuilds(httpapi.BuildConfig{Builder: bld, Store: templates})
	autoBuild := cfg.TemplateAutoBuild
	if opts.Backend != nil {
		autoBuild = nil // a test's fake backend cannot run build steps
	}
	builtins := newAutoBuild(autoBuild, tmplDir, templates, bld, log)
	resolver.states = builtins
	api.SetBuiltinTemplates(builtins.Statuses)
	as := agentscope.New(agentscope.Config{DataPlane: dp, APIKeys: cfg.APIKeys, Prefix: cfg.ContainerPrefix, DefaultTypes: cfg.DefaultTypes,
		StorageFolder: cfg.StorageFolder, SandboxTimeout: cfg.MaxTimeout, MaxOutput: cfg.MaxExecOutputBytes,
		MaxUploadBytes: cfg.MaxUploadBytes, Version: version.Version, Logger: log, DesktopLink: api.DesktopLink, Docs: docsOf(st)}, m)
	as.Register(api.Mux())
	api.AllowBody("multipart/form-data", agentscope.IsMultipartUpload)
	defer as.Close()
	e2 := e2b.New(e2b.Config{DataPlane: dp, APIKeys: cfg.APIKeys, MaxUploadBytes: cfg.MaxUploadBytes, Templates: templates,
		TemplateAdmins: cfg.TemplateAdmins, Builder: bld, BuildDir: filepath.Join(tmplDir, "tmp"), Logger: log}, m)
	e2.Register(api.Mux())
	api.AllowBody("multipart/form-data", e2b.IsSignedUpload)
	api.SetSandboxPorts(e2.ServePort)
	stopTools := startTools(cfg, api, as, log)

	ln, own, announce := opts.Listener, net.Listener(nil), ""
	switch {
	case ln != nil:
	case workerIndex() >= 0:
		if ln, own, announce, err = workerListeners(ctx, cfg); err != nil {
			return err
		}
	default:
		if ln, err = net.Listen("tcp", cfg.Addr()); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	registry := newRegistry(cfg, node, ln.Addr().String(), announce, b.Name(), nodes, m, log)
	api.SetNodes(registry.List)
	m.SetNodes(registry.List)
	// Other replicas' connections are counted per replica once they
	// authenticate, and their addresses may have CLUSTER_MAX_CONNS
	// connections awaiting that beyond MAX_CONNECTIONS_PER_IP (connlimit.go).
	var peers *peerAddrs
	var isPeer func(netip.Addr) bool
	if nodes != nil && cfg.ClusterSecret != "" {
		peers = &peerAddrs{}
		isPeer = peers.has
	}
	ln = newLimitListener(ln, maxConns, maxConnsPerIP, cfg.ClusterMaxConns, isPeer, log)
	fw := forwarder(cfg, node, st, registry, m, log)
	setPeers(as, m, st, fw)
	handler := withPeerConns(fw.Peer, withBodyTimeout(fw.Wrap(api.Handler()), cfg.BodyTimeout))
	if len(cfg.APIKeys) == 0 {
		handler = keylessNotice(handler, log) // authnotice.go
	}
	srv := &http.Server{
		Handler:           handler,
		ConnContext:       connContext,
		ReadHeaderTimeout: cfg.HeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	serveErr := make(chan error, 2) // the public listener, and a worker's own
	go func() { serveErr <- srv.Serve(ln) }()
	if own != nil {
		// A worker's own port, where the other replicas forward to it.
		go func() {
			serveErr <- srv.Serve(newLimitListener(own, maxConns, maxConnsPerIP, cfg.ClusterMaxConns, isPeer, log))
		}()
	}
	if len(cfg.APIKeys) > 0 && cfg.MetricsToken == "" {
		log.Info("METRICS_TOKEN is not set: /metrics is refused to every caller")
	}
	if len(cfg.APIKeys) == 0 {
		log.Warn("no API key configured: authentication is off and the server only listens on loopback", "addr", ln.Addr().String())
	}
	log.Info("agentbox serving", "addr", ln.Addr().String(), "version", version.Version, "backend", b.Name(),
		"data_dir", dataDir, "pool_size", cfg.PoolSize, "auto_cleanup", cfg.AutoCleanup,
		"max_connections", maxConns, "max_connections_per_ip", maxConnsPerIP, "open_files_limit", nofile)

	// /healthz answers at once; /readyz waits for recovery of old sandboxes.
	if err := m.Start(ctx); err != nil {
		srv.Close()
		return err
	}
	buildCtx, stopBuilds := context.WithCancel(ctx)
	builtins.Start(buildCtx)
	defer func() { stopBuilds(); builtins.Wait() }()
	regCtx, stopRegistry := context.WithCancel(context.WithoutCancel(ctx))
	regDone := make(chan struct{})
	go func() { defer close(regDone); registry.Run(regCtx) }()
	peersDone := make(chan struct{})
	go func() {
		defer close(peersDone)
		if peers != nil {
			peers.run(regCtx, registry.List, node, log)
		}
	}()
	defer func() { stopRegistry(); <-regDone; <-peersDone }()
	if opts.Backend != nil {
		netOff = "the " + b.Name() + " backend"
	}
	info := collectStartInfo(ctx, cfg, ln.Addr().String(), dataDir, b.Name(), templates, netMgr, netOff)
	LogStart(log, info)
	if opts.Banner != nil && workerIndex() <= 0 { // once for WORKERS
		PrintBanner(opts.Banner, info)
	}
	if opts.Ready != nil {
		opts.Ready <- ln.Addr().String()
	}
	workerReady()

	select {
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			_ = m.Shutdown(context.Background(), false)
			return fmt.Errorf("serve: %w", err)
		}
	case <-ctx.Done():
	}
	log.Info("shutting down", "auto_cleanup", cfg.AutoCleanup)
	grace, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopTools() // ends MCP sessions (their sandboxes are destroyed) and their streams
	// A build in progress stops (its finished steps stay in the build
	// cache for the next start) before the manager it runs sandboxes on.
	stopBuilds()
	builtins.Wait()
	if err := srv.Shutdown(grace); err != nil {
		srv.Close()
	}
	cleanup, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	if err := m.Shutdown(cleanup, cfg.AutoCleanup); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	started = true // this shutdown closes the backend and the network
	if c, ok := b.(backend.Closer); ok {
		if err := c.Close(); err != nil {
			log.Error("close backend", "err", err)
		}
	}
	if netMgr != nil {
		// Surviving sandboxes keep their networking; with AUTO_CLEANUP there
		// are none, and the bridge and firewall tables go too.
		if err := netMgr.Close(cfg.AutoCleanup); err != nil {
			log.Error("close sandbox networking", "err", err)
		}
	}
	log.Info("stopped")
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
		Bridge: cfg.NetworkBridge, Subnet: cfg.NetworkSubnet, Upstream: cfg.NetworkDNS,
		AllowHostPorts: cfg.NetworkHostPorts, AllowPrivate: cfg.NetworkPrivate,
		BandwidthBits: cfg.NetworkBandwidth, MaxConns: cfg.NetworkMaxConns,
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
