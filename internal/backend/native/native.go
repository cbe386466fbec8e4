// Package native is the embedded default backend: sandboxes are Linux
// containers created in-process with runc's libcontainer (namespaces,
// cgroups, seccomp, capabilities, masked /proc), with no runc binary and no
// other daemon.
//
// Binaries that use this package re-execute themselves as "<binary> init" to
// set up each container; the package's init function handles that, so it
// must be linked into the daemon and into test binaries that start sandboxes.
package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// cgroupRoot is the cgroup (under each hierarchy's root) holding every
// backend's sandboxes; each backend instance (data dir) has its own child,
// so one daemon's orphan cleanup never touches another daemon's sandboxes.
const cgroupRoot = "agentbox"

// cgroupParentFor returns the cgroup of the backend whose state is at root.
func cgroupParentFor(root string) string {
	sum := sha256.Sum256([]byte(root))
	return cgroupRoot + "/" + hex.EncodeToString(sum[:6])
}

// Defaults applied to zero resource fields.
var DefaultResources = sandbox.Resources{
	MemoryBytes: 512 << 20,
	CPUs:        1,
	PIDs:        256,
	DiskBytes:   1 << 30,
	TmpBytes:    256 << 20,
}

// Limits that no request can exceed, whatever the caller asks.
const (
	minMemoryBytes = 16 << 20
	minDiskBytes   = 32 << 20
	maxDiskBytes   = 1 << 40
	minPIDs        = 8
)

// NetworkProvider gives sandboxes a network namespace with connectivity. The
// native backend calls it for sandboxes whose network mode is not "none";
// without a provider only loopback exists.
type NetworkProvider interface {
	// Setup creates the sandbox's network namespace and returns its path
	// (e.g. /run/netns/<name>) and the nameservers the sandbox should use.
	Setup(ctx context.Context, id sandbox.ID, n sandbox.Network) (netnsPath string, nameservers []string, err error)
	// Teardown removes everything Setup created. It is idempotent.
	Teardown(ctx context.Context, id sandbox.ID) error
	// UpdatePolicy replaces a running sandbox's egress policy.
	UpdatePolicy(ctx context.Context, id sandbox.ID, n sandbox.Network) error
	// ResetFlows forgets the connection state (conntrack entries, NAT
	// mappings, DNS budget) of a running sandbox none of whose processes
	// is left, so that none of it carries over to a next user.
	ResetFlows(ctx context.Context, id sandbox.ID) error
	// Reconcile removes the networking of every sandbox not in live.
	Reconcile(ctx context.Context, live []sandbox.ID) error
	// Denials counts the sandbox's rejected packets.
	Denials(id sandbox.ID) uint64
	// Traffic counts the bytes the sandbox sent and received since its
	// network was set up.
	Traffic(id sandbox.ID) (sent, received uint64)
}

