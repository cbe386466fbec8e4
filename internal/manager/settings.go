package manager

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the manager's settings (internal/settings): sandbox types
// and pools, lifetimes, limits and quotas. The daemon gives them to
// Config.
type Settings struct {
	Templates           TemplateMap         `env:"SANDBOX_TEMPLATES" envDefault:"{\"base\":\"host\",\"filesystem\":\"host\",\"browser\":\"browser\",\"gui\":\"desktop\"}" help:"JSON map of sandbox type to template: \"host\", \"dir:/abs/rootfs\" (the operator's directory, registered as a template of the type's name) or a template of the store (NAME[:TAG]); a type mapped to host uses a stored template of its own name once there is one; other types map to agentscope's image names (RUNTIME_SANDBOX_*)"`
	DefaultTypes        TypeList            `env:"DEFAULT_SANDBOX_TYPE" envDefault:"base" help:"sandbox type(s) with a warm pool: a name, a comma list or a JSON list"`
	PoolSize            int                 `env:"POOL_SIZE" envDefault:"0" min:"0" max:"1000" help:"warm sandboxes kept ready per default sandbox type"`
	PoolMaxUses         int                 `env:"POOL_MAX_USES" envDefault:"1" min:"1" max:"1000000" help:"users a pooled sandbox serves before it is destroyed; above 1 a deleted pooled sandbox is reset in place (processes, disk, /tmp, env, network policy, access token) and returned to its pool (docs/pools.md)"`
	DefaultMountDir     string              `env:"DEFAULT_MOUNT_DIR" envDefault:"" help:"host dir for per-sandbox workspaces (<dir>/<id>), kept after release"`
	ReadonlyMounts      Mounts              `env:"READONLY_MOUNTS" envDefault:"" help:"JSON map of host path to sandbox path, mounted read-only in every sandbox"`
	MaxInstances        int                 `env:"MAX_SANDBOX_INSTANCES" envDefault:"100" min:"0" max:"1048576" help:"maximum live sandboxes on this server (warm pool included), 0 = unlimited"`
	MaxPerUser          int                 `env:"MAX_SANDBOXES_PER_USER" envDefault:"20" min:"0" max:"1048576" help:"maximum live sandboxes per user (at most MAX_SANDBOX_INSTANCES when not set), 0 = unlimited"`
	HeartbeatTimeout    time.Duration       `env:"HEARTBEAT_TIMEOUT" envDefault:"300" help:"seconds a session's sandboxes may stay idle before they are recycled, 0 = never"`
	ServiceStartTimeout time.Duration       `env:"SERVICE_START_TIMEOUT" envDefault:"120" help:"seconds a create waits for the template's service (CMD, start_cmd, warm code context) to be ready before it fails"`
	DefaultTimeout      time.Duration       `env:"DEFAULT_TIMEOUT" envDefault:"300" help:"seconds a sandbox lives when the caller gives no timeout"`
	MaxTimeout          time.Duration       `env:"MAX_TIMEOUT" envDefault:"86400" help:"largest timeout a caller may ask for, in seconds"`
	PausedTTL           time.Duration       `env:"PAUSED_TTL" envDefault:"86400" help:"seconds a paused sandbox is kept before it is destroyed (its clock is stopped while paused), 0 = until deleted"`
	MaxRequestsPerUser  int                 `env:"MAX_REQUESTS_PER_USER" envDefault:"16" min:"0" max:"1048576" help:"heavy requests (exec, code, file transfers, snapshots) one user may have in flight; more get 429, 0 = unlimited"`
	RequestMemory       int64               `env:"REQUEST_MEMORY" envDefault:"1G" help:"memory the buffers of all heavy requests may reserve together (one user at most half); more get 429, 0 = unlimited"`
	TemplateAdmins      settings.List       `env:"TEMPLATE_ADMIN_USERS" envDefault:"default" help:"users who may pull, import, export and delete templates, comma-separated (\"default\" is the keyless operator and the BEARER_TOKEN user); everyone may list them and create sandboxes from them"`
	StorageQuota        settings.SizeOrZero `env:"STORAGE_QUOTA_PER_USER" envDefault:"10G" help:"bytes one user's private templates (snapshots) may hold in the template store; a snapshot past it is refused or stopped with 429 and stores nothing; TEMPLATE_ADMIN_USERS are exempt; 0 = unlimited"`
	MaxPrivateTemplates int                 `env:"MAX_TEMPLATES_PER_USER" envDefault:"50" min:"0" max:"1048576" help:"private templates (snapshots) one user may keep; a snapshot into a new name past it gets 429; TEMPLATE_ADMIN_USERS are exempt; 0 = unlimited"`
	SnapshotMaxBytes    settings.SizeOrZero `env:"SNAPSHOT_MAX_SIZE" envDefault:"2G" help:"largest layer one snapshot of a user's may add (its files at their full size, the holes of sparse files included; bigger is stopped with 413); TEMPLATE_ADMIN_USERS are exempt; 0 = the store's layer limit (64G)"`
	DefaultNetworkMode  string              `env:"DEFAULT_NETWORK_MODE" envDefault:"none" oneof:"none egress" help:"network mode of sandboxes that do not ask: none (loopback only) or egress"`
	DefaultIsolation    string              `env:"DEFAULT_ISOLATION" envDefault:"container" oneof:"container gvisor" help:"isolation level of sandboxes whose request and template name none: container (Linux namespaces, cgroups, seccomp) or gvisor (gVisor's user-space kernel; needs RUNSC_PATH); docs/gvisor.md"`
	TemplateIsolation   IsolationMap        `env:"TEMPLATE_ISOLATION" envDefault:"" help:"JSON map of template or sandbox type name to the isolation level its sandboxes get when the request names none, e.g. {\"base\":\"gvisor\"} (agentscope types, E2B templates); DEFAULT_ISOLATION for the rest"`
	IsolationByUser     IsolationMap        `env:"ISOLATION_BY_USER" envDefault:"" help:"JSON map of user (tenant) to the weakest isolation level their sandboxes may have, e.g. {\"alice\":\"gvisor\"}: their sandboxes get it when they ask for none, a request for a weaker level is refused with 403"`
	NodeMaxSandboxes    int                 `env:"NODE_MAX_SANDBOXES" envDefault:"0" min:"0" max:"1048576" help:"sandboxes this replica hands out at most at once (warm pooled ones not counted); placement sends creates to replicas with room; 0: no limit"`
}

