package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Limits no request can go below (as native's).
const (
	minMemoryBytes = 16 << 20
	minPIDs        = 8
)

func validateResources(r sandbox.Resources) error {
	switch {
	case r.MemoryBytes < minMemoryBytes:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.memory: at least %d MiB", minMemoryBytes>>20)
	case r.CPUs < 0.01 || r.CPUs > 1024:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.cpus: must be between 0.01 and 1024")
	case r.PIDs < minPIDs:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.pids: at least %d", minPIDs)
	case r.TmpBytes < 1<<20:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.tmp: at least 1 MiB")
	case r.DiskBytes < 0:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.disk: must not be negative")
	}
	return nil
}

// checkMounts refuses host paths that are not absolute and clean, and
// targets that would hide what the sandbox is made of.
func checkMounts(spec sandbox.Spec) error {
	if spec.WorkspaceDir != "" && (!filepath.IsAbs(spec.WorkspaceDir) || filepath.Clean(spec.WorkspaceDir) != spec.WorkspaceDir) {
		return sandbox.Errorf(sandbox.ClassInvalid, "workspace dir %q: want an absolute clean path", spec.WorkspaceDir)
	}
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.Source) || filepath.Clean(m.Source) != m.Source || !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target {
			return sandbox.Errorf(sandbox.ClassInvalid, "mount %q -> %q: want absolute clean paths", m.Source, m.Target)
		}
		for _, reserved := range []string{"/", runInSandbox, "/opt/agentbox", "/proc", "/dev", "/sys", workspaceInSandbox} {
			if m.Target == reserved || strings.HasPrefix(reserved, m.Target+"/") {
				return sandbox.Errorf(sandbox.ClassInvalid, "mount target %q is reserved", m.Target)
			}
		}
	}
	return nil
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.RefuseEgressRules(b.Name(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.CheckIsolation(b.Capabilities(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if spec.Template.Kind != sandbox.TemplateDocker || imageOf(spec.Template) == "" {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q (kind %q): the docker backend runs Docker images (docker:IMAGE)", spec.Template.Ref, spec.Template.Kind)
	}
	spec.Resources = spec.Resources.WithDefaults(b.cfg.Defaults)
	if err := validateResources(spec.Resources); err != nil {
		return sandbox.Info{}, err
	}
	if spec.Network.Mode == "" {
		spec.Network.Mode = sandbox.NetworkNone
	}
	if spec.Network.Mode != sandbox.NetworkNone {
		// agentbox's egress policy lives in native's per-sandbox network
		// namespaces; an engine network would be egress without it.
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "network mode %q is not available for Docker sandboxes (they have no network)", spec.Network.Mode)
	}
	if spec.Isolation == sandbox.IsolationGVisor && spec.Root {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "isolation %q: root sandboxes are not available on the Docker backend", sandbox.IsolationGVisor)
	}
	if spec.Root && !b.userns {
		// Without userns-remap, root in the container is root on the host
		// (capabilities dropped or not): native's guarantee that a root
		// sandbox is root only in its own user namespace would not hold.
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "root sandboxes need a Docker engine with userns-remap")
	}
	if err := checkMounts(spec); err != nil {
		return sandbox.Info{}, err
	}

	bx := &box{id: spec.ID, dir: filepath.Join(b.sbRoot, string(spec.ID))}
	bx.rec = record{Spec: spec, AccessToken: spec.AccessToken, CreatedAt: time.Now().UTC(), Container: b.containerName(spec.ID)}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	b.mu.Lock()
	if _, ok := b.boxes[spec.ID]; ok {
		b.mu.Unlock()
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	b.boxes[spec.ID] = bx
	b.mu.Unlock()
	forget := func() {
		b.mu.Lock()
		delete(b.boxes, spec.ID)
		b.mu.Unlock()
	}
	if err := os.Mkdir(bx.dir, 0o711); err != nil {
		forget()
		if errors.Is(err, os.ErrExist) {
			// Leftovers of a sandbox this process does not know: not ours.
			return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
		}
		return sandbox.Info{}, fmt.Errorf("create sandbox dir: %w", err)
	}
	fail := func(err error) (sandbox.Info, error) {
		if terr := b.teardown(context.WithoutCancel(ctx), bx); terr != nil {
			// Recover removes what is left (the record stays with it).
			b.log.Error("clean up a failed create", "sandbox", bx.id, "err", terr)
		}
		forget()
		return sandbox.Info{}, err
	}
	// The record goes first so a crash at any later step is found by Recover.
	if err := b.saveRecord(bx); err != nil {
		return fail(err)
	}
	imageEnv, err := b.ensureImage(ctx, imageOf(spec.Template))
	if err != nil {
		return fail(err)
	}
	if err := b.makeDirs(bx); err != nil {
		return fail(err)
	}
	cfg, hcfg := b.containerConfig(bx, imageEnv)
	if _, err := b.api.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hcfg, Name: bx.rec.Container}); err != nil {
		if cerrdefs.IsConflict(err) {
			// A container of that name this process does not know: not
			// ours to remove; only the directory made above goes.
			_ = os.RemoveAll(bx.dir)
			forget()
			return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
		}
		return fail(engineErr(err, "create container"))
	}
	start := time.Now()
	if err := b.boot(ctx, bx); err != nil {
		return fail(err)
	}
	b.log.Debug("sandbox created", "sandbox", spec.ID, "boot_ms", time.Since(start).Milliseconds())
	return b.info(ctx, bx), nil
}

