package doctor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/units"
)

// Kernel versions the checks compare with.
var (
	// minKernel: the native backend waits for sandbox processes with
	// pidfd_open(PIDFD_NONBLOCK) (5.10) and unpacks layers with openat2
	// (5.6).
	minKernel = majorMinor{5, 10}
	// idmapKernel: image templates are overlayfs over idmapped mounts.
	idmapKernel = majorMinor{5, 19}
	// dynmodsKernel: the cgroup2 mount option favordynmods.
	dynmodsKernel = majorMinor{6, 0}
	// minNode builds the web console (vite).
	minNode = majorMinor{20, 19}
)

// checker runs the checks of one Run.
type checker struct {
	ctx context.Context
	o   Options
	h   *Host

	mounts    []*mountinfo.Info
	mountsErr error
	release   string // the kernel release, "" when unknown
	kver      majorMinor
}

// load reads what several checks share: the mount table and the kernel
// release.
func (c *checker) load() {
	f, err := os.Open(c.h.path("/proc/self/mountinfo"))
	if err == nil {
		c.mounts, err = mountinfo.GetMountsFromReader(f, nil)
		f.Close()
	}
	c.mountsErr = err
	if rel, err := c.read("/proc/sys/kernel/osrelease"); err == nil {
		c.release = rel
		c.kver, _ = parseVersion(rel)
	}
}

func (c *checker) rootless() bool { return c.h.Euid != 0 }

// read returns the trimmed content of the host file p.
func (c *checker) read(p string) (string, error) {
	b, err := os.ReadFile(c.h.path(p))
	return strings.TrimSpace(string(b)), err
}

func (c *checker) exists(p string) bool {
	_, err := os.Stat(c.h.path(p))
	return err == nil
}

func (c *checker) root() Result {
	r := Result{Name: "root"}
	if !c.rootless() {
		r.Status, r.Detail = OK, "running as root: sandboxes get cgroup limits, disk caps, image templates and networking"
		return r
	}
	r.Status = Warn
	r.Detail = fmt.Sprintf("running as uid %d: the daemon runs rootless, with no memory, CPU or process limits, no disk cap, only the host template and loopback networking", c.h.Euid)
	r.Fix = "run agentbox as root for untrusted code (docs/security.md, Rootless mode)"
	return r
}

func (c *checker) kernel() Result {
	r := Result{Name: "kernel"}
	switch {
	case c.release == "":
		r.Status, r.Detail = Warn, "cannot read the kernel release (/proc/sys/kernel/osrelease)"
	case c.kver.less(minKernel):
		r.Status = Missing
		r.Detail = fmt.Sprintf("Linux %s: agentbox needs %s or later (pidfd_open with PIDFD_NONBLOCK, openat2)", c.release, minKernel)
		r.Fix = "upgrade the kernel to Linux " + minKernel.String() + " or later (Debian 11, Ubuntu 22.04 and newer have one)"
	case c.kver.less(idmapKernel):
		r.Status = Warn
		r.Detail = fmt.Sprintf("Linux %s: image templates need %s or later (overlayfs over idmapped mounts); the host template works", c.release, idmapKernel)
		r.Fix = "upgrade the kernel to Linux " + idmapKernel.String() + " or later for image templates"
	default:
		r.Status, r.Detail = OK, "Linux "+c.release
	}
	return r
}

