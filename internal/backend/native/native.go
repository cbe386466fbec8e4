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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	// Reconcile removes the networking of every sandbox not in live.
	Reconcile(ctx context.Context, live []sandbox.ID) error
	// Denials counts the sandbox's rejected packets.
	Denials(id sandbox.ID) uint64
}

// Config configures the native backend.
type Config struct {
	// Root is the directory holding all backend state (sandbox dirs, disk
	// images, libcontainer state). Keep it short: agent socket paths live
	// under it and unix socket paths are limited to 107 bytes.
	Root string
	// AgentPath is the host path of the static agentbox-agent binary.
	AgentPath string
	// Defaults fill zero fields of a spec's Resources.
	Defaults sandbox.Resources
	// RootIDBase is the first host uid/gid of the range that root sandboxes'
	// user namespaces map to (65536 ids). Default 200000.
	RootIDBase uint32
	// Network, when set, provides networking for non-"none" sandboxes.
	Network NetworkProvider
	// ReadyTimeout bounds how long Create waits for the agent. Default 15s.
	ReadyTimeout time.Duration
	Logger       *slog.Logger
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
	disks    diskCache

	// Precompiled seccomp programs, by whether the sandbox runs as root.
	seccompUser, seccompRoot []byte

	// abandoned makes the backend stop reacting to its sandboxes, as if its
	// process had died (tests use it to exercise Recover in one process).
	abandoned atomic.Bool

	mu    sync.Mutex
	boxes map[sandbox.ID]*box
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
}

// record is the persistent description of a sandbox, enough to reattach
// after a daemon restart or boot a stopped sandbox again.
type record struct {
	Spec        sandbox.Spec `json:"spec"`
	AccessToken string       `json:"access_token,omitempty"`
	CreatedAt   time.Time    `json:"created_at"`
	Stopped     bool         `json:"stopped"`
	Reason      string       `json:"reason,omitempty"`
}

var (
	_ backend.Backend        = (*Backend)(nil)
	_ backend.StatsReader    = (*Backend)(nil)
	_ backend.PortDialer     = (*Backend)(nil)
	_ backend.NetworkUpdater = (*Backend)(nil)
	_ backend.LimitCounter   = (*Backend)(nil)
)

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
	cfg.Defaults = cfg.Defaults.WithDefaults(DefaultResources)
	if cfg.RootIDBase == 0 {
		cfg.RootIDBase = 200000
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
		boxes:        map[sandbox.ID]*box{},
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
		if err := mountStateTmpfs(b.runRoot); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{b.stateRoot, b.sbRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("native: create %s: %w", d, err)
		}
	}
	if b.hostEtc, err = hostEtcDir(tmplDir); err != nil {
		return nil, fmt.Errorf("native: build host /etc: %w", err)
	}
	if b.genEtc, err = genEtcDir(tmplDir); err != nil {
		return nil, fmt.Errorf("native: write generated /etc: %w", err)
	}
	if b.seccompUser, err = compileSeccomp(nil); err != nil {
		return nil, fmt.Errorf("native: compile seccomp profile: %w", err)
	}
	if b.seccompRoot, err = compileSeccomp(rootCapabilities); err != nil {
		return nil, fmt.Errorf("native: compile seccomp profile: %w", err)
	}
	// Formatting the default-size disk now keeps it off the first create.
	if !rootless {
		if _, err := b.disks.template(cfg.Defaults.DiskBytes, hostSkeleton); err != nil {
			return nil, fmt.Errorf("native: prepare disk template: %w", err)
		}
	}
	return b, nil
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
		return backend.Capabilities{RootInUserNS: true, Templates: []string{"host"}, CgroupDriver: driver, Rootless: true}
	}
	return backend.Capabilities{
		DiskLimit:      true,
		ResourceLimits: true,
		RootInUserNS:   true,
		Templates:      []string{"host", "dir"},
		CgroupDriver:   driver,
	}
}