// ResourceSettings are a sandbox's default resources (DEFAULT_*) and the
// largest a caller may ask for (MAX_*): Config.DefaultResources and
// Config.MaxResources.
type ResourceSettings struct {
	DefaultMemory int64 `env:"DEFAULT_MEMORY" envDefault:"512M" help:"memory limit of a sandbox (swap is not allowed)"`
	DefaultCPUs   CPUs  `env:"DEFAULT_CPUS" envDefault:"1" help:"CPU quota of a sandbox in cores"`
	DefaultPIDs   int   `env:"DEFAULT_PIDS" envDefault:"256" min:"8" max:"4194304" help:"maximum processes and threads in a sandbox"`
	DefaultDisk   int64 `env:"DEFAULT_DISK" envDefault:"1G" help:"size of a sandbox's disk (/workspace, home)"`
	DefaultTmp    int64 `env:"DEFAULT_TMP" envDefault:"256M" help:"size of a sandbox's /tmp (memory-backed: at most half the sandbox's memory)"`
	MaxMemory     int64 `env:"MAX_MEMORY" envDefault:"8G" help:"largest memory limit a caller may ask for"`
	MaxCPUs       CPUs  `env:"MAX_CPUS" envDefault:"8" help:"largest CPU quota a caller may ask for"`
	MaxPIDs       int   `env:"MAX_PIDS" envDefault:"4096" min:"8" max:"4194304" help:"largest pids limit a caller may ask for"`
	MaxDisk       int64 `env:"MAX_DISK" envDefault:"20G" help:"largest disk a caller may ask for"`
}

