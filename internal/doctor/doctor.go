// Package doctor checks a host for what agentbox needs: the kernel,
// cgroups, user namespaces and the sandboxes' host id ranges, overlayfs,
// loop devices, seccomp, nftables, the data dir, and the engines of the
// optional backends. Each check says ok, warn, missing or skip, what it
// found, and how to fix it. `agentbox doctor` prints them; a daemon that
// calls Required at start fails on a host missing something with every fix
// at once, instead of the first error of the first component that trips.
//
// The checks read the host through a Host: the files under Host.Root
// (/proc, /sys/fs/cgroup, /etc, /dev, /lib/modules, the data dir) and a
// few functions (command lookups, library and engine probes), so tests
// build a fake host in a temporary directory and take one requirement
// away at a time.
package doctor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/config"
)

// Status is the outcome of one check.
type Status string

const (
	// OK: present and usable.
	OK Status = "ok"
	// Warn: something optional is absent or degraded; agentbox runs
	// without it (with less: the detail says what).
	Warn Status = "warn"
	// Missing: something required is absent (Required names it); the fix
	// says what to do.
	Missing Status = "missing"
	// Skip: the check does not apply to these settings (the Docker
	// engine without DOCKER_BACKEND, cgroups for a rootless daemon).
	Skip Status = "skip"
)

// Result is the outcome of one check: what it found (Detail) and, unless
// it is OK, what to do about it (Fix).
type Result struct {
	// Name identifies the check: "kernel", "cgroups", "loop-devices" ...
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Options are the settings the checks depend on, as `agentbox serve` would
// run with them (FromConfig), and the host to check.
type Options struct {
	// DataDir is AGENTBOX_DATA_DIR; relative to the working directory
	// when not absolute. TemplateDir is TEMPLATE_DIR ("" = DataDir/templates).
	DataDir     string
	TemplateDir string
	// AgentPath is AGENT_PATH ("" = agentbox-agent next to the executable).
	AgentPath string
	// DiskReserve is DISK_RESERVE, DefaultDisk DEFAULT_DISK: a sandbox disk
	// fits when the data dir has both free.
	DiskReserve, DefaultDisk int64
	// IDBase and IDRanges are SANDBOX_ID_BASE and SANDBOX_ID_RANGES (zero:
	// the native backend's defaults).
	IDBase, IDRanges uint32
	// FavorDynmods is CGROUP_FAVOR_DYNMODS.
	FavorDynmods bool
	// Network is NETWORK: "on" makes nftables required, "auto" optional,
	// "off" leaves it unchecked.
	Network string
	// DockerEnabled is DOCKER_BACKEND (or CONTAINER_DEPLOYMENT=docker);
	// DockerHost is DOCKER_HOST.
	DockerEnabled bool
	DockerHost    string
	// KubeEnabled is KUBE_BACKEND (or CONTAINER_DEPLOYMENT=k8s);
	// Kubeconfig is KUBECONFIG_PATH ("" = in-cluster).
	KubeEnabled bool
	Kubeconfig  string
	// SkipOptional leaves out the checks that can only warn (Node.js, the
	// built-in templates): a daemon's start needs only the others.
	SkipOptional bool
	// Host is the host to check; nil is this machine (RealHost).
	Host *Host
}

// FromConfig returns the options of a daemon started with cfg, checking
// this machine.
func FromConfig(cfg *config.Config) Options {
	return Options{
		DataDir: cfg.DataDir, TemplateDir: string(cfg.TemplateDir), AgentPath: cfg.AgentPath,
		DiskReserve: int64(cfg.DiskReserve), DefaultDisk: cfg.Resources.DiskBytes,
		IDBase: cfg.IDBase, IDRanges: cfg.IDRanges,
		FavorDynmods:  cfg.CgroupFavorDynmods,
		Network:       cfg.Network,
		DockerEnabled: cfg.DockerEnabled, DockerHost: string(cfg.DockerHost),
		KubeEnabled: cfg.Kube.Enabled, Kubeconfig: cfg.Kube.Kubeconfig,
	}
}

// Run checks the host and returns one result per check, in a fixed order.
// It changes nothing on the host (it creates no directory, loads no
// module, remounts nothing).
func Run(ctx context.Context, opts Options) []Result {
	h := opts.Host
	if h == nil {
		h = RealHost()
	}
	c := &checker{ctx: ctx, o: opts, h: h}
	c.load()
	checks := []func() Result{
		c.root, c.kernel, c.cgroups, c.favorDynmods, c.userNamespaces, c.idRanges,
		c.overlayfs, c.loopDevices, c.mkfs, c.seccomp, c.nftables, c.agent, c.dataDir,
		c.docker, c.kube,
	}
	if !opts.SkipOptional {
		checks = append(checks, c.templates, c.node)
	}
	out := make([]Result, 0, len(checks))
	for _, check := range checks {
		out = append(out, check())
	}
	return out
}

// Required returns nil when no result is Missing, and otherwise an error
// naming every missing requirement with its fix, one per line.
func Required(results []Result) error {
	var lines []string
	for _, r := range results {
		if r.Status != Missing {
			continue
		}
		line := "  " + r.Name + ": " + r.Detail
		if r.Fix != "" {
			line += " — fix: " + r.Fix
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return nil
	}
	what := "a host requirement is"
	if len(lines) > 1 {
		what = fmt.Sprintf("%d host requirements are", len(lines))
	}
	return fmt.Errorf("%s missing (agentbox doctor shows every check):\n%s", what, strings.Join(lines, "\n"))
}

// dataDir returns the absolute data dir.
func (o Options) dataDir() string {
	d := o.DataDir
	if d == "" {
		d = config.DefaultDataDir()
	}
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return filepath.Clean(d)
}

// templateDir returns the absolute template store directory.
func (o Options) templateDir() string {
	if o.TemplateDir == "" {
		return filepath.Join(o.dataDir(), "templates")
	}
	if abs, err := filepath.Abs(o.TemplateDir); err == nil {
		return abs
	}
	return o.TemplateDir
}