func validateResources(r sandbox.Resources) error {
	switch {
	case r.MemoryBytes < minMemoryBytes:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.memory: at least %d MiB", minMemoryBytes>>20)
	case r.CPUs < 0.01 || r.CPUs > 1024:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.cpus: must be between 0.01 and 1024")
	case r.PIDs < minPIDs:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.pids: at least %d", minPIDs)
	case r.DiskBytes < minDiskBytes || r.DiskBytes > maxDiskBytes:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.disk: between %d MiB and 1 TiB", minDiskBytes>>20)
	case r.TmpBytes < 1<<20:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.tmp: at least 1 MiB")
	}
	return nil
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	tmpl, err := parseTemplate(spec.Template)
	if err != nil {
		return sandbox.Info{}, err
	}
	if b.rootless {
		if tmpl.kind != "host" {
			return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q needs a root daemon (overlayfs); a rootless daemon has only \"host\"", spec.Template)
		}
		// The user namespace maps one id, the daemon's user, as root.
		spec.Root = true
	}
	spec.Resources = spec.Resources.WithDefaults(b.cfg.Defaults)
	if err := validateResources(spec.Resources); err != nil {
		return sandbox.Info{}, err
	}
	if spec.Network.Mode == "" {
		spec.Network.Mode = sandbox.NetworkNone
	}
	if spec.Network.Mode != sandbox.NetworkNone && b.cfg.Network == nil {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "network mode %q is not available on this server", spec.Network.Mode)
	}
	if err := validateMounts(spec); err != nil {
		return sandbox.Info{}, err
	}

	bx := &box{id: spec.ID, paths: newBoxPaths(b.sbRoot, b.diskRoot, spec.ID)}
	if len(bx.paths.socket()) > maxSocketPath {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "sandbox id %q is too long for this server's state directory", spec.ID)
	}
	bx.rec = record{Spec: spec, AccessToken: spec.AccessToken, CreatedAt: time.Now().UTC()}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	b.mu.Lock()
	if _, ok := b.boxes[spec.ID]; ok {
		b.mu.Unlock()
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	b.boxes[spec.ID] = bx
	b.mu.Unlock()

	fail := func(err error) (sandbox.Info, error) {
		b.teardown(context.WithoutCancel(ctx), bx, true)
		b.mu.Lock()
		delete(b.boxes, spec.ID)
		b.mu.Unlock()
		return sandbox.Info{}, err
	}
	if err := os.Mkdir(bx.paths.dir, 0o711); err != nil {
		if errors.Is(err, os.ErrExist) {
			// Leftovers of a sandbox this process does not know: not ours to reuse.
			b.mu.Lock()
			delete(b.boxes, spec.ID)
			b.mu.Unlock()
			return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
		}
		return fail(fmt.Errorf("create sandbox dir: %w", err))
	}
	// The record goes first so a crash at any later step is found by Recover.
	if err := b.saveRecord(bx); err != nil {
		return fail(err)
	}
	start := time.Now()
	if !b.rootless {
		image, err := b.disks.template(spec.Resources.DiskBytes, hostSkeleton)
		if err != nil {
			return fail(err)
		}
		if err := sparseCopy(image, bx.paths.image); err != nil {
			return fail(fmt.Errorf("copy disk image: %w", err))
		}
	}
	ids := b.idMap(spec)
	if err := b.mountDisk(bx, tmpl, ids, true); err != nil {
		return fail(err)
	}
	// Only the daemon may reach the agent's socket: root's, not mounted
	// into the sandbox (the agent gets the listening socket as a fd).
	if err := os.Mkdir(bx.paths.run, 0o700); err != nil {
		return fail(err)
	}
	diskDone := time.Now()
	if err := b.boot(ctx, bx, tmpl, ids); err != nil {
		return fail(err)
	}
	b.log.Debug("sandbox created", "sandbox", spec.ID, "disk_ms", ms(diskDone.Sub(start)),
		"boot_ms", ms(time.Since(diskDone)), "total_ms", ms(time.Since(start)))
	return b.infoLocked(bx), nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func validateMounts(spec sandbox.Spec) error {
	if spec.WorkspaceDir != "" {
		if !filepath.IsAbs(spec.WorkspaceDir) {
			return sandbox.Errorf(sandbox.ClassInvalid, "workspace dir %q must be absolute", spec.WorkspaceDir)
		}
		if st, err := os.Stat(spec.WorkspaceDir); err != nil || !st.IsDir() {
			return sandbox.Errorf(sandbox.ClassInvalid, "workspace dir %q is not a directory", spec.WorkspaceDir)
		}
	}
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
			return sandbox.Errorf(sandbox.ClassInvalid, "mount %s:%s: paths must be absolute", m.Source, m.Target)
		}
		if _, err := os.Stat(m.Source); err != nil {
			return sandbox.Errorf(sandbox.ClassInvalid, "mount source %q does not exist", m.Source)
		}
		clean := filepath.Clean(m.Target)
		for _, reserved := range []string{"/", "/proc", "/sys", "/dev", "/etc", "/usr", agentRunDir, "/.agentbox"} {
			if clean == reserved || (reserved != "/" && hasPathPrefix(clean, reserved)) {
				return sandbox.Errorf(sandbox.ClassInvalid, "mount target %q is reserved", m.Target)
			}
		}
	}
	return nil
}