// Config configures the native backend.
type Config struct {
	// Root is the directory holding all backend state (sandbox dirs, disk
	// images, libcontainer state). Keep it short: agent socket paths live
	// under it and unix socket paths are limited to 107 bytes.
	Root string
	// AgentPath is the host path of the static agentbox-agent binary.
	AgentPath string
	// CABundle, when set, is the host path of a PEM bundle (the host's CAs
	// plus the egress broker's) mounted read-only into sandboxes with
	// egress networking at /.agentbox/ca-bundle.pem, which the usual CA
	// variables (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS,
	// CURL_CA_BUNDLE) point at.
	CABundle string
	// Defaults fill zero fields of a spec's Resources.
	Defaults sandbox.Resources
	// IDBase is the first host uid/gid of the sandboxes' id ranges, IDRanges
	// how many ranges of 65536 ids there are (one per sandbox, stopped ones
	// included). Defaults DefaultIDBase, DefaultIDRanges. New refuses ranges
	// that overlap host accounts.
	IDBase, IDRanges uint32
	// NofileSoft and NofileHard are sandbox processes' RLIMIT_NOFILE
	// (default DefaultNofileSoft, DefaultNofileHard), lowered per sandbox so
	// that pids × hard stays well below the host's fs.file-max.
	NofileSoft, NofileHard uint64
	// Network, when set, provides networking for non-"none" sandboxes.
	Network NetworkProvider
	// DiskReserve is space of the data dir's filesystem that sandbox disks
	// may not promise to use (for the database, logs, cached images).
	DiskReserve int64
	// DiskOvercommit is how many times the available space the sandboxes'
	// sparse disks may add up to. Default 1: every disk can fill up.
	DiskOvercommit float64
	// PrivateDirs are host directories no dir: template may come from or
	// contain (the daemon's data dir, tenants' workspaces); Root always is.
	PrivateDirs []string
	// ReadyTimeout bounds how long Create waits for the agent. Default 15s.
	ReadyTimeout time.Duration
	// PauseReclaim makes Pause ask the kernel to reclaim the sandbox's
	// memory at once (page cache without swap; see pause.go), rather than
	// only when the host runs short.
	PauseReclaim bool
	// NoWarmReset makes every recycle stop and boot the sandbox again,
	// even where a warm reset (warmreset.go) applies; creates then skip
	// what a warm reset needs (a control token, the boot's mount table).
	// The daemon sets it when nothing recycles (POOL_MAX_USES 1).
	NoWarmReset bool
	// LeaveCgroupMounts keeps New from remounting the host's cgroup2 mount
	// with favordynmods (see favordynmods.go), a host-wide setting that
	// saves every create a wait for an RCU grace period.
	LeaveCgroupMounts bool
	// RunscPath is gVisor's runsc binary; set, sandboxes may ask for
	// isolation "gvisor" (gvisor.go). RunscDebugDir, when set, gets
	// runsc's debug logs.
	RunscPath     string
	RunscDebugDir string
	// PhaseObserver, when set, is told the wall time of every step of
	// every create, recycle and destroy (the phases of phases.go), from
	// the goroutine doing it: it must be quick and must not block. The
	// daemon feeds a histogram with it, so that a long run shows which
	// step grows.
	PhaseObserver func(op, phase string, wall time.Duration)
	Logger        *slog.Logger
}

// Backend is the native backend. Create it with New.
type Backend struct {
	cfg       Config
	log       *slog.Logger
	runRoot   string // the state tmpfs
	stateRoot string // libcontainer state, on the tmpfs
	sbRoot    string // one directory per sandbox, on the tmpfs
	diskRoot  string // disk images, on the data dir's filesystem
	// cgroupParent is this backend's cgroup below each hierarchy's root.
	cgroupParent string
	// rootless is set when the daemon is not root (see New).
	rootless bool
	hostEtc  string // shared /etc of the host template
	genEtc   string // generated passwd/group for dir: templates
	// privateDirs are Root and Config.PrivateDirs, absolute.
	privateDirs []string
	disks       diskCache
	// idRanges hands out each sandbox's host id range (root daemon only).
	idRanges *idAllocator
	// restingIDs is the first host id of the range idRanges never hands
	// out (see RestingIDs); 0 when there is none.
	restingIDs uint32
	// idmap caches whether image templates can be mounted (see image.go).
	idmap idmapProbe
	// fileMax is the host's fs.file-max, read at start (see nofileLimit).
	fileMax uint64

	// Precompiled seccomp programs, by whether the sandbox runs as root.
	seccompUser, seccompRoot []byte
	// shimPath is agentbox-shim next to the agent, mounted in every
	// sandbox as the agent's exec shim ("": the agent uses its own binary).
	shimPath string
	// initExe is the sealed agentbox-init each sandbox's init switches to
	// (see package fastinit), nil to run the init from the daemon binary.
	initExe *os.File

	// abandoned makes the backend stop reacting to its sandboxes, as if its
	// process had died (tests use it to exercise Recover in one process).
	abandoned atomic.Bool
	// onExit is told about agents that died on their own (see OnAgentExit).
	onExit atomic.Pointer[func(sandbox.ID, string)]

	mu    sync.Mutex
	boxes map[sandbox.ID]*box
	// diskUse caches what the sandboxes' disks occupy (see admitDisk).
	diskUse diskUseCache
}