// cgroups checks the cgroup version and the controllers the native
// backend's limits use: memory (with swap accounting on v1, where the
// limit is set on memory plus swap), cpu, pids, and on v1 devices
// (libcontainer refuses to run without it) and freezer (pause; v2 has it
// built in).
func (c *checker) cgroups() Result {
	r := Result{Name: "cgroups"}
	if c.rootless() {
		r.Status, r.Detail = Skip, "rootless: sandboxes get no cgroup limits"
		return r
	}
	if c.mountsErr != nil {
		r.Status, r.Detail = Missing, fmt.Sprintf("cannot read the mount table: %v", c.mountsErr)
		r.Fix = "mount /proc"
		return r
	}
	var unified, hybrid *mountinfo.Info
	v1 := map[string]string{} // controller → mount point
	for _, m := range c.mounts {
		switch m.FSType {
		case "cgroup2":
			if m.Mountpoint == "/sys/fs/cgroup" {
				unified = m
			} else if hybrid == nil {
				hybrid = m
			}
		case "cgroup":
			for _, o := range strings.Split(m.VFSOptions, ",") {
				if _, ok := v1[o]; !ok && o != "rw" && o != "ro" && !strings.HasPrefix(o, "name=") {
					v1[o] = m.Mountpoint
				}
			}
		}
	}
	need := []string{"memory", "cpu", "pids"}
	var have, missing, warns []string
	switch {
	case unified != nil:
		ctrl, err := c.read("/sys/fs/cgroup/cgroup.controllers")
		if err != nil {
			r.Status, r.Detail = Missing, fmt.Sprintf("cgroup v2: %v", err)
			r.Fix = "mount cgroup2 at /sys/fs/cgroup"
			return r
		}
		have = strings.Fields(ctrl)
		r.Detail = "v2 (unified)"
	case len(v1) > 0:
		need = append(need, "devices")
		for n := range v1 {
			have = append(have, n)
		}
		slices.Sort(have)
		r.Detail = "v1"
		if hybrid != nil {
			r.Detail += " (hybrid: cgroup2 at " + hybrid.Mountpoint + " too)"
		}
		if mem, ok := v1["memory"]; ok && !c.exists(filepath.Join(mem, "memory.memsw.limit_in_bytes")) {
			missing = append(missing, "swap accounting (memory.memsw.limit_in_bytes)")
		}
		if _, ok := v1["freezer"]; !ok {
			warns = append(warns, "no freezer controller: sandboxes cannot be paused")
		}
	default:
		r.Status = Missing
		r.Detail = "no cgroup filesystem is mounted at /sys/fs/cgroup"
		r.Fix = "mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup), or boot with systemd, which does"
		return r
	}
	r.Detail += ", controllers " + strings.Join(have, " ")
	var absent []string
	for _, n := range need {
		if !slices.Contains(have, n) {
			absent = append(absent, n)
		}
	}
	missing = append(absent, missing...)
	switch {
	case len(missing) > 0:
		r.Status = Missing
		r.Detail += "; missing " + strings.Join(missing, ", ")
		var fixes []string
		if len(absent) > 0 {
			fixes = append(fixes, "a kernel with the memory, cpu, pids (and on v1 devices) controllers (CONFIG_MEMCG, CONFIG_CGROUP_SCHED, CONFIG_CGROUP_PIDS, CONFIG_CGROUP_DEVICE), none turned off with cgroup_disable= on its command line")
		}
		if len(absent) < len(missing) {
			fixes = append(fixes, "swapaccount=1 on the kernel command line, or the host on cgroup v2 (systemd.unified_cgroup_hierarchy=1): memory limits are set on memory plus swap")
		}
		r.Fix = strings.Join(fixes, "; ")
	case len(warns) > 0:
		r.Status = Warn
		r.Detail += "; " + strings.Join(warns, "; ")
		r.Fix = "mount the v1 freezer hierarchy (a kernel with CONFIG_CGROUP_FREEZER)"
	default:
		r.Status = OK
	}
	return r
}

func (c *checker) favorDynmods() Result {
	r := Result{Name: "favordynmods"}
	switch {
	case c.rootless():
		r.Status, r.Detail = Skip, "rootless: the daemon leaves the host's cgroup mounts alone"
		return r
	case !c.o.FavorDynmods:
		r.Status, r.Detail = Skip, "CGROUP_FAVOR_DYNMODS=false: the host's cgroup2 mount is left as it is"
		return r
	}
	var m *mountinfo.Info
	for _, mi := range c.mounts {
		if mi.FSType == "cgroup2" {
			m = mi
			break
		}
	}
	switch {
	case m == nil:
		r.Status = Warn
		r.Detail = "no cgroup2 mount to set favordynmods on: moving each sandbox into its cgroups waits for an RCU grace period (about 8 ms a create)"
	case slices.Contains(strings.Split(m.VFSOptions, ","), "favordynmods"):
		r.Status, r.Detail = OK, "on ("+m.Mountpoint+")"
	case c.release != "" && c.kver.less(dynmodsKernel):
		r.Status = Warn
		r.Detail = fmt.Sprintf("Linux %s has no favordynmods (%s+): moving each sandbox into its cgroups waits for an RCU grace period (about 8 ms a create)", c.release, dynmodsKernel)
		r.Fix = "optional: Linux " + dynmodsKernel.String() + " or later"
	default:
		r.Status, r.Detail = OK, "off now; the daemon remounts "+m.Mountpoint+" with favordynmods at start (CGROUP_FAVOR_DYNMODS=true)"
	}
	return r
}

