package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/units"
)

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
	return b.create(ctx, spec, "")
}

// create makes sandbox spec; its disk is a fresh copy of the formatted
// template image, or, when fork is set, a frozen copy of sandbox fork's
// (fork.go).
func (b *Backend) create(ctx context.Context, spec sandbox.Spec, fork sandbox.ID) (sandbox.Info, error) {
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	if err := b.CheckTemplate(spec.Template); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.CheckIsolation(b.Capabilities(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := b.checkGVisor(spec); err != nil {
		return sandbox.Info{}, err
	}
	tmpl := spec.Template
	if b.rootless {
		// The user namespace maps one id, the daemon's user, as root.
		spec.Root = true
	}
	spec.Resources = spec.Resources.WithDefaults(b.cfg.Defaults)
	if err := validateResources(spec.Resources); err != nil {
		return sandbox.Info{}, err
	}
	if !b.rootless {
		spec.Resources.DiskBytes = diskBucket(spec.Resources.DiskBytes)
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
	if spec.Hostname != "" && (sandbox.ID(spec.Hostname).Validate() != nil || strings.HasSuffix(spec.Hostname, "-")) {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "hostname %q: want a DNS label", spec.Hostname)
	}
	if err := validateAgentListen(spec); err != nil {
		return sandbox.Info{}, err
	}

	bx := &box{id: spec.ID, paths: newBoxPaths(b.sbRoot, b.diskRoot, spec.ID), phases: startPhases(ctx, b.cfg.PhaseObserver, "create")}
	defer func() { bx.phases = nil }()
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
	if !b.rootless && !isGVisor(spec) {
		// A gVisor sandbox's ids are its own kernel's: it needs no range.
		base, err := b.idRanges.alloc(spec.ID)
		if err != nil {
			return fail(err)
		}
		bx.rec.HostIDBase = base
	}
	// The record goes first so a crash at any later step is found by Recover.
	if err := b.saveRecord(bx); err != nil {
		return fail(err)
	}
	bx.phases.mark("validate, dir, id range, record")
	start := time.Now()
	if !b.rootless {
		if err := b.admitDisk(bx); err != nil {
			return fail(err)
		}
		bx.phases.mark("disk admission (statfs, stat of every disk)")
		if fork != "" {
			if err := b.copyForkDisk(fork, spec, bx.paths.image); err != nil {
				return fail(err)
			}
		} else if err := b.copyDiskTemplate(spec.Resources.DiskBytes, bx.paths.image); err != nil {
			return fail(err)
		}
		bx.phases.mark("disk: sparse copy of the ext4 template")
	}
	net, err := b.setupNetwork(ctx, bx)
	if err != nil {
		return fail(err)
	}
	var diskDone time.Time
	err = b.privately(func() error {
		ids := b.idMap(bx.rec)
		release, err := b.userNamespace(&ids)
		if err != nil {
			return err
		}
		defer release()
		bx.phases.mark("user namespace holder (fork+exec, maps)")
		if err := b.mountDisk(bx, tmpl, ids, true); err != nil {
			return err
		}
		bx.phases.mark("disk: loop attach + mount ext4 + overlay")
		if spec.WorkspaceDir != "" && ids.userns && !b.rootless {
			if err := b.reownTree(spec.WorkspaceDir, ids); err != nil {
				return err
			}
		}
		if fork != "" && ids.userns {
			// The copy's files belong to the source's host id range.
			for _, d := range diskDirs {
				if err := b.reownTree(filepath.Join(bx.paths.disk, d.path), ids); err != nil {
					return fmt.Errorf("fork: %w", err)
				}
			}
		}
		// Only the daemon may reach the agent's socket: root's, not mounted
		// into the sandbox (the agent gets the listening socket as a fd).
		if err := os.Mkdir(bx.paths.run, 0o700); err != nil {
			return err
		}
		diskDone = time.Now()
		return b.boot(ctx, bx, tmpl, ids, net)
	})
	if err != nil {
		return fail(err)
	}
	bx.phases.mark("record, info")
	b.log.Debug("sandbox created", "sandbox", spec.ID, "disk_ms", ms(diskDone.Sub(start)),
		"boot_ms", ms(time.Since(diskDone)), "total_ms", ms(time.Since(start)))
	return b.infoLocked(bx), nil
}

// copyDiskTemplate gives a sandbox its disk: a sparse copy of the cached
// formatted image of its size.
func (b *Backend) copyDiskTemplate(size int64, dst string) error {
	for attempt := 0; ; attempt++ {
		image, err := b.disks.template(size, hostSkeleton)
		if err != nil {
			return err
		}
		err = sparseCopy(image, dst)
		if err == nil && b.cfg.DiskOvercommit <= 1 {
			err = preallocate(dst, size)
		}
		if err == nil {
			return nil
		}
		_ = os.Remove(dst)
		// Evicted between lookup and copy by another create: build it again.
		if !errors.Is(err, os.ErrNotExist) || attempt > 0 {
			if sandbox.ClassOf(err) == sandbox.ClassNoSpace {
				return err
			}
			return fmt.Errorf("copy disk image: %w", err)
		}
	}
}

// preallocate reserves every block of a sandbox's disk image in the data
// dir's filesystem. Without overcommit every disk is promised its full
// size; a sparse image only keeps that promise while nothing else fills
// the filesystem: once it is full, the sandbox's writes succeed inside it
// and are lost when written back (I/O errors later, data gone; found by
// TestFaultDataDirFull). fallocate allocates unwritten extents: fast, no
// data written, reads still return zeroes. Filesystems without fallocate
// keep the sparse image.
func preallocate(image string, size int64) error {
	f, err := os.OpenFile(image, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	switch {
	case err == nil, errors.Is(err, unix.EOPNOTSUPP):
		return nil
	case errors.Is(err, unix.ENOSPC):
		return sandbox.Errorf(sandbox.ClassNoSpace, "not enough disk space on the server for a %s sandbox disk", units.FormatBytes(size))
	}
	return fmt.Errorf("preallocate disk image: %w", err)
}

// admitDisk refuses a sandbox whose disk would take the sandboxes' sparse
// disks past what the data dir's filesystem can hold: they are sparse, so
// without this each one could be promised space another one fills, and a
// full host disk breaks every sandbox (and the daemon) at once. bx is
// already in b.boxes, so concurrent creates count each other.
func (b *Backend) admitDisk(bx *box) error {
	var provisioned int64
	b.mu.Lock()
	for _, o := range b.boxes {
		// Spec is fixed at creation: safe to read without o.mu.
		provisioned += o.rec.Spec.Resources.DiskBytes
	}
	b.mu.Unlock()
	allocated := b.diskUse.get(b, bx)
	var fs unix.Statfs_t
	if err := unix.Statfs(b.diskRoot, &fs); err != nil {
		return fmt.Errorf("statfs disk dir: %w", err)
	}
	free := int64(fs.Bavail) * fs.Bsize
	capacity := free + allocated - b.cfg.DiskReserve
	if float64(provisioned) <= b.cfg.DiskOvercommit*float64(capacity) {
		return nil
	}
	want := bx.rec.Spec.Resources.DiskBytes
	return sandbox.Errorf(sandbox.ClassQuota,
		"not enough disk space on the server for a %s disk: the sandboxes' disks would add up to %s, the data dir has room for %s (%s free and %s used by sandbox disks, minus a %s reserve; overcommit %g)",
		units.FormatBytes(want), units.FormatBytes(provisioned), units.FormatBytes(max(capacity, 0)), units.FormatBytes(free), units.FormatBytes(allocated),
		units.FormatBytes(b.cfg.DiskReserve), b.cfg.DiskOvercommit)
}

// diskUseCache keeps the sum of the blocks the live sandboxes' disks use
// for a short while: counting it stats every disk, a cost that grew with
// the number of sandboxes on each create. Disks fill over seconds, not
// microseconds; a create within diskUseTTL of the last count reuses it.
// Stale, the sum errs on the safe side: a disk that grew since counts
// less space back in, and a removed disk leaves the sum (removed).
type diskUseCache struct {
	mu    sync.Mutex
	at    time.Time
	bytes int64
}

const diskUseTTL = time.Second

// removed takes a disk about to be deleted out of the cached sum: its
// blocks become free space, which must not count twice.
func (c *diskUseCache) removed(image string) {
	var st unix.Stat_t
	if unix.Stat(image, &st) != nil {
		return
	}
	c.mu.Lock()
	c.bytes = max(c.bytes-st.Blocks*512, 0)
	c.mu.Unlock()
}

func (c *diskUseCache) get(b *Backend, self *box) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < diskUseTTL {
		return c.bytes
	}
	b.mu.Lock()
	images := make([]string, 0, len(b.boxes))
	for _, o := range b.boxes {
		if o != self {
			images = append(images, o.paths.image)
		}
	}
	b.mu.Unlock()
	var allocated int64
	for _, image := range images {
		// Blocks the live disks already use are no longer free: count them
		// back in as capacity they were promised.
		var st unix.Stat_t
		if unix.Stat(image, &st) == nil {
			allocated += st.Blocks * 512
		}
	}
	c.at, c.bytes = time.Now(), allocated
	return allocated
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// validateAgentListen checks Spec.AgentListen: a TCP address in the
// sandbox's own network namespace (never the host's: network mode none
// has only loopback, which is fine too), and never without a token.
func validateAgentListen(spec sandbox.Spec) error {
	if spec.AgentListen == "" {
		return nil
	}
	hostPort, ok := strings.CutPrefix(spec.AgentListen, "tcp://")
	if !ok {
		return sandbox.Errorf(sandbox.ClassInvalid, "agent listen address %q: want tcp://HOST:PORT", spec.AgentListen)
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return sandbox.Errorf(sandbox.ClassInvalid, "agent listen address %q: %v", spec.AgentListen, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return sandbox.Errorf(sandbox.ClassInvalid, "agent listen address %q: bad port", spec.AgentListen)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return sandbox.Errorf(sandbox.ClassInvalid, "agent listen address %q: the host must be an IP address", spec.AgentListen)
	}
	if spec.AccessToken == "" {
		return sandbox.Errorf(sandbox.ClassInvalid, "agent listen address %q needs an access token", spec.AgentListen)
	}
	return nil
}

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
		for _, reserved := range reservedTargets(spec.Template.Kind) {
			if clean == reserved || (reserved != "/" && hasPathPrefix(clean, reserved)) {
				return sandbox.Errorf(sandbox.ClassInvalid, "mount target %q is reserved", m.Target)
			}
		}
	}
	return nil
}

// reservedTargets are where extra mounts may not go. An image's /etc and
// /usr are its own files in its writable root (a build step's secret may
// go to /etc/apt/...), except the per-sandbox /etc files; elsewhere they
// are the host's or generated.
func reservedTargets(kind string) []string {
	r := []string{"/", "/proc", "/sys", "/dev", agentRunDir, "/.agentbox"}
	if kind != sandbox.TemplateImage {
		return append(r, "/etc", "/usr")
	}
	for _, name := range perSandboxEtcFiles {
		r = append(r, "/etc/"+name)
	}
	return r
}

func hasPathPrefix(p, prefix string) bool {
	return len(p) > len(prefix) && p[:len(prefix)] == prefix && p[len(prefix)] == '/'
}

// idMap returns how the sandbox of rec maps ids: rootless, the daemon's
// user only; else the sandbox's own range (see userns.go). Sandboxes
// recorded before ranges existed keep the mapping they were created with.
func (b *Backend) idMap(rec record) idMap {
	switch {
	case isGVisor(rec.Spec):
		// gVisor's kernel keeps its own ids; on the host its files belong
		// to the ids the sandbox names (as a sandbox without a range).
		return idMap{}
	case b.rootless:
		return idMap{userns: true, base: uint32(os.Geteuid()), gidBase: uint32(os.Getegid()), size: 1}
	case rec.HostIDBase != 0:
		return idMap{userns: true, base: rec.HostIDBase, gidBase: rec.HostIDBase, size: idRangeSize}
	case rec.Spec.Root:
		return idMap{userns: true, base: legacyRootIDBase, gidBase: legacyRootIDBase, size: idRangeSize}
	}
	return idMap{}
}

// mountDisk mounts the sandbox disk and, for dir: templates, the overlay root.
// fresh is true on first creation, when ownership must be set up.
func (b *Backend) mountDisk(bx *box, tmpl sandbox.Template, ids idMap, fresh bool) error {
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
		dev, err := mountImage(p.image, p.disk, fresh)
		if err != nil {
			return err
		}
		bx.loopDev = dev
	}
	if bx.disk == nil {
		f, err := openDiskRoot(p.disk)
		if err != nil {
			return err
		}
		bx.disk = f
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
	if tmpl.Kind == sandbox.TemplateHost {
		p.rootfs = filepath.Join(p.disk, "rootfs")
		if !bx.rec.Spec.WritableRoot || isMountPoint(p.overlay) {
			return nil
		}
		// The writable /usr is mounted here, not by libcontainer inside
		// the sandbox, so that its options name no host path (see
		// mountOverlayHidden); the sandbox gets a bind of it.
		if err := os.MkdirAll(p.overlay, 0o755); err != nil {
			return err
		}
		return mountOverlayHidden(p.overlay, "/usr", filepath.Join(p.disk, "upper"), filepath.Join(p.disk, "work"))
	}
	p.rootfs = p.overlay
	if err := os.MkdirAll(p.overlay, 0o755); err != nil {
		return err
	}
	if isMountPoint(p.overlay) {
		return nil
	}
	upper, work := filepath.Join(p.disk, "upper"), filepath.Join(p.disk, "work")
	if tmpl.Kind == sandbox.TemplateImage {
		if ids.nsPath == "" && !isGVisor(bx.rec.Spec) {
			return errors.New("image template without a user namespace")
		}
		return mountLayers(p.overlay, tmpl.Layers, upper, work, ids.nsPath)
	}
	return mountOverlayHidden(p.overlay, tmpl.Dir, upper, work)
}

// userNamespace makes the sandbox's user namespace ahead of its mounts
// (image layers are idmapped into it) and records it in ids for boot to
// join; release it once the sandbox's init has joined it. Rootless, or
// without a user namespace, there is nothing to make.
func (b *Backend) userNamespace(ids *idMap) (release func(), err error) {
	if !ids.userns || b.rootless {
		return func() {}, nil
	}
	holder, err := newUserNamespace(b.cfg.AgentPath, *ids)
	if err != nil {
		return nil, err
	}
	ids.nsPath = holder.path()
	return holder.release, nil
}

// mountOverlayHidden mounts an overlay at target naming its layers by
// /proc/self/fd/N of O_PATH descriptors rather than by host path: the
// options show in the sandbox's /proc/self/mountinfo, and must not reveal
// where the data directory or the template is on the host. Naming layers
// by descriptor also keeps a path's characters out of the option string.
func mountOverlayHidden(target, lower, upper, work string) error {
	var names [3]string
	for i, dir := range []string{lower, upper, work} {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open overlay layer %s: %w", dir, err)
		}
		defer unix.Close(fd)
		names[i] = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	opts, err := overlayOptions(names[0], names[1], names[2])
	if err != nil {
		return err
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mount overlay root: %w", err)
	}
	return nil
}

// overlayOptions builds overlayfs mount options. The kernel splits them at
// "," and lower layers at ":" ("\\" escapes): a path holding one of them
// would mount something else than named, so it is refused.
func overlayOptions(lower, upper, work string) (string, error) {
	for _, p := range []string{lower, upper, work} {
		if strings.ContainsAny(p, ":,\\\n") {
			return "", fmt.Errorf("overlay path %q contains an option separator", p)
		}
	}
	return "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + overlayFeaturesOff, nil
}

// overlayFeaturesOff keeps a sandbox's upper layer plain whatever the
// distribution's overlayfs defaults: with redirect_dir or metacopy a rename
// or chmod of a lower directory leaves xattr pointers instead of a full
// copy, which a snapshot (layer.Diff) cannot turn into an image layer.
const overlayFeaturesOff = ",redirect_dir=off,metacopy=off"

// sandboxNet is a sandbox's network namespace (none: "") and nameservers.
type sandboxNet struct {
	nsPath      string
	nameservers []string
}

// setupNetwork gives the sandbox its network. It runs before the private
// mount namespace of boot is made (mountns.go): the network namespace is a
// bind mount in the daemon's namespace, which the private copy, and so the
// sandbox's init, must already see.
func (b *Backend) setupNetwork(ctx context.Context, bx *box) (sandboxNet, error) {
	spec := bx.rec.Spec
	var n sandboxNet
	if spec.Network.Mode != sandbox.NetworkNone {
		var err error
		n.nsPath, n.nameservers, err = b.cfg.Network.Setup(ctx, spec.ID, spec.Network)
		if err != nil {
			return n, fmt.Errorf("set up network: %w", err)
		}
	}
	bx.phases.mark("network setup")
	return n, nil
}

// boot starts the sandbox's init (the agent) and waits until it serves.
func (b *Backend) boot(ctx context.Context, bx *box, tmpl sandbox.Template, ids idMap, net sandboxNet) error {
	spec := bx.rec.Spec
	spec.AccessToken = bx.rec.AccessToken
	netnsPath, nameservers := net.nsPath, net.nameservers
	if err := writeSandboxEtc(bx.paths.etc, string(spec.ID), nameservers); err != nil {
		return fmt.Errorf("write /etc: %w", err)
	}
	bx.phases.mark("write per-sandbox /etc")
	if ids.userns && !b.rootless && ids.nsPath == "" {
		release, err := b.userNamespace(&ids)
		if err != nil {
			return err
		}
		defer release()
	}
	var user *imageUser
	if tmpl.Kind == sandbox.TemplateImage {
		u, err := resolveImageUser(bx.paths.rootfs, tmpl.Config, spec.Root)
		if err != nil {
			return err
		}
		if err := prepareImageRoot(bx.paths.rootfs, u, ids); err != nil {
			return err
		}
		if err := giveWorkspace(filepath.Join(bx.paths.disk, "workspace"), u, ids); err != nil {
			return err
		}
		user = &u
	}
	oci, err := b.ociSpec(spec, tmpl, user, bx.paths, ids, netnsPath)
	if err != nil {
		return err
	}
	if ids.userns && !b.rootless {
		if netnsPath != "" {
			dir := netnsSysfsDir(bx.paths)
			if err := mountNetnsSysfs(netnsPath, dir); err != nil {
				return err
			}
			useNetnsSysfs(oci, dir)
		}
		prepare := func() error { return prepareMountpoints(bx.paths.rootfs, oci.Mounts) }
		if tmpl.Kind != sandbox.TemplateHost {
			// Into an overlay upper, as the sandbox's root: see
			// prepareImageRoot (a snapshot refuses host-owned files).
			inner := prepare
			prepare = func() error { return asHostUser(ids.base, ids.gidBase, inner) }
		}
		if err := prepare(); err != nil {
			return err
		}
	}
	if isGVisor(spec) {
		return b.bootGVisor(ctx, bx, oci, netnsPath)
	}
	var control string
	if b.warmEligible(spec, tmpl) {
		if control, err = newControlToken(); err != nil {
			return err
		}
		oci.Process.Env = append(oci.Process.Env, "AGENTBOX_CONTROL_TOKEN="+control)
	}
	bx.phases.mark("OCI spec + mountpoints in rootfs")
	cfg, err := libcontainerConfig(spec.ID, oci, b.rootless)
	if err != nil {
		return err
	}
	container, err := libcontainer.Create(b.stateRoot, string(spec.ID), cfg)
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	bx.container = container
	bx.phases.mark("libcontainer config + Create (state dir)")

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
	if oci.Process.User.UID == 0 {
		bpf = b.seccompRoot // the profile evaluated for the root set (ociSpec)
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
	if b.initExe != nil {
		// Last, right before libcontainer's own pipes, where the fastinit
		// constructor looks for it; the exec into it closes it, so the
		// agent never has it.
		proc.ExtraFiles = append(proc.ExtraFiles, b.initExe)
	}
	bx.phases.mark("pipes, agent socket, log file")
	runStart := time.Now()
	// container.Run, in its two steps: the init is set up and waits to
	// exec the agent in between (where tests look at it).
	err = container.Start(proc)
	if err == nil {
		pid, _ := proc.Pid()
		if bx.phases.measuresCPU() {
			bx.phases.report("sandbox init process CPU (set up, before the agent's exec)", processCPU(pid))
		}
		if initStartedHook != nil {
			initStartedHook(pid)
		}
		err = container.Exec()
	}
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
	bx.phases.mark("container.Run: re-exec init, nsenter, cgroups, rootfs, seccomp, exec agent")
	if err := waitReady(ctx, readyR, b.cfg.ReadyTimeout); err != nil {
		return fmt.Errorf("agent did not start: %w%s", err, logTail(bx.diskPath("agent.log")))
	}
	bx.phases.mark("agent start until ready byte")
	bx.warm = nil
	if control != "" {
		// The mount table a warm reset finds again, and the attributes
		// it gives the agent back (nothing of the sandbox has run yet).
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		var attrs *agentAttrs
		if err == nil {
			attrs, err = readAgentAttrs(pid)
		}
		if err == nil {
			bx.warm = &warmState{control: control, mountinfo: mi, agent: attrs}
		} else {
			b.log.Warn("sandbox cannot be warm reset", "sandbox", spec.ID, "err", err)
		}
	}
	if bx.phases.measuresCPU() {
		bx.phases.report("sandbox init process CPU (init + agent, until ready)", processCPU(pid))
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
		<-done //nolint:errcheck // waits for the reader to stop; the context's end is what is reported
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