// box is the backend's live view of one sandbox. mu serialises lifecycle
// operations on it; the Backend's mu only guards the map.
type box struct {
	mu        sync.Mutex
	id        sandbox.ID
	paths     boxPaths
	rec       record
	container *libcontainer.Container
	pid       int
	// exited is closed when the current init process is gone.
	exited chan struct{}
	// stopping is set while Stop/Destroy kill the sandbox on purpose, so the
	// watcher does not report it as a crash.
	stopping bool
	// cgPaths caches the sandbox's cgroup directories (see cgroupPaths).
	cgPaths map[string]string
	// limits holds the OOM and pids counter files open while the sandbox
	// runs (see LimitCounters); nil until the first exec, closed by teardown.
	limits *limitFiles
	// loopDev is the loop device of the sandbox's disk mount ("" when not
	// known: not mounted, or mounted by an earlier daemon process).
	loopDev string
	// disk is an O_PATH descriptor of the root of the sandbox's mounted
	// disk, which lives in the sandbox's mount namespace, not the
	// daemon's (nil when not mounted, or rootless): see mountns.go.
	disk *os.File
	// phases times the steps of a create or destroy in progress (nil
	// unless a phase hook is set).
	phases *phaseTimer
	// warm is what a warm reset of the running sandbox needs (nil: it
	// cannot be warm reset; see warmreset.go).
	warm *warmState
	// statsZero holds the cumulative counters at the last warm reset,
	// which Stats subtracts (nil: counted from boot).
	statsZero *backend.Stats
	// lastExit is how the agent ended when it died on its own (nil: it
	// did not, or the daemon did not see it die).
	lastExit *backend.AgentExit
}

// record is the persistent description of a sandbox, enough to reattach
// after a daemon restart or boot a stopped sandbox again.
type record struct {
	Spec        sandbox.Spec `json:"spec"`
	AccessToken string       `json:"access_token,omitempty"`
	CreatedAt   time.Time    `json:"created_at"`
	Stopped     bool         `json:"stopped"`
	// Paused: every process is frozen (see Pause); kept across restarts.
	Paused bool   `json:"paused,omitempty"`
	Reason string `json:"reason,omitempty"`
	// HostIDBase is the first host id of the sandbox's id range, 0 in
	// records written before sandboxes had ranges of their own.
	HostIDBase uint32 `json:"host_id_base,omitempty"`
}

var (
	_ backend.Backend        = (*Backend)(nil)
	_ backend.StatsReader    = (*Backend)(nil)
	_ backend.PortDialer     = (*Backend)(nil)
	_ backend.NetworkUpdater = (*Backend)(nil)
	_ backend.LimitCounter   = (*Backend)(nil)
)

// killSignal ends a sandbox's init, and with it its pid namespace.
const killSignal = unix.SIGKILL