func (c *checker) userNamespaces() Result {
	r := Result{Name: "user-namespaces"}
	max, err := c.read("/proc/sys/user/max_user_namespaces")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.Status = Missing
		r.Detail = "the kernel has no user namespaces (no /proc/sys/user/max_user_namespaces); every sandbox has one of its own"
		r.Fix = "a kernel built with CONFIG_USER_NS"
		return r
	case err != nil:
		r.Status, r.Detail = Warn, fmt.Sprintf("cannot read user.max_user_namespaces: %v", err)
		return r
	case max == "0":
		r.Status = Missing
		r.Detail = "user.max_user_namespaces is 0; every sandbox has a user namespace of its own"
		r.Fix = "sysctl -w user.max_user_namespaces=15000 (and the same in /etc/sysctl.d/)"
		return r
	}
	r.Detail = "user.max_user_namespaces=" + max
	if !c.rootless() {
		// Root creates each namespace as the sandbox's host id but with
		// the daemon's capabilities: unprivileged_userns_clone and
		// AppArmor's restriction apply to unprivileged creators only.
		r.Status = OK
		return r
	}
	if v, err := c.read("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && v == "0" {
		r.Status = Missing
		r.Detail += "; kernel.unprivileged_userns_clone=0 keeps a rootless daemon from creating them"
		r.Fix = "sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/), or run agentbox as root"
		return r
	}
	if v, err := c.read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && v == "1" {
		r.Status = Missing
		r.Detail += "; kernel.apparmor_restrict_unprivileged_userns=1 keeps a rootless daemon from using them"
		r.Fix = "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile that allows userns for agentbox, or run agentbox as root"
		return r
	}
	r.Status = OK
	r.Detail += ", unprivileged creation allowed"
	return r
}

func (c *checker) idRanges() Result {
	r := Result{Name: "id-ranges"}
	if c.rootless() {
		r.Status, r.Detail = Skip, "rootless: sandboxes map only the daemon's own user"
		return r
	}
	base, count := c.o.IDBase, c.o.IDRanges
	if base == 0 {
		base = native.DefaultIDBase
	}
	if count == 0 {
		count = native.DefaultIDRanges
	}
	if err := native.CheckIDRanges(c.h.path("/etc"), base, count); err != nil {
		r.Status, r.Detail = Missing, err.Error()
		r.Fix = fmt.Sprintf("set SANDBOX_ID_BASE and SANDBOX_ID_RANGES (now %d and %d, 65536 ids a range) to a range clear of the host's accounts", base, count)
		return r
	}
	r.Status = OK
	r.Detail = fmt.Sprintf("host ids %d-%d (SANDBOX_ID_BASE, SANDBOX_ID_RANGES) clear of /etc/passwd, group, subuid, subgid and login.defs", base, uint64(base)+uint64(count)*65536-1)
	return r
}

func (c *checker) overlayfs() Result {
	r := Result{Name: "overlayfs"}
	switch {
	case c.filesystem("overlay"):
		r.Status, r.Detail = OK, "overlay in /proc/filesystems"
	case c.module("overlay"):
		r.Status, r.Detail = OK, "overlay module, loaded on first mount"
	case c.rootless():
		r.Status, r.Detail = Warn, "the kernel has no overlayfs: sandboxes with a writable root fail"
		r.Fix = "modprobe overlay (a kernel with CONFIG_OVERLAY_FS)"
	default:
		r.Status, r.Detail = Missing, "the kernel has no overlayfs: image templates and writable roots are overlay mounts"
		r.Fix = "modprobe overlay (a kernel with CONFIG_OVERLAY_FS)"
	}
	return r
}