// ImagePrefix starts the template names of Docker images ("docker:IMAGE").
const ImagePrefix = "docker:"

// imageOf is the engine's image of a docker template: its Ref, with or
// without the "docker:" prefix of the name a request gave.
func imageOf(t sandbox.Template) string { return strings.TrimPrefix(t.Ref, ImagePrefix) }

// engineErr classifies an engine error: an invalid request is the
// caller's, anything else the server's.
func engineErr(err error, what string) error {
	switch {
	case cerrdefs.IsInvalidArgument(err):
		return sandbox.Wrap(sandbox.ClassInvalid, err, what+": "+err.Error())
	case cerrdefs.IsNotFound(err):
		return sandbox.Wrap(sandbox.ClassNotFound, err, what+": "+err.Error())
	}
	return fmt.Errorf("docker: %s: %w", what, err)
}

// ensureImage makes sure the engine has image, pulling it when allowed,
// and returns the image's environment (its ENV), which the engine gives
// the container under the one the backend sets.
func (b *Backend) ensureImage(ctx context.Context, image string) ([]string, error) {
	res, err := b.api.ImageInspect(ctx, image)
	if cerrdefs.IsNotFound(err) {
		if err = b.fetchImage(ctx, image); err != nil {
			return nil, err
		}
		res, err = b.api.ImageInspect(ctx, image)
	}
	if err != nil {
		return nil, engineErr(err, "inspect image "+image)
	}
	if res.Config == nil {
		return nil, nil
	}
	return res.Config.Env, nil
}

// fetchImage gets an image the engine does not have: loaded from the
// store, or pulled when allowed.
func (b *Backend) fetchImage(ctx context.Context, image string) error {
	if b.cfg.Load != nil {
		loaded, err := b.loadFromStore(ctx, image)
		if err != nil || loaded {
			return err
		}
	}
	if !b.cfg.Pull {
		return sandbox.Errorf(sandbox.ClassInvalid, "template docker:%s: the Docker engine has no such image (pulling is off)", image)
	}
	resp, err := b.api.ImagePull(ctx, image, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(ctx)
	}
	if err != nil {
		return sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("template docker:%s: pull image: %v", image, err))
	}
	return nil
}

