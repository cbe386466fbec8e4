package native

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// In-sandbox paths the backend relies on.
const (
	agentPathInSandbox = "/.agentbox/agent"
	shimPathInSandbox  = "/.agentbox/shim"
	caBundleInSandbox  = "/.agentbox/ca-bundle.pem"
	agentRunDir        = "/run/agentbox" // reserved; nothing is mounted there any more
	agentSocketName    = "agent.sock"
	agentReadyFd       = 3
	agentSeccompFd     = 4
	agentListenFd      = 5
	workspaceInSandbox = "/workspace"
	defaultPath        = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	cpuPeriodMicros    = 100000
)

// Capabilities the agent of a sandbox with a user namespace of its own
// runs with, and with it every process that acts as root there (a root
// sandbox's, or a request for user "root" in any sandbox): all of them
// apply inside that user namespace only, to ids it maps. Enough for
// package managers and system files (chown, writing and replacing
// others' files, set-id bits, setuid/setgid to drop to other users,
// setcap), for killing any process of the sandbox and for the agent's
// own switching (CAP_SETPCAP: it empties the bounding set of processes
// that run as other users); never CAP_SYS_ADMIN, CAP_SYS_PTRACE,
// CAP_SYS_MODULE, CAP_SYS_RESOURCE, CAP_SYS_NICE, CAP_SYS_TIME,
// CAP_SYS_CHROOT, CAP_NET_ADMIN, CAP_NET_RAW, CAP_MKNOD, CAP_DAC_READ_SEARCH,
// CAP_LINUX_IMMUTABLE or CAP_IPC_OWNER (docs/security.md says why each).
// CAP_AUDIT_WRITE does nothing outside the host's user namespace (the
// kernel takes audit messages from its initial one only); it is there
// because Docker's and Kubernetes' root sets have it and the three
// backends (docker, kube, kubenode) share this set.
var rootCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_AUDIT_WRITE", "CAP_SETFCAP",
}

// Paths of /proc and /sys that leak host information or allow host actions.
var maskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
	"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	// The kernel's build configuration and boot command line, and the
	// host's block devices: the loop devices' backing_file names every
	// sandbox's disk image on the host.
	"/proc/config.gz", "/proc/cmdline",
	"/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block",
}

// caEnv are the variables OpenSSL (curl, Python's ssl), requests, Node
// and curl read a CA bundle from.
var caEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"}

var readonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// boxPaths are the host paths of one sandbox. Everything but the disk
// image lives on the backend's state tmpfs: creating files there costs
// nothing, and it is exactly as durable as the sandboxes themselves (it
// survives a daemon restart, not a reboot).
type boxPaths struct {
	dir     string // <state>/sb/<id>
	disk    string // mount point of the sandbox disk
	image   string // the disk image file, <root>/disks/<id>.img
	rootfs  string // the root filesystem handed to libcontainer
	etc     string // per-sandbox /etc files
	run     string // agent socket directory, bind-mounted at /run/agentbox
	record  string // sandbox.json
	log     string // agent stdout/stderr, on the sandbox's own disk (capped with it)
	overlay string // overlay mount point for dir: templates
}

func newBoxPaths(sbRoot, diskRoot string, id sandbox.ID) boxPaths {
	dir := filepath.Join(sbRoot, string(id))
	disk := filepath.Join(dir, "disk")
	return boxPaths{
		dir:     dir,
		disk:    disk,
		image:   filepath.Join(diskRoot, string(id)+".img"),
		etc:     filepath.Join(dir, "etc"),
		run:     filepath.Join(dir, "run"),
		record:  filepath.Join(dir, "sandbox.json"),
		log:     filepath.Join(disk, "agent.log"),
		overlay: filepath.Join(dir, "rootfs"),
	}
}

func (p boxPaths) socket() string { return filepath.Join(p.run, agentSocketName) }

// idMap is how sandbox uids map to host uids: a private range in a user
// namespace (see userns.go), or the identity for sandboxes created before
// ranges existed.
type idMap struct {
	userns  bool
	base    uint32 // host uid of sandbox uid 0 when userns
	gidBase uint32 // host gid of sandbox gid 0 when userns
	size    uint32 // ids mapped
	// nsPath is an existing user namespace with this mapping to join;
	// empty, libcontainer creates one.
	nsPath string
}