func (c *checker) loopDevices() Result {
	r := Result{Name: "loop-devices"}
	if c.rootless() {
		r.Status, r.Detail = Skip, "rootless: no disk cap, sandbox files are plain directories"
		return r
	}
	if c.exists("/dev/loop-control") {
		r.Status, r.Detail = OK, "/dev/loop-control"
		return r
	}
	r.Status = Missing
	r.Detail = "no /dev/loop-control: each sandbox's disk is an ext4 image on a loop device"
	r.Fix = "modprobe loop (and list it in /etc/modules-load.d/); in a container, pass /dev/loop-control and the /dev/loop* devices"
	return r
}

func (c *checker) mkfs() Result {
	r := Result{Name: "mkfs.ext4"}
	if c.rootless() {
		r.Status, r.Detail = Skip, "rootless: no disk images"
		return r
	}
	if c.h.LookPath != nil {
		if p, err := c.h.LookPath("mkfs.ext4"); err == nil {
			r.Status, r.Detail = OK, p
			return r
		}
	}
	r.Status, r.Detail = Missing, "mkfs.ext4 is not in PATH: it formats the sandboxes' disk images"
	r.Fix = "apt install e2fsprogs"
	return r
}

func (c *checker) seccomp() Result {
	r := Result{Name: "seccomp"}
	status, err := c.read("/proc/self/status")
	if err == nil && !strings.Contains(status, "\nSeccomp:") && !strings.HasPrefix(status, "Seccomp:") {
		r.Status = Missing
		r.Detail = "the kernel has no seccomp (no Seccomp line in /proc/self/status); every sandbox runs under a seccomp filter"
		r.Fix = "a kernel built with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER"
		return r
	}
	if c.h.Seccomp == nil {
		r.Status, r.Detail = Missing, "cannot tell which libseccomp is linked"
		r.Fix = "a build of agentbox with cgo and libseccomp (make build)"
		return r
	}
	v, err := c.h.Seccomp()
	if err != nil {
		r.Status, r.Detail = Missing, "libseccomp: "+err.Error()
		r.Fix = "apt install libseccomp2 (libseccomp-dev to build agentbox)"
		return r
	}
	r.Status, r.Detail = OK, "libseccomp "+v+" linked; the kernel filters system calls"
	return r
}

func (c *checker) nftables() Result {
	r := Result{Name: "nftables"}
	network := c.o.Network
	if network == "" {
		network = "auto"
	}
	switch {
	case network == "off":
		r.Status, r.Detail = Skip, "NETWORK=off: sandboxes get loopback only"
		return r
	case c.rootless() && network == "on":
		r.Status, r.Detail = Missing, "NETWORK=on: sandbox networking needs a root daemon"
		r.Fix = "run agentbox as root, or NETWORK=auto"
		return r
	case c.rootless():
		r.Status, r.Detail = Skip, "rootless: sandboxes get loopback only"
		return r
	}
	err := errors.New("cannot tell")
	if c.h.NFTables != nil {
		ctx, cancel := context.WithTimeout(c.ctx, probeTimeout)
		err = c.h.NFTables(ctx)
		cancel()
	}
	if err != nil {
		r.Detail = "nf_tables does not answer (" + err.Error() + "): egress sandboxes need it"
		r.Fix = "modprobe nf_tables (a kernel with CONFIG_NF_TABLES), or NETWORK=off"
		if network == "on" {
			r.Status = Missing
		} else {
			r.Status = Warn
			r.Detail += "; with NETWORK=auto every sandbox gets loopback only"
		}
		return r
	}
	r.Status, r.Detail = OK, "the kernel's nf_tables answers (NETWORK="+network+")"
	if c.h.LookPath != nil {
		if _, err := c.h.LookPath("nft"); err != nil {
			r.Detail += "; the nft command is not installed (apt install nftables to inspect the rules; agentbox does not need it)"
		}
	}
	return r
}