// loadFromStore loads the agentbox template named image into the engine
// (the store's docker export through ImageLoad). It reports false when
// the store has no such template.
func (b *Backend) loadFromStore(ctx context.Context, image string) (bool, error) {
	b.loadMu.Lock()
	defer b.loadMu.Unlock()
	if _, err := b.api.ImageInspect(ctx, image); err == nil {
		return true, nil // a concurrent create loaded it
	}
	pr, pw := io.Pipe()
	exported := make(chan error, 1)
	go func() {
		err := b.cfg.Load(ctx, image, pw)
		pw.CloseWithError(err)
		exported <- err
	}()
	res, err := b.api.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err == nil {
		_, err = io.Copy(io.Discard, res)
		res.Close()
	}
	pr.CloseWithError(io.ErrClosedPipe)
	if xerr := <-exported; xerr != nil {
		if sandbox.IsNotFound(xerr) {
			return false, nil
		}
		return false, fmt.Errorf("docker: export template %s: %w", image, xerr)
	}
	if err != nil {
		return false, engineErr(err, "load template "+image+" into the engine")
	}
	if _, err := b.api.ImageInspect(ctx, image); err != nil {
		return false, fmt.Errorf("docker: template %s loaded, but the engine has no image of that name: %w", image, err)
	}
	b.log.Info("loaded template into the engine", "image", image)
	return true, nil
}

// hostUID is the host uid of container uid id.
func (b *Backend) hostUID(id int) int { return b.idShift + id }

// makeDirs creates the sandbox's host directories: the agent's socket
// directory (the sandbox's uid must create the socket in it) and, unless
// the request brings its own, the workspace and home. The sandbox dir is
// 0711 inside a 0711 state dir: nobody else can list or guess into it.
func (b *Backend) makeDirs(bx *box) error {
	uid := sandboxUID
	if bx.rec.Spec.Root {
		uid = 0
	}
	owner := b.hostUID(uid)
	dirs := []struct {
		name string
		mode os.FileMode
	}{{"run", 0o700}, {"workspace", 0o755}, {"home", 0o700}}
	for _, d := range dirs {
		p := filepath.Join(bx.dir, d.name)
		if err := os.Mkdir(p, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", d.name, err)
		}
		owner := owner
		if d.name == "run" && bx.rec.Spec.Isolation == sandbox.IsolationGVisor {
			// The agent, root of gVisor's kernel, binds its socket here;
			// the sandbox user cannot enter (see agentPeerPid).
			owner = 0
		}
		if err := os.Chown(p, owner, owner); err != nil {
			return fmt.Errorf("chown %s: %w", d.name, err)
		}
	}
	return nil
}