// New prepares the backend's directories and shared files.
//
// As root it has every feature. Started by another user it runs rootless:
// each sandbox lives in a user namespace that maps only that user (as root
// inside), files are plain directories without a size cap, there are no
// cgroup limits unless the host delegates cgroups to the user, only the
// host template and loopback networking are available. Capabilities says so.
func New(cfg Config) (*Backend, error) {
	if cfg.Root == "" {
		return nil, errors.New("native: Config.Root is required")
	}
	if cfg.AgentPath == "" {
		return nil, errors.New("native: Config.AgentPath is required")
	}
	rootless := os.Geteuid() != 0
	if rootless {
		if err := checkUserNamespaces(); err != nil {
			return nil, err
		}
		if cfg.Network != nil {
			return nil, errors.New("native: sandbox networking needs a root daemon")
		}
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	cfg.Root = root
	if len(newBoxPaths(filepath.Join(root, "state", "sb"), "", sandbox.NewID()).socket()) > maxSocketPath {
		return nil, fmt.Errorf("native: state directory %q is too long for unix socket paths; use a shorter data dir", root)
	}
	agent, err := filepath.Abs(cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(agent); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("native: agent binary %q not found (build it with make build)", agent)
	}
	cfg.AgentPath = agent
	if cfg.RunscPath != "" {
		if rootless {
			return nil, errors.New("native: gVisor sandboxes (RUNSC_PATH) need a root daemon")
		}
		p, err := filepath.Abs(cfg.RunscPath)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("native: runsc %q is not an executable file (build one with make runsc)", cfg.RunscPath)
		}
		cfg.RunscPath = p
	}
	cfg.Defaults = cfg.Defaults.WithDefaults(DefaultResources)
	if cfg.IDBase == 0 {
		cfg.IDBase = DefaultIDBase
	}
	if cfg.IDRanges == 0 {
		cfg.IDRanges = DefaultIDRanges
	}
	if !rootless {
		if err := validateIDRanges("/etc", cfg.IDBase, cfg.IDRanges); err != nil {
			return nil, err
		}
	}
	if cfg.DiskOvercommit <= 0 {
		cfg.DiskOvercommit = 1
	}
	if cfg.NofileSoft == 0 {
		cfg.NofileSoft = DefaultNofileSoft
	}
	if cfg.NofileHard == 0 {
		cfg.NofileHard = DefaultNofileHard
	}
	if cfg.NofileSoft > cfg.NofileHard {
		return nil, fmt.Errorf("native: nofile soft limit %d is above the hard limit %d", cfg.NofileSoft, cfg.NofileHard)
	}
	fileMax, err := hostFileMax()
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// libcontainer logs through logrus; keep its chatter out of our logs.
	logrus.SetLevel(logrus.WarnLevel)
	logrus.SetOutput(os.Stderr)

	b := &Backend{
		cfg:          cfg,
		log:          cfg.Logger.With("backend", "native"),
		runRoot:      filepath.Join(root, "state"),
		stateRoot:    filepath.Join(root, "state", "libcontainer"),
		sbRoot:       filepath.Join(root, "state", "sb"),
		diskRoot:     filepath.Join(root, "disks"),
		cgroupParent: cgroupParentFor(root),
		rootless:     rootless,
		disks:        diskCache{dir: filepath.Join(root, "cache")},
		fileMax:      fileMax,
		idRanges:     newIDAllocator(cfg.IDBase, cfg.IDRanges, root),
		boxes:        map[sandbox.ID]*box{},
		privateDirs:  []string{root},
	}
	for _, d := range cfg.PrivateDirs {
		if d == "" {
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("native: private dir %q: %w", d, err)
		}
		b.privateDirs = append(b.privateDirs, abs)
	}
	// Everything under root is reachable by root sandboxes' mapped uids only
	// where it must be (0711: traverse, no listing).
	tmplDir := filepath.Join(root, "tmpl")
	for _, d := range []string{root, b.runRoot, b.diskRoot, tmplDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("native: create %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, err
		}
	}
	if !rootless {
		// Rootless, the one id mapped is the daemon's own: it can search
		// whatever the daemon reached root through.
		if err := checkSandboxesCanTraverse(root); err != nil {
			return nil, err
		}
		if err := mountStateTmpfs(b.runRoot); err != nil {
			return nil, err
		}
		if !cfg.LeaveCgroupMounts {
			switch changed, err := favorDynmods(); {
			case errors.Is(err, errNoCgroup2):
			case err != nil:
				b.log.Warn("cgroup moves wait for an RCU grace period: the cgroup2 mount could not take favordynmods (CGROUP_FAVOR_DYNMODS)", "err", err)
			case changed:
				b.log.Info("remounted cgroup2 with favordynmods: moving a sandbox into its cgroups no longer waits for an RCU grace period; forks and exits on this host take the slower lock path until reboot (CGROUP_FAVOR_DYNMODS=false leaves the host as it is)")
			}
		}
	}
	for _, d := range []string{b.stateRoot, b.sbRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("native: create %s: %w", d, err)
		}
	}
	b.idRanges.reserveRecorded(b.sbRoot)
	if !rootless {
		b.restingIDs = b.idRanges.reserveResting()
	}
	if b.hostEtc, err = hostEtcDir(etcBuildDir(b.runRoot, tmplDir, rootless)); err != nil {
		return nil, fmt.Errorf("native: build host /etc: %w", err)
	}
	if b.genEtc, err = genEtcDir(etcBuildDir(b.runRoot, tmplDir, rootless)); err != nil {
		return nil, fmt.Errorf("native: write generated /etc: %w", err)
	}
	if b.seccompUser, b.seccompRoot, err = seccompPrograms(filepath.Join(root, "cache", "seccomp")); err != nil {
		return nil, fmt.Errorf("native: compile seccomp profile: %w", err)
	}
	if b.initExe, err = initBinary(cfg.AgentPath); err != nil {
		b.log.Warn("sandbox inits start from the daemon binary (slower)", "reason", err)
	}
	if b.shimPath, err = backend.ShimBinary(cfg.AgentPath); err != nil {
		b.log.Warn("commands in sandboxes start below the agent's own binary (a slower first command, more memory per sandbox)", "reason", err)
	}
	// Formatting the default-size disk now keeps it off the first create.
	if !rootless {
		if _, err := b.disks.template(diskBucket(cfg.Defaults.DiskBytes), hostSkeleton); err != nil {
			return nil, fmt.Errorf("native: prepare disk template: %w", err)
		}
	}
	return b, nil
}