func (m idMap) host(id int) int {
	if !m.userns {
		return id
	}
	return int(m.base) + id
}

// ociSpec builds the OCI runtime spec of a sandbox. Starting from a spec and
// converting it with libcontainer's specconv keeps us on the well-trodden
// path runc itself takes (device rules, mount flags, /proc masking).
//
// iu, for image templates, is who the processes run as (resolveImageUser);
// the image's environment goes under the request's, its WORKDIR becomes
// the agent's default working directory.
func (b *Backend) ociSpec(spec sandbox.Spec, tmpl sandbox.Template, iu *imageUser, p boxPaths, ids idMap, netnsPath string) (*specs.Spec, error) {
	res := spec.Resources
	// uid and gid are who the sandbox's processes run as unless a request
	// asks for another user; the agent runs as agentUID.
	uid, gid := sandboxUID, sandboxGID
	home := sandboxHome
	user := sandboxUser
	if spec.Root {
		uid, gid, home, user = 0, 0, "/root", "root"
	}
	workdir := workspaceInSandbox
	if iu != nil {
		uid, gid, home, user = iu.uid, iu.gid, iu.home, iu.name
		workdir = imageWorkdir(tmpl.Config)
	}
	// With a user namespace of its own the agent is that namespace's root,
	// with the small root set (an unprivileged host id holding nothing
	// over the host), so that a request may act as root in any sandbox;
	// everything else runs as uid, with no capability (the agent's
	// --user). Sandboxes recorded without one (older records) keep the
	// agent unprivileged: there root would be the host's.
	agentUID, agentGID, caps := uid, gid, []string{}
	if ids.userns || spec.Root {
		agentUID, agentGID, caps = 0, 0, rootCapabilities
	}

	env := map[string]string{
		"PATH": defaultPath, "HOME": home, "USER": user, "LOGNAME": user,
		"SHELL": "/bin/bash", "LANG": "C.UTF-8", "TERM": "xterm-256color",
		"HOSTNAME": hostnameOf(spec),
	}
	if iu != nil {
		env["SHELL"] = "/bin/sh" // images may lack bash
		for k, v := range imageEnv(tmpl.Config) {
			env[k] = v
		}
	}
	if b.cfg.CABundle != "" && spec.Network.Mode == sandbox.NetworkEgress {
		// The egress broker's CA, for the hosts it intercepts; a request's
		// own values win.
		for _, k := range caEnv {
			env[k] = caBundleInSandbox
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	if spec.AccessToken != "" {
		env["AGENTBOX_ACCESS_TOKEN"] = spec.AccessToken
	}
	if spec.Service != nil {
		// Read by the agent before anything of the sandbox runs, then
		// removed from the environment (see cmd/agentbox-agent). Built
		// from the record at every boot: a start after a stop runs the
		// same service.
		data, err := json.Marshal(spec.Service)
		if err != nil {
			return nil, fmt.Errorf("encode service: %w", err)
		}
		env["AGENTBOX_SERVICE"] = string(data)
	}
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	sort.Strings(envList)

	// The agent should be the last thing the OOM killer picks. Lowering a
	// score needs CAP_SYS_RESOURCE, which a daemon inside a container may
	// lack; then the agent only raises its children's scores.
	var oomScoreAdj *int
	if canLowerOOMScore() {
		v := -500
		oomScoreAdj = &v
	}
	memory := res.MemoryBytes
	cpuQuota := int64(res.CPUs * cpuPeriodMicros)
	period := uint64(cpuPeriodMicros)
	pids := res.PIDs
	rlimits := b.sandboxRlimits(pids)
	args := []string{agentPathInSandbox,
		"--listen", "fd://" + strconv.Itoa(agentListenFd),
		"--ready-fd", strconv.Itoa(agentReadyFd),
		"--seccomp-fd", strconv.Itoa(agentSeccompFd),
		"--workdir", workdir,
		"--rlimits", rlimitsFlag(rlimits)}
	if uid != agentUID || gid != agentGID {
		args = append(args, "--user", strconv.Itoa(uid)+":"+strconv.Itoa(gid))
	}
	if spec.AgentListen != "" {
		// Checked by validateAgentListen: TCP in the sandbox's own network
		// namespace, behind its token.
		args = append(args, "--listen-also", spec.AgentListen)
	}
	if b.shimPath != "" {
		args = append(args, "--shim", shimPathInSandbox)
	}

	s := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: p.rootfs, Readonly: !spec.WritableRoot},
		Process: &specs.Process{
			User:            specs.User{UID: uint32(agentUID), GID: uint32(agentGID)},
			Args:            args,
			Env:             envList,
			Cwd:             "/",
			NoNewPrivileges: true,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:     rlimits,
			OOMScoreAdj: oomScoreAdj,
		},
		Hostname: hostnameOf(spec),
		Mounts:   b.mounts(spec, tmpl, p, ids),
		Linux: &specs.Linux{
			CgroupsPath:   "/" + b.cgroupParent + "/" + string(spec.ID),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &memory, Swap: &memory},
				CPU:     &specs.LinuxCPU{Quota: &cpuQuota, Period: &period},
				Pids:    &specs.LinuxPids{Limit: &pids},
			},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
				{Type: specs.NetworkNamespace, Path: netnsPath},
			},
		},
	}
	if b.rootless {
		// Without root there are no cgroups to create (unless delegated,
		// which this mode does not use): no limits, no cgroup path.
		s.Linux.CgroupsPath = ""
		s.Linux.Resources = &specs.LinuxResources{Devices: s.Linux.Resources.Devices}
	}
	if ids.userns && ids.nsPath != "" {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: ids.nsPath})
	} else if ids.userns {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: ids.base, Size: ids.size}}
		s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: ids.gidBase, Size: ids.size}}
	}
	return s, nil
}