func hasPathPrefix(p, prefix string) bool {
	return len(p) > len(prefix) && p[:len(prefix)] == prefix && p[len(prefix)] == '/'
}

func (b *Backend) idMap(spec sandbox.Spec) idMap {
	if b.rootless {
		return idMap{userns: true, base: uint32(os.Geteuid()), gidBase: uint32(os.Getegid()), size: 1}
	}
	if spec.Root {
		return idMap{userns: true, base: b.cfg.RootIDBase, gidBase: b.cfg.RootIDBase, size: rootHostIDRangeSize}
	}
	return idMap{}
}

// mountDisk mounts the sandbox disk and, for dir: templates, the overlay root.
// fresh is true on first creation, when ownership must be set up.
func (b *Backend) mountDisk(bx *box, tmpl template, ids idMap, fresh bool) error {
	p := &bx.paths
	if err := os.MkdirAll(p.disk, 0o711); err != nil {
		return err
	}
	if b.rootless {
		// No loop devices without root: the "disk" is a plain directory.
		p.rootfs = filepath.Join(p.disk, "rootfs")
		if !fresh {
			return nil
		}
		for _, d := range diskDirs {
			if err := os.MkdirAll(filepath.Join(p.disk, d.path), d.mode|0o700); err != nil {
				return err
			}
		}
		return hostSkeleton(p.rootfs)
	}
	if !isMountPoint(p.disk) {
		if err := mountImage(p.image, p.disk); err != nil {
			return err
		}
	}
	if fresh && ids.userns {
		// Root sandboxes see host ids shifted by the user namespace; give the
		// disk's directories to the ids they map to.
		for _, d := range diskDirs {
			owner := ids.host(0)
			if d.user {
				owner = ids.host(sandboxUID)
			}
			if err := os.Chown(filepath.Join(p.disk, d.path), owner, owner); err != nil {
				return fmt.Errorf("chown disk: %w", err)
			}
		}
	}
	if tmpl.kind == "host" {
		p.rootfs = filepath.Join(p.disk, "rootfs")
		return nil
	}
	p.rootfs = p.overlay
	if err := os.MkdirAll(p.overlay, 0o755); err != nil {
		return err
	}
	if isMountPoint(p.overlay) {
		return nil
	}
	opts := "lowerdir=" + tmpl.dir + ",upperdir=" + filepath.Join(p.disk, "upper") + ",workdir=" + filepath.Join(p.disk, "work")
	if err := unix.Mount("overlay", p.overlay, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mount overlay root: %w", err)
	}
	return nil
}

// boot starts the sandbox's init (the agent) and waits until it serves.
func (b *Backend) boot(ctx context.Context, bx *box, tmpl template, ids idMap) error {
	spec := bx.rec.Spec
	spec.AccessToken = bx.rec.AccessToken
	var netnsPath string
	nameservers := []string(nil)
	if spec.Network.Mode != sandbox.NetworkNone {
		var err error
		netnsPath, nameservers, err = b.cfg.Network.Setup(ctx, spec.ID, spec.Network)
		if err != nil {
			return fmt.Errorf("set up network: %w", err)
		}
	}
	if err := writeSandboxEtc(bx.paths.etc, string(spec.ID), nameservers); err != nil {
		return fmt.Errorf("write /etc: %w", err)
	}
	oci, err := b.ociSpec(spec, tmpl, bx.paths, ids, netnsPath)
	if err != nil {
		return err
	}
	cfg, err := libcontainerConfig(spec.ID, oci, b.rootless)
	if err != nil {
		return err
	}
	container, err := libcontainer.Create(b.stateRoot, string(spec.ID), cfg)
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	bx.container = container

	logFile, err := os.OpenFile(bx.paths.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	bpf := b.seccompUser
	if spec.Root {
		bpf = b.seccompRoot
	}
	seccompR, err := pipeWithData(bpf)
	if err != nil {
		return err
	}
	defer seccompR.Close()
	sock, err := listenAgentSocket(bx.paths.socket())
	if err != nil {
		return err
	}
	defer sock.Close()
	proc := &libcontainer.Process{
		Args:       oci.Process.Args,
		Env:        oci.Process.Env,
		UID:        int(oci.Process.User.UID),
		GID:        int(oci.Process.User.GID),
		Cwd:        "/",
		Stdout:     logFile,
		Stderr:     logFile,
		ExtraFiles: []*os.File{readyW, seccompR, sock}, // fds 3, 4 and 5 in the sandbox
		Init:       true,
	}
	runStart := time.Now()
	err = container.Run(proc)
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start sandbox init: %w", err)
	}
	pid, _ := proc.Pid()
	bx.pid = pid
	bx.exited = make(chan struct{})
	bx.stopping = false
	go b.watchChild(bx, proc, bx.exited)

	runDone := time.Now()
	if err := waitReady(ctx, readyR, b.cfg.ReadyTimeout); err != nil {
		return fmt.Errorf("agent did not start: %w%s", err, logTail(bx.paths.log))
	}
	b.log.Debug("sandbox booted", "sandbox", spec.ID, "run_ms", ms(runDone.Sub(runStart)), "agent_ready_ms", ms(time.Since(runDone)))
	return nil
}