// containerConfig builds the container of a sandbox. imageEnv is the
// image's ENV: the engine merges it under the container's, so every
// AGENTBOX_* variable of the image that the backend does not set is set
// empty here. Those are the backend's to give (as on native, which drops
// them from an image's environment): an image's AGENTBOX_CONTROL_TOKEN
// would open the agent's reset routes to sandbox code, which reaches the
// agent's socket on Docker, and its AGENTBOX_SERVICE would start a
// process nobody asked for.
func (b *Backend) containerConfig(bx *box, imageEnv []string) (*container.Config, *container.HostConfig) {
	spec := bx.rec.Spec
	res := spec.Resources
	user, home, caps, seccomp := strconv.Itoa(sandboxUID)+":"+strconv.Itoa(sandboxUID), sandboxHome, []string(nil), b.seccompU
	uname := "user"
	if spec.Root {
		user, home, caps, seccomp, uname = "0:0", "/root", rootCapabilities, b.seccompR, "root"
	}
	gvisor := spec.Isolation == sandbox.IsolationGVisor
	if gvisor {
		// The agent runs as root of gVisor's kernel (its socket directory
		// is root's, see agentPeerPid) and serves everything as the
		// sandbox user (--user below), never as root on request: root of
		// gVisor's kernel writes host files as the host's root.
		user, caps, seccomp = "0:0", rootCapabilities, b.seccompR
	}
	env := map[string]string{
		"HOME": home, "USER": uname, "LOGNAME": uname, "SHELL": "/bin/sh",
		"LANG": "C.UTF-8", "TERM": "xterm-256color", "HOSTNAME": string(spec.ID),
	}
	for _, kv := range imageEnv {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AGENTBOX_") {
			env[k] = ""
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	if bx.rec.AccessToken != "" {
		env["AGENTBOX_ACCESS_TOKEN"] = bx.rec.AccessToken
	}
	if gvisor {
		env["AGENTBOX_ONLY_USER_REASON"] = "the sandbox runs at isolation gvisor, which serves its default user only (no root on request)"
	}
	if spec.Service != nil {
		// Read and scrubbed by the agent before anything else runs.
		if data, err := json.Marshal(spec.Service); err == nil {
			env["AGENTBOX_SERVICE"] = string(data)
		}
	}
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	sort.Strings(envList)

	workspace := filepath.Join(bx.dir, "workspace")
	if spec.WorkspaceDir != "" {
		workspace = spec.WorkspaceDir
	}
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: b.cfg.AgentPath, Target: agentInSandbox, ReadOnly: true},
		{Type: mount.TypeBind, Source: filepath.Join(bx.dir, "run"), Target: runInSandbox},
		{Type: mount.TypeBind, Source: workspace, Target: workspaceInSandbox},
		{Type: mount.TypeBind, Source: filepath.Join(bx.dir, "home"), Target: home},
	}
	entrypoint := []string{agentInSandbox, "--listen", "unix://" + runInSandbox + "/" + socketName, "--workdir", workspaceInSandbox}
	if gvisor {
		entrypoint = append(entrypoint, "--user", strconv.Itoa(sandboxUID)+":"+strconv.Itoa(sandboxUID))
	}
	if b.shimPath != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: b.shimPath, Target: shimInSandbox, ReadOnly: true})
		entrypoint = append(entrypoint, "--shim", shimInSandbox)
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	memory := res.MemoryBytes
	pids := res.PIDs
	network := container.NetworkMode("none")
	labels := map[string]string{LabelSandbox: string(spec.ID), LabelInstance: b.instance, LabelBackend: "docker"}
	cfg := &container.Config{
		Image:      imageOf(spec.Template),
		Entrypoint: entrypoint,
		Cmd:        nil,
		User:       user,
		Env:        envList,
		Hostname:   string(spec.ID),
		WorkingDir: "/",
		Labels:     labels,
		// The image's HEALTHCHECK is not run: the engine would exec it in
		// the sandbox (processes the agent did not start) as often as the
		// image says, down to every millisecond, each probe work for the
		// engine's daemons outside the sandbox's limits.
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
	}
	hcfg := &container.HostConfig{
		Mounts:      mounts,
		NetworkMode: network,
		// A cgroup namespace of its own, as native's: on cgroup v1 the
		// engine's default is the host's, which shows sandbox code the
		// host's cgroup paths (the engine's container id).
		CgroupnsMode:   container.CgroupnsModePrivate,
		ReadonlyRootfs: !spec.WritableRoot,
		CapDrop:        []string{"ALL"},
		CapAdd:         caps,
		SecurityOpt:    []string{"no-new-privileges", seccomp},
		Tmpfs: map[string]string{
			"/tmp": "rw,nosuid,nodev,mode=1777,size=" + strconv.FormatInt(res.TmpBytes, 10),
			"/run": "rw,nosuid,nodev,mode=755,size=16m",
		},
		ShmSize:       64 << 20,
		MaskedPaths:   maskedPaths,
		ReadonlyPaths: readonlyPaths,
		Resources: container.Resources{
			Memory:     memory,
			MemorySwap: memory,
			NanoCPUs:   int64(res.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: 1024, Hard: 4096},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// The agent's own log only (sandbox output goes through it).
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
	}
	if spec.Isolation == sandbox.IsolationGVisor {
		// gVisor's kernel between the sandbox and the host's: the engine
		// starts the container with runsc (the runtime must pass
		// --host-uds=create so the agent's socket in its bind-mounted run
		// directory is a host socket the backend reaches).
		hcfg.Runtime = b.cfg.GVisorRuntime
	}
	return cfg, hcfg
}

// Paths of /proc and /sys that leak host information or allow host
// actions: the engine's defaults plus, as on native, the kernel's build
// configuration and command line and the host's block devices.
var maskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
	"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	"/proc/config.gz", "/proc/cmdline",
	"/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block",
}

var readonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// saveRecord writes the sandbox's record atomically.
func (b *Backend) saveRecord(bx *box) error {
	data, err := json.Marshal(bx.rec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(bx.dir, "record.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(bx.dir, "record.json")); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}