// Defaults are a sandbox's default resources.
func (r ResourceSettings) Defaults() sandbox.Resources {
	return sandbox.Resources{MemoryBytes: r.DefaultMemory, CPUs: float64(r.DefaultCPUs), PIDs: int64(r.DefaultPIDs), DiskBytes: r.DefaultDisk, TmpBytes: r.DefaultTmp}
}

// Max are the largest resources a caller may ask for.
func (r ResourceSettings) Max() sandbox.Resources {
	return sandbox.Resources{MemoryBytes: r.MaxMemory, CPUs: float64(r.MaxCPUs), PIDs: int64(r.MaxPIDs), DiskBytes: r.MaxDisk}
}

// defaults are the settings' defaults, Config's for fields left zero.
var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults (the doors' for their own
// fallbacks: the sandbox types, the longest timeout).
func DefaultSettings() Settings { return defaults }

// TemplateMap is SANDBOX_TEMPLATES: a JSON object of sandbox types to
// templates ("host", "dir:/abs/rootfs" or a template of the store).
type TemplateMap map[string]string

// UnmarshalText reads and checks the JSON object.
func (t *TemplateMap) UnmarshalText(b []byte) error {
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("want a JSON object: %v", err)
	}
	for k, v := range m {
		if k == "" || strings.HasPrefix(k, "dir:") {
			return fmt.Errorf("template name %q: want a plain name such as \"base\"", k)
		}
		if strings.HasPrefix(v, "dir:") && !filepath.IsAbs(strings.TrimPrefix(v, "dir:")) ||
			v == "" || len(v) > 512 || strings.ContainsAny(v, " \t\n\\") {
			return fmt.Errorf("template %q: want \"host\", \"dir:/absolute/path\" or a template name, got %q", k, v)
		}
	}
	*t = m
	return nil
}

// TypeList is DEFAULT_SANDBOX_TYPE: a name, a comma list or a JSON list.
type TypeList []string

// UnmarshalText reads either form.
func (l *TypeList) UnmarshalText(b []byte) error {
	v := string(b)
	if !strings.HasPrefix(strings.TrimSpace(v), "[") {
		*l = settings.SplitList(v)
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("bad JSON list: %v", err)
	}
	*l = list
	return nil
}

// Mounts is READONLY_MOUNTS: a JSON object of host paths to sandbox
// paths, each mounted read-only, in the order of the host paths.
type Mounts []sandbox.Mount

// UnmarshalText reads the JSON object; empty is none.
func (ms *Mounts) UnmarshalText(b []byte) error {
	*ms = nil
	if strings.TrimSpace(string(b)) == "" {
		return nil
	}
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("want a JSON object: %v", err)
	}
	hosts := make([]string, 0, len(m))
	for k := range m {
		hosts = append(hosts, k)
	}
	sort.Strings(hosts)
	for _, host := range hosts {
		if !filepath.IsAbs(host) || !filepath.IsAbs(m[host]) {
			return fmt.Errorf("paths must be absolute: %q -> %q", host, m[host])
		}
		*ms = append(*ms, sandbox.Mount{Source: host, Target: m[host], ReadOnly: true})
	}
	return nil
}

// CPUs is a CPU quota in cores, a positive number.
type CPUs float64

// UnmarshalText reads the number.
func (c *CPUs) UnmarshalText(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f <= 0 {
		return fmt.Errorf("want a positive number")
	}
	*c = CPUs(f)
	return nil
}

// IsolationMap is TEMPLATE_ISOLATION and ISOLATION_BY_USER: a JSON object
// of names to isolation levels; empty is none.
type IsolationMap map[string]sandbox.Isolation

// UnmarshalText reads and checks the JSON object.
func (m *IsolationMap) UnmarshalText(b []byte) error {
	*m = nil
	if strings.TrimSpace(string(b)) == "" {
		return nil
	}
	raw := map[string]string{}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("want a JSON object of names to \"container\" or \"gvisor\": %v", err)
	}
	out := IsolationMap{}
	for k, v := range raw {
		l, err := sandbox.ParseIsolation(v)
		if err != nil || l == "" || k == "" {
			return fmt.Errorf("%q: want \"container\" or \"gvisor\", got %q", k, v)
		}
		out[k] = l
	}
	*m = out
	return nil
}