// listenAgentSocket creates the agent's listening unix socket on the host
// and returns it as a file to hand to the agent. The socket file belongs to
// root (0600) in a directory only root can enter, and is not visible inside
// the sandbox: sandbox processes can neither talk to the agent nor replace
// its socket with their own.
func listenAgentSocket(path string) (*os.File, error) {
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the agent keeps serving on it
	f, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// pipeWithData returns the read end of a pipe holding data, write end closed.
func pipeWithData(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// A seccomp program is at most 32 KiB, below the pipe buffer: no reader
	// is needed for the write to complete.
	_, werr := w.Write(data)
	w.Close()
	if werr != nil {
		r.Close()
		return nil, fmt.Errorf("write seccomp program: %w", werr)
	}
	return r, nil
}

// waitReady waits for the agent's readiness byte.
func waitReady(ctx context.Context, r *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := r.SetReadDeadline(deadline); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		var buf [1]byte
		_, err := r.Read(buf[:])
		done <- err
	}()
	select {
	case err := <-done:
		if errors.Is(err, io.EOF) {
			return errors.New("agent exited before it was ready")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return sandbox.Errorf(sandbox.ClassTimeout, "agent not ready after %s", timeout)
		}
		return err
	case <-ctx.Done():
		_ = r.SetReadDeadline(time.Now())
		<-done
		return ctx.Err()
	}
}

func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 2048 {
		data = data[len(data)-2048:]
	}
	return " (agent log: " + string(data) + ")"
}

// watchChild reaps the init process when it is our child and handles an
// unexpected exit.
func (b *Backend) watchChild(bx *box, proc *libcontainer.Process, exited chan struct{}) {
	state, err := proc.Wait()
	reason := "agent exited"
	if state != nil {
		reason = "agent exited: " + state.String()
	} else if err != nil {
		reason = "agent exited: " + err.Error()
	}
	close(exited)
	b.onInitExit(bx, exited, reason)
}

// watchPidfd waits for a recovered init (not our child) to exit.
func (b *Backend) watchPidfd(bx *box, pidfd int, exited chan struct{}) {
	defer unix.Close(pidfd)
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil || !errors.Is(err, unix.EINTR) {
			break
		}
	}
	close(exited)
	b.onInitExit(bx, exited, "agent exited")
}