func (c *checker) agent() Result {
	r := Result{Name: "agent"}
	p := c.o.AgentPath
	fix := "set AGENT_PATH to the agentbox-agent binary (make build puts it in bin/)"
	if p == "" {
		fix = "make build (it puts bin/agentbox-agent next to bin/agentbox), or set AGENT_PATH"
		if c.h.Executable == nil {
			r.Status, r.Detail, r.Fix = Missing, "cannot tell where the agentbox binary is", fix
			return r
		}
		exe, err := c.h.Executable()
		if err != nil {
			r.Status, r.Detail, r.Fix = Missing, "cannot find the agentbox binary: "+err.Error(), fix
			return r
		}
		p = filepath.Join(filepath.Dir(exe), "agentbox-agent")
	} else if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if st, err := os.Stat(c.h.path(p)); err != nil || !st.Mode().IsRegular() {
		r.Status, r.Detail, r.Fix = Missing, "no agentbox-agent at "+p+": the program every sandbox runs as its first process", fix
		return r
	}
	r.Status, r.Detail = OK, p
	return r
}

// dataDir checks that the data dir exists or can be created, that a root
// daemon's sandboxes can pass through its parents, its filesystem, and its
// free space against DISK_RESERVE and DEFAULT_DISK.
func (c *checker) dataDir() Result {
	r := Result{Name: "data-dir"}
	dir := c.o.dataDir()
	existing, state := dir, "exists"
	for {
		st, err := os.Stat(c.h.path(existing))
		if err == nil {
			if !st.IsDir() {
				r.Status, r.Detail = Missing, existing+" is not a directory"
				r.Fix = "remove it, or set AGENTBOX_DATA_DIR to a directory"
				return r
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || existing == "/" {
			r.Status, r.Detail = Missing, err.Error()
			r.Fix = "set AGENTBOX_DATA_DIR to a directory agentbox can create"
			return r
		}
		existing, state = filepath.Dir(existing), "will be created"
	}
	if existing != dir && unix.Access(c.h.path(existing), unix.W_OK) != nil {
		r.Status = Missing
		r.Detail = fmt.Sprintf("%s does not exist and %s is not writable", dir, existing)
		r.Fix = "mkdir -p " + dir + " (as root), or set AGENTBOX_DATA_DIR to a directory agentbox can create"
		return r
	}
	if !c.rootless() {
		// As the native backend checks at start (checkSandboxesCanTraverse).
		var closed []string
		for d := existing; ; d = filepath.Dir(d) {
			if st, err := os.Lstat(c.h.path(d)); err == nil && st.Mode()&fs.ModeSymlink == 0 && st.Mode().Perm()&0o001 == 0 {
				closed = append(closed, d)
			}
			if d == "/" {
				break
			}
		}
		if len(closed) > 0 {
			slices.Reverse(closed)
			r.Status = Missing
			r.Detail = fmt.Sprintf("sandboxes run as unprivileged host ids that must pass through %s's parents to reach their root filesystems; others may not search %s", dir, strings.Join(closed, ", "))
			r.Fix = "chmod o+x " + strings.Join(closed, " ") + " (others may pass through, not list), or a data dir such as /var/lib/agentbox"
			return r
		}
	}
	r.Detail = dir + " (" + state + ")"
	var warns, fixes []string
	if m := c.mountOf(existing); m != nil {
		r.Detail += ", " + m.FSType
		switch m.FSType {
		case "tmpfs", "ramfs":
			warns = append(warns, "on "+m.FSType+": sandbox disks and templates take memory and are lost at reboot")
			fixes = append(fixes, "set AGENTBOX_DATA_DIR on a disk filesystem (ext4, xfs, btrfs), e.g. /var/lib/agentbox")
		case "overlay":
			warns = append(warns, "on overlayfs (a container's root filesystem?): image templates need idmapped mounts of their layers, which overlayfs may refuse, and loop devices over overlay files are slow")
			fixes = append(fixes, "give AGENTBOX_DATA_DIR a volume or bind mount of a disk filesystem")
		}
	}
	if c.h.DiskFree != nil {
		free, err := c.h.DiskFree(c.h.path(existing))
		switch {
		case err != nil:
			warns = append(warns, "cannot read its free space: "+err.Error())
		case int64(free) < c.o.DiskReserve+c.o.DefaultDisk:
			warns = append(warns, fmt.Sprintf("%s free, less than DISK_RESERVE %s plus DEFAULT_DISK %s: creates of sandboxes with a disk are refused",
				units.FormatBytes(int64(free)), units.FormatBytes(c.o.DiskReserve), units.FormatBytes(c.o.DefaultDisk)))
			fixes = append(fixes, "free space there, or lower DISK_RESERVE or DEFAULT_DISK")
		default:
			r.Detail += ", " + units.FormatBytes(int64(free)) + " free"
		}
	}
	if len(warns) > 0 {
		r.Status = Warn
		r.Detail += ": " + strings.Join(warns, "; ")
		r.Fix = strings.Join(fixes, "; ")
		return r
	}
	r.Status = OK
	return r
}

func (c *checker) docker() Result {
	r := Result{Name: "docker"}
	if !c.o.DockerEnabled {
		r.Status, r.Detail = Skip, "DOCKER_BACKEND=false"
		return r
	}
	where := c.o.DockerHost
	if where == "" {
		where = "DOCKER_HOST or the default socket"
	}
	err := errors.New("cannot tell")
	if c.h.Docker != nil {
		err = c.h.Docker(c.ctx, c.o.DockerHost)
	}
	if err != nil {
		r.Status = Missing
		r.Detail = "DOCKER_BACKEND is on but no Docker engine answers at " + where + ": " + err.Error()
		r.Fix = "start the engine (systemctl start docker), set DOCKER_HOST, or DOCKER_BACKEND=false"
		return r
	}
	r.Status, r.Detail = OK, "the engine at "+where+" answers"
	return r
}

func (c *checker) kube() Result {
	r := Result{Name: "kubernetes"}
	if !c.o.KubeEnabled {
		r.Status, r.Detail = Skip, "KUBE_BACKEND=false"
		return r
	}
	where := "the in-cluster configuration"
	if c.o.Kubeconfig != "" {
		where = "kubeconfig " + c.o.Kubeconfig
	}
	err := errors.New("cannot tell")
	if c.h.Kube != nil {
		ctx, cancel := context.WithTimeout(c.ctx, probeTimeout)
		err = c.h.Kube(ctx, c.o.Kubeconfig)
		cancel()
	}
	if errors.Is(err, errNoKubeClient) {
		r.Status = Missing
		r.Detail = "KUBE_BACKEND is on and this binary has no Kubernetes client (built with the nokube tag)"
		r.Fix = "make build puts agentbox-kube, the full build, next to agentbox: agentbox doctor and serve hand over to it"
		return r
	}
	if err != nil {
		r.Status = Missing
		r.Detail = "KUBE_BACKEND is on but the API server of " + where + " does not answer: " + err.Error()
		r.Fix = "set KUBECONFIG_PATH to a kubeconfig whose API server answers (or run the daemon in the cluster), or KUBE_BACKEND=false"
		return r
	}
	r.Status, r.Detail = OK, "the API server of "+where+" answers"
	return r
}

// templates reports which built-in templates are in the template store,
// reading its records file without opening the store (a running daemon
// holds its lock).
func (c *checker) templates() Result {
	r := Result{Name: "templates"}
	if c.rootless() {
		r.Status, r.Detail = Skip, "rootless: only the host template"
		return r
	}
	dir := c.o.templateDir()
	fix := "make templates (with the daemon running: it builds them through AGENTBOX_URL as the operator)"
	b, err := os.ReadFile(c.h.path(filepath.Join(dir, "templates.json")))
	if errors.Is(err, fs.ErrNotExist) {
		r.Status, r.Detail, r.Fix = Warn, "no built-in template in "+dir+" yet: sandboxes use the host template", fix
		return r
	}
	var f struct {
		Templates []struct {
			Name string `json:"name"`
		} `json:"templates"`
	}
	names := map[string]bool{}
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		r.Status, r.Detail = Warn, "cannot read the template store's records: "+err.Error()
		return r
	}
	for _, t := range f.Templates {
		names[t.Name] = true
	}
	var have, missing []string
	for _, name := range config.BuiltinTemplates {
		if names[name] {
			have = append(have, name)
		} else {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		r.Status, r.Fix = Warn, fix
		r.Detail = "not built: " + strings.Join(missing, ", ") + " (" + dir + "); sandboxes of type base use the host template until base is built"
		return r
	}
	r.Status, r.Detail = OK, strings.Join(have, ", ")+" in "+dir
	return r
}

func (c *checker) node() Result {
	r := Result{Name: "nodejs"}
	fix := "Node.js " + minNode.String() + " or newer (Debian 13's nodejs, NodeSource's, or scripts/install-deps.sh as root); only to build the web console"
	if c.h.LookPath == nil || c.h.Output == nil {
		r.Status, r.Detail, r.Fix = Warn, "cannot tell whether Node.js is installed", fix
		return r
	}
	if _, err := c.h.LookPath("node"); err != nil {
		r.Status, r.Detail, r.Fix = Warn, "no node in PATH: the web console cannot be built (the daemon serves without it, with a page saying so)", fix
		return r
	}
	ctx, cancel := context.WithTimeout(c.ctx, probeTimeout)
	out, err := c.h.Output(ctx, "node", "--version")
	cancel()
	v, perr := parseVersion(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"))
	if err != nil || perr != nil {
		r.Status, r.Detail, r.Fix = Warn, fmt.Sprintf("node --version: %v%v", err, perr), fix
		return r
	}
	got := strings.TrimSpace(string(out))
	if v.less(minNode) {
		r.Status, r.Fix = Warn, fix
		r.Detail = "Node.js " + got + ": the web console's build (vite) needs " + minNode.String() + " or newer (the daemon serves without it)"
		return r
	}
	r.Status, r.Detail = OK, "Node.js "+got
	return r
}

// filesystem reports whether /proc/filesystems lists fstype.
func (c *checker) filesystem(fstype string) bool {
	data, err := c.read("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == fstype {
			return true
		}
	}
	return false
}

// module reports whether the kernel can load module name: it is loaded,
// built in, or in the running kernel's modules.dep.
func (c *checker) module(name string) bool {
	if c.exists("/sys/module/" + name) {
		return true
	}
	if c.release == "" {
		return false
	}
	for _, file := range []string{"modules.builtin", "modules.dep"} {
		f, err := os.Open(c.h.path(filepath.Join("/lib/modules", c.release, file)))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			path, _, _ := strings.Cut(sc.Text(), ":")
			base := filepath.Base(strings.TrimSpace(path))
			for _, ext := range []string{".xz", ".zst", ".gz"} {
				base = strings.TrimSuffix(base, ext)
			}
			// Module file names use - or _ interchangeably with the name.
			if strings.ReplaceAll(base, "-", "_") == strings.ReplaceAll(name, "-", "_")+".ko" {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}

// mountOf returns the mount that holds host path p (the longest mount
// point above it), nil when unknown.
func (c *checker) mountOf(p string) *mountinfo.Info {
	var best *mountinfo.Info
	for _, m := range c.mounts {
		mp := m.Mountpoint
		if p == mp || mp == "/" || strings.HasPrefix(p, mp+"/") {
			if best == nil || len(mp) >= len(best.Mountpoint) {
				best = m
			}
		}
	}
	return best
}

// majorMinor is a major.minor version (of Linux, or of Node.js).
type majorMinor struct{ major, minor int }

func (v majorMinor) less(w majorMinor) bool {
	return v.major < w.major || v.major == w.major && v.minor < w.minor
}

func (v majorMinor) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// parseVersion reads the major and minor numbers of "6.1.0-18-amd64" or
// "20.19.2".
func parseVersion(s string) (majorMinor, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return majorMinor{}, fmt.Errorf("version %q: want major.minor", s)
	}
	lead := func(p string) (int, error) {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		return strconv.Atoi(p[:end])
	}
	major, err1 := lead(parts[0])
	minor, err2 := lead(parts[1])
	if err := errors.Join(err1, err2); err != nil {
		return majorMinor{}, fmt.Errorf("version %q: %w", s, err)
	}
	return majorMinor{major, minor}, nil
}