// etcBuildDir is where the shared /etc directories are built: on the
// state tmpfs, so their bind mounts show a path inside that tmpfs in a
// sandbox's /proc/self/mountinfo, not the data dir's path on the host.
// Rootless there is no state tmpfs.
func etcBuildDir(runRoot, tmplDir string, rootless bool) string {
	if rootless {
		return tmplDir
	}
	return runRoot
}

// checkUserNamespaces tells why a rootless backend cannot work here, if it
// cannot: the kernel must let unprivileged users create user namespaces.
func checkUserNamespaces() error {
	if data, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(data)) == "0" {
		return errors.New("native: rootless mode needs user namespaces (user.max_user_namespaces is 0); run as root or enable them")
	}
	if data, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(data)) == "0" {
		return errors.New("native: rootless mode needs unprivileged user namespaces (kernel.unprivileged_userns_clone=0); run as root or enable them")
	}
	return nil
}

// mountStateTmpfs mounts the backend's state tmpfs at dir unless a previous
// process of the backend already did (it outlives daemon restarts).
func mountStateTmpfs(dir string) error {
	if isMountPoint(dir) {
		return nil
	}
	// A few KiB per sandbox: 64 MiB holds the state of tens of thousands.
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0711,size=64m"); err != nil {
		return fmt.Errorf("native: mount state tmpfs on %s: %w", dir, err)
	}
	return nil
}

// Close releases what the backend holds on the host once no sandbox is
// left (the state tmpfs). With sandboxes still running it does nothing:
// their state must outlive this process so a restarted daemon finds them.
func (b *Backend) Close() error {
	entries, err := os.ReadDir(b.sbRoot)
	if err == nil && len(entries) > 0 {
		return nil
	}
	if err := unmountAll(b.runRoot); err != nil {
		return fmt.Errorf("native: unmount state tmpfs: %w", err)
	}
	// The backend's (now empty) cgroup parents; the shared root too when no
	// other backend uses it. rmdir fails harmlessly on non-empty ones.
	for _, dir := range b.cgroupHierarchyRoots() {
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir))
	}
	return nil
}

// Abandon makes the backend stop reacting to its sandboxes without
// touching them, as if its process had died: tests of Recover through
// other packages use it.
func (b *Backend) Abandon() { b.abandoned.Store(true) }

// maxSocketPath is the longest unix socket path the kernel accepts.
const maxSocketPath = 107

// Name implements backend.Backend.
func (b *Backend) Name() string { return "native" }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	driver := "cgroupfs-v1"
	if isCgroup2() {
		driver = "cgroupfs-v2"
	}
	if b.rootless {
		return backend.Capabilities{RootInUserNS: true, RootOnRequest: true, Templates: []string{"host"}, CgroupDriver: driver, Rootless: true}
	}
	c := backend.Capabilities{
		Pause:          true,
		Snapshot:       true,
		Recycle:        true,
		DiskLimit:      true,
		ResourceLimits: true,
		RootInUserNS:   true,
		RootOnRequest:  true,
		Templates:      []string{sandbox.TemplateHost, sandbox.TemplateDir, sandbox.TemplateImage},
		CgroupDriver:   driver,
		Egress:         b.cfg.Network != nil,
	}
	if b.cfg.RunscPath != "" {
		c.Isolation = []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor}
		c.GVisor = gvisorLimits()
	}
	return c
}