// onInitExit cleans up after an init that died on its own (OOM-killed agent,
// a bug): the sandbox becomes stopped, with no processes, cgroups or mounts.
func (b *Backend) onInitExit(bx *box, exited chan struct{}, reason string) {
	if b.abandoned.Load() {
		return
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.stopping || bx.exited != exited {
		return // a deliberate stop, or an older incarnation
	}
	if n := b.oomKills(bx); n > 0 {
		reason += " (out of memory)"
	}
	// The agent's log lives on the sandbox disk, which teardown unmounts:
	// keep its tail in our own log.
	b.log.Warn("sandbox init exited unexpectedly", "sandbox", bx.id, "reason", reason, "agent_log", logTail(bx.paths.log))
	b.teardown(context.Background(), bx, false)
	bx.rec.Stopped = true
	bx.rec.Reason = reason
	if err := b.saveRecord(bx); err != nil {
		b.log.Error("save sandbox record", "sandbox", bx.id, "err", err)
	}
}

// teardown kills the sandbox and removes its runtime state: processes,
// cgroups, network, mounts. With removeAll it also removes the sandbox's
// directory (disk image included). Errors are logged: teardown must get as
// far as it can.
func (b *Backend) teardown(ctx context.Context, bx *box, removeAll bool) {
	bx.stopping = true
	if bx.container == nil {
		if c, err := libcontainer.Load(b.stateRoot, string(bx.id)); err == nil {
			bx.container = c
		}
	}
	if c := bx.container; c != nil {
		_ = c.Signal(unix.SIGKILL)
		if bx.exited != nil {
			select {
			case <-bx.exited:
			case <-time.After(10 * time.Second):
				b.log.Error("sandbox init did not exit after SIGKILL", "sandbox", bx.id)
			}
		}
		// Destroy kills whatever is left in the cgroup and removes it, and the
		// container's state directory.
		if err := c.Destroy(); err != nil {
			b.log.Error("destroy container", "sandbox", bx.id, "err", err)
		}
		bx.container = nil
	} else {
		b.removeStaleCgroups(string(bx.id))
	}
	_ = os.RemoveAll(filepath.Join(b.stateRoot, string(bx.id)))
	bx.pid = 0
	if bx.rec.Spec.Network.Mode != "" && bx.rec.Spec.Network.Mode != sandbox.NetworkNone && b.cfg.Network != nil {
		if err := b.cfg.Network.Teardown(ctx, bx.id); err != nil {
			b.log.Error("tear down network", "sandbox", bx.id, "err", err)
		}
	}
	for _, m := range []string{bx.paths.overlay, bx.paths.disk} {
		if err := unmountAll(m); err != nil {
			b.log.Error("unmount", "sandbox", bx.id, "path", m, "err", err)
		}
	}
	_ = os.Remove(bx.paths.socket())
	if removeAll {
		if err := os.RemoveAll(bx.paths.dir); err != nil {
			b.log.Error("remove sandbox dir", "sandbox", bx.id, "err", err)
		}
		if err := os.Remove(bx.paths.image); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Error("remove sandbox disk", "sandbox", bx.id, "err", err)
		}
	}
}

func (b *Backend) lookup(id sandbox.ID) (*box, error) {
	if err := id.Validate(); err != nil {
		return nil, sandbox.ErrNotFound(id)
	}
	b.mu.Lock()
	bx, ok := b.boxes[id]
	b.mu.Unlock()
	if !ok {
		return nil, sandbox.ErrNotFound(id)
	}
	return bx, nil
}

// Stop implements backend.Backend.
func (b *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.rec.Stopped {
		return nil
	}
	b.teardown(ctx, bx, false)
	bx.rec.Stopped = true
	bx.rec.Reason = "stopped"
	return b.saveRecord(bx)
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if !bx.rec.Stopped {
		return b.infoLocked(bx), nil
	}
	tmpl, err := parseTemplate(bx.rec.Spec.Template)
	if err != nil {
		return sandbox.Info{}, sandbox.Wrap(sandbox.ClassConflict, err, "template of stopped sandbox is gone")
	}
	ids := b.idMap(bx.rec.Spec)
	if err := b.mountDisk(bx, tmpl, ids, false); err != nil {
		b.teardown(ctx, bx, false)
		return sandbox.Info{}, err
	}
	if err := b.boot(ctx, bx, tmpl, ids); err != nil {
		b.teardown(context.WithoutCancel(ctx), bx, false)
		return sandbox.Info{}, err
	}
	bx.rec.Stopped = false
	bx.rec.Reason = ""
	if err := b.saveRecord(bx); err != nil {
		return sandbox.Info{}, err
	}
	return b.infoLocked(bx), nil
}

// Destroy implements backend.Backend.
func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	if err := id.Validate(); err != nil {
		return nil // nothing with such an id can exist
	}
	b.mu.Lock()
	bx, ok := b.boxes[id]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	bx.mu.Lock()
	b.teardown(ctx, bx, true)
	bx.mu.Unlock()
	b.mu.Lock()
	if b.boxes[id] == bx {
		delete(b.boxes, id)
	}
	b.mu.Unlock()
	return nil
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return b.infoLocked(bx), nil
}

func (b *Backend) infoLocked(bx *box) sandbox.Info {
	spec := bx.rec.Spec
	spec.AccessToken = ""
	info := sandbox.Info{
		ID:        bx.id,
		Spec:      spec,
		CreatedAt: bx.rec.CreatedAt,
		Pid:       bx.pid,
		Agent:     sandbox.Endpoint{Network: "unix", Address: bx.paths.socket()},
		State:     sandbox.StateRunning,
		Reason:    bx.rec.Reason,
	}
	if bx.rec.Stopped {
		info.State = sandbox.StateStopped
		info.Pid = 0
	}
	return info
}

func (b *Backend) saveRecord(bx *box) error {
	data, err := json.Marshal(bx.rec)
	if err != nil {
		return err
	}
	tmp := bx.paths.record + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	if err := os.Rename(tmp, bx.paths.record); err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	return nil
}