func (b *Backend) mounts(spec sandbox.Spec, tmpl sandbox.Template, p boxPaths, ids idMap) []specs.Mount {
	tmpSize := spec.Resources.TmpBytes
	// /tmp is memory, charged to the sandbox's memory cgroup and never
	// reclaimable (no swap): a /tmp as large as the memory limit, once
	// full, leaves the OOM killer nothing to kill but the agent (found by
	// TestFaultNoisyNeighbour: 128 MiB of memory, the default 256 MiB
	// /tmp). Half the memory at most keeps room for the processes.
	if m := spec.Resources.MemoryBytes; m > 0 && tmpSize > m/2 {
		tmpSize = max(m/2, 1<<20)
	}
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=" + strconv.FormatInt(tmpSize, 10)}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=16m"}},
	}
	if b.rootless {
		// A user namespace may not mount a fresh sysfs for a network
		// namespace it does not own, nor use gid 5 for ptys it cannot map.
		for i := range ms {
			switch ms[i].Destination {
			case "/sys":
				ms[i] = specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}
			case "/dev/pts":
				ms[i].Options = []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}
			}
		}
	} else if isCgroup2() {
		// One mount on v2 lets programs read their own limits. On v1 it would be
		// one mount per hierarchy on every create, for little use.
		ms = append(ms, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}})
	}
	ro := []string{"bind", "ro", "nosuid", "nodev"}
	switch tmpl.Kind {
	case sandbox.TemplateHost:
		for _, dir := range hostBindDirs() {
			if spec.WritableRoot && dir == "/usr" && !b.rootless {
				// The overlay mountDisk made on the host.
				ms = append(ms, specs.Mount{Destination: "/usr", Type: "bind", Source: p.overlay,
					Options: []string{"rbind", "rw", "nosuid", "nodev"}})
				continue
			}
			if spec.WritableRoot && dir == "/usr" {
				upper, work := filepath.Join(p.disk, "upper"), filepath.Join(p.disk, "work")
				ms = append(ms, specs.Mount{Destination: "/usr", Type: "overlay", Source: "overlay",
					Options: []string{"lowerdir=/usr", "upperdir=" + upper, "workdir=" + work, "nosuid", "nodev"}})
				continue
			}
			ms = append(ms, specs.Mount{Destination: dir, Type: "bind", Source: dir, Options: append([]string{"rbind"}, ro[1:]...)})
		}
		ms = append(ms, specs.Mount{Destination: "/etc", Type: "bind", Source: b.hostEtc, Options: ro})
	case sandbox.TemplateDir:
		for _, name := range []string{"passwd", "group", "nsswitch.conf"} {
			ms = append(ms, specs.Mount{Destination: "/etc/" + name, Type: "bind", Source: filepath.Join(b.genEtc, name), Options: ro})
		}
	}
	for _, name := range perSandboxEtcFiles {
		ms = append(ms, specs.Mount{Destination: "/etc/" + name, Type: "bind", Source: filepath.Join(p.etc, name), Options: ro})
	}
	rw := []string{"bind", "rw", "nosuid", "nodev"}
	workspace := filepath.Join(p.disk, "workspace")
	if spec.WorkspaceDir != "" {
		workspace = spec.WorkspaceDir
	}
	ms = append(ms,
		specs.Mount{Destination: workspaceInSandbox, Type: "bind", Source: workspace, Options: rw},
		specs.Mount{Destination: agentPathInSandbox, Type: "bind", Source: b.cfg.AgentPath, Options: []string{"bind", "ro", "nosuid", "nodev"}},
	)
	if b.cfg.CABundle != "" && spec.Network.Mode == sandbox.NetworkEgress {
		ms = append(ms, specs.Mount{Destination: caBundleInSandbox, Type: "bind", Source: b.cfg.CABundle, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	if b.shimPath != "" {
		ms = append(ms, specs.Mount{Destination: shimPathInSandbox, Type: "bind", Source: b.shimPath, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	if tmpl.Kind == sandbox.TemplateImage {
		// An image has its own /etc (accounts included) and homes: they
		// live in its writable root, on the sandbox's disk through the
		// overlay's upper layer.
		return append(ms, extraMounts(spec, ro, rw, ids.userns && !b.rootless)...)
	}
	ms = append(ms, specs.Mount{Destination: sandboxHome, Type: "bind", Source: filepath.Join(p.disk, "home"), Options: rw})
	if spec.Root || ids.userns {
		// Root's home, where a request as root may write (mode 0700: not
		// the sandbox user's).
		ms = append(ms, specs.Mount{Destination: "/root", Type: "bind", Source: filepath.Join(p.disk, "roothome"), Options: rw})
	}
	return append(ms, extraMounts(spec, ro, rw, ids.userns && !b.rootless)...)
}

// extraMounts are the operator's extra host directories (READONLY_MOUNTS)
// and the sandbox's volumes. A volume's files carry the sandbox's own ids
// (uid 1000 is the sandbox user in every sandbox), so with a user
// namespace (idmap) it is mounted idmapped through it — one mount, not
// recursive: a volume has no submounts — and every sandbox, whatever its
// host id range, sees and writes the same owners.
func extraMounts(spec sandbox.Spec, ro, rw []string, idmap bool) []specs.Mount {
	var ms []specs.Mount
	for _, m := range spec.Mounts {
		opts := rw
		if m.ReadOnly {
			opts = ro
		}
		if m.IDMapped {
			o := append([]string{"bind"}, opts[1:]...)
			if idmap {
				o = append(o, "idmap")
			}
			ms = append(ms, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: o})
			continue
		}
		ms = append(ms, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: append([]string{"rbind"}, opts[1:]...)})
	}
	return ms
}

// libcontainerConfig converts an OCI spec into libcontainer's config.
// Rootless, cgroup errors are tolerated: limits apply only where the host
// delegates cgroups to the daemon's user.
func libcontainerConfig(id sandbox.ID, s *specs.Spec, rootless bool) (*configs.Config, error) {
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName:      string(id),
		Spec:            s,
		RootlessEUID:    rootless,
		RootlessCgroups: rootless,
	})
	if err != nil {
		return nil, fmt.Errorf("convert sandbox spec: %w", err)
	}
	return cfg, nil
}

// hostnameOf is a sandbox's host name: Spec.Hostname (checked at create),
// else its ID.
func hostnameOf(spec sandbox.Spec) string {
	if spec.Hostname != "" {
		return spec.Hostname
	}
	return string(spec.ID)
}
