// Package config loads the daemon's settings from defaults, a .env file,
// the environment and command-line flags (in increasing precedence).
//
// Setting names follow agentscope-runtime's sandbox server where one exists
// (HOST, PORT, BEARER_TOKEN, POOL_SIZE, ...), so an existing .env works
// unchanged. A .env file may only contain known names: a typo fails the
// start with the name in the message, instead of being silently ignored.
package config

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Config is the daemon's resolved configuration.
type Config struct {
	Host string
	Port int

	// APIKeys maps an API key to the user it authenticates. Empty means no
	// authentication (and then the server only binds to loopback).
	APIKeys map[string]string

	DataDir   string
	AgentPath string

	// Templates maps sandbox types (agentscope's "base", "filesystem", ...)
	// to templates.
	Templates map[string]string
	// DefaultTypes get a warm pool each (POOL_SIZE sandboxes).
	DefaultTypes []string
	PoolSize     int
	// PoolMaxUses is how many users a pooled sandbox serves: above 1 a
	// deleted pooled sandbox is reset in place and goes back to its pool.
	PoolMaxUses int
	// PoolWarmReset lets a recycle keep the sandbox's init when the
	// backend can prove the reset (native: see warmreset.go).
	PoolWarmReset bool

	AutoCleanup      bool
	DefaultMountDir  string
	ReadonlyMounts   []sandbox.Mount
	MaxInstances     int
	MaxPerUser       int
	HeartbeatTimeout time.Duration
	// PausedTTL destroys sandboxes paused for longer (0 = never).
	PausedTTL time.Duration
	// PauseReclaim reclaims a sandbox's reclaimable memory when it pauses.
	PauseReclaim bool
	// CgroupFavorDynmods lets the native backend remount the host's
	// cgroup2 mount with favordynmods (CGROUP_FAVOR_DYNMODS).
	CgroupFavorDynmods bool
	// MCPSessionTimeout ends MCP sessions idle this long (their sandboxes
	// are destroyed); MCPTemplate is the template of a session's sandbox.
	MCPSessionTimeout time.Duration
	MCPTemplate       string
	// ServiceStartTimeout bounds how long a create waits for a template's
	// service to be ready.
	ServiceStartTimeout time.Duration
	DefaultTimeout      time.Duration
	MaxTimeout          time.Duration
	Resources           sandbox.Resources
	MaxResources        sandbox.Resources
	// NofileSoft and NofileHard are sandbox processes' RLIMIT_NOFILE (the
	// backend lowers them further for a sandbox with many pids).
	NofileSoft, NofileHard uint64
	// IDBase and IDRanges place the sandboxes' private host id ranges.
	IDBase, IDRanges uint32

	// Deployment is CONTAINER_DEPLOYMENT: "native", or "docker" (sandbox
	// types run Docker images by default).
	Deployment string
	// DockerEnabled runs the Docker backend beside native (docker:IMAGE
	// templates); DockerHost is its engine ("" = DOCKER_HOST or the
	// default socket).
	DockerEnabled bool
	DockerHost    string
	// Kube configures the Kubernetes backend (KUBE_BACKEND,
	// CONTAINER_DEPLOYMENT=k8s, K8S_*).
	Kube KubeConfig

	// DiskReserve is space of the data dir's filesystem sandbox disks may
	// not claim; DiskOvercommit how many times the rest their sparse disks
	// may add up to.
	DiskReserve    int64
	DiskOvercommit float64

	MaxUploadBytes     int64
	MaxExecOutputBytes int64

	// MaxRequestsPerUser caps one user's heavy requests in flight (exec,
	// code, file transfers); RequestMemory bounds the buffers of all of them.
	MaxRequestsPerUser int
	RequestMemory      int64
	// MaxConnections and MaxConnectionsPerIP cap open client connections;
	// 0 derives them from the open-files limit (see ConnectionLimits).
	MaxConnections      int
	MaxConnectionsPerIP int
	HeaderTimeout       time.Duration
	BodyTimeout         time.Duration

	ContainerPrefix string
	StorageFolder   string
	FileSystem      string

	LogLevel  string
	LogFormat string

	// Network is "auto" (sandbox networking when the kernel supports it),
	// "on" (fail without it) or "off" (every sandbox is loopback-only).
	Network            string
	DefaultNetworkMode string
	NetworkBridge      string
	NetworkSubnet      netip.Prefix
	NetworkDNS         []netip.AddrPort
	NetworkHostPorts   []uint16
	NetworkPrivate     []netip.Prefix
	NetworkBandwidth   uint64 // bits/s per sandbox and direction, 0 = unlimited
	NetworkMaxConns    uint32

	// PreviewDomain, when set, serves sandbox ports at <port>-<id>.<domain>.
	PreviewDomain string
	// PreviewMaxPerUser caps one user's preview requests in flight;
	// PreviewHeaderTimeout bounds the wait for a sandbox server's answer.
	PreviewMaxPerUser    int
	PreviewHeaderTimeout time.Duration

	// NoVNCDir is the host directory of noVNC's client, which the desktop
	// page of desktop sandboxes loads (docs/desktop.md).
	NoVNCDir string
	// MetricsToken is the operator's bearer token for /metrics.
	MetricsToken string

	// TemplateDir holds the template store, the build step cache and the
	// bootstrap cache ("" = <DataDir>/templates).
	TemplateDir string
	// TemplateAdmins are the users who may pull, import, export and
	// delete templates.
	TemplateAdmins []string
	// TemplateMaxImport caps one imported tarball.
	TemplateMaxImport int64
	// TemplateMaxPulls bounds concurrent pulls, imports and exports.
	TemplateMaxPulls int
	// TemplateAutoPull pulls an image reference a create names when it is
	// not a template yet.
	TemplateAutoPull bool
	// TemplateAutoBuild names the built-in templates the daemon builds in
	// the background at start when they are not stored (none: off).
	TemplateAutoBuild []string
	// StorageQuota caps the bytes each user's private templates hold
	// (0 = no cap); MaxPrivateTemplates their number; SnapshotMaxBytes one
	// snapshot's layer. Template admins are exempt.
	StorageQuota        int64
	MaxPrivateTemplates int
	SnapshotMaxBytes    int64
	// RegistryAuth is AGENTBOX_REGISTRY_AUTH (JSON); RegistryMirrors maps
	// registry hosts to mirror URLs.
	RegistryAuth    string
	RegistryMirrors map[string][]string
	// RuntimeRegistry, RuntimeNamespace and RuntimeTag name agentscope's
	// sandbox images: [registry/][namespace/]runtime-sandbox-<type>:<tag>.
	RuntimeRegistry, RuntimeNamespace, RuntimeTag string

	// Redis is the shared state store (REDIS_*); NodeID and NodeAddress
	// name this daemon among replicas.
	Redis       RedisConfig
	NodeID      string
	NodeAddress string
	// NodeMaxSandboxes caps the sandboxes this replica hands out at once
	// (NODE_MAX_SANDBOXES; 0: none).
	NodeMaxSandboxes int
	// ClusterSecret authenticates requests one replica forwards to another
	// (CLUSTER_SECRET); ClusterPlacement spreads creates over the replicas.
	ClusterSecret    string
	ClusterPlacement bool
	// ClusterMaxConns bounds the connections (and requests in flight) to
	// each other replica, and the authenticated forwarding connections
	// accepted from each; ClusterMaxPerUser one user's share of them.
	ClusterMaxConns   int
	ClusterMaxPerUser int
	// Workers is WORKERS: worker processes `agentbox serve` runs, each a
	// replica of its own (internal/daemon/workers.go).
	Workers int
	// KubeNode configures `agentbox node` (KUBE_NODE_*).
	KubeNode KubeNode

	// Settings that were given but have no effect on this deployment, for a
	// warning at start.
	Ignored []string
}

// RedisConfig is the REDIS_* settings.
type RedisConfig struct {
	Enabled        bool
	Server         string
	Port, DB       int
	User, Password string
	KeyPrefix      string
	PoolKey        string
	Timeout        time.Duration
}

// minNofile is the smallest open-file limit a sandbox can be given.
const minNofile = 64

// setting is one configuration name.
type setting struct {
	name string
	def  string
	help string
	set  func(c *Config, v string) error
}

var settings = []setting{
	{"HOST", "127.0.0.1", "address to listen on", func(c *Config, v string) error {
		if v != "" && net.ParseIP(v) == nil && v != "localhost" {
			return fmt.Errorf("not an IP address")
		}
		c.Host = v
		return nil
	}},
	{"PORT", "8000", "TCP port to listen on", intIn(1, 65535, func(c *Config, n int) { c.Port = n })},
	{"BEARER_TOKEN", "", "API key accepted as 'Authorization: Bearer <token>' (user \"default\")", func(c *Config, v string) error {
		if v != "" {
			c.APIKeys[v] = "default"
		}
		return nil
	}},
	{"API_KEYS", "", "more API keys, comma-separated key:user pairs; each user sees only their own sandboxes", func(c *Config, v string) error {
		for _, pair := range splitList(v) {
			key, user, ok := strings.Cut(pair, ":")
			if !ok || key == "" || user == "" {
				return fmt.Errorf("want key:user pairs, got %q", pair)
			}
			c.APIKeys[key] = user
		}
		return nil
	}},
	{"AGENTBOX_DATA_DIR", DefaultDataDir(), "directory for sandbox state and the database, of every command (serve, run, doctor); default /var/lib/agentbox as root, ~/.cache/agentbox rootless", func(c *Config, v string) error {
		if v == "" {
			return fmt.Errorf("must not be empty")
		}
		c.DataDir = v
		return nil
	}},
	{"AGENT_PATH", "", "path of the agentbox-agent binary (default: next to the agentbox binary)", func(c *Config, v string) error { c.AgentPath = v; return nil }},
	{"SANDBOX_TEMPLATES", `{"base":"host","filesystem":"host","browser":"browser","gui":"desktop"}`, `JSON map of sandbox type to template: "host", "dir:/abs/rootfs" (the operator's directory, registered as a template of the type's name) or a template of the store (NAME[:TAG]); a type mapped to host uses a stored template of its own name once there is one; other types map to agentscope's image names (RUNTIME_SANDBOX_*)`, func(c *Config, v string) error {
		m := map[string]string{}
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf("want a JSON object: %v", err)
		}
		for k, t := range m {
			if k == "" || strings.HasPrefix(k, "dir:") {
				return fmt.Errorf("template name %q: want a plain name such as \"base\"", k)
			}
			if strings.HasPrefix(t, "dir:") && !filepath.IsAbs(strings.TrimPrefix(t, "dir:")) ||
				t == "" || len(t) > 512 || strings.ContainsAny(t, " \t\n\\") {
				return fmt.Errorf("template %q: want \"host\", \"dir:/absolute/path\" or a template name, got %q", k, t)
			}
			c.Templates[k] = t
		}
		return nil
	}},
	{"DEFAULT_SANDBOX_TYPE", "base", "sandbox type(s) with a warm pool: a name, a comma list or a JSON list", func(c *Config, v string) error {
		var list []string
		if strings.HasPrefix(strings.TrimSpace(v), "[") {
			if err := json.Unmarshal([]byte(v), &list); err != nil {
				return fmt.Errorf("bad JSON list: %v", err)
			}
		} else {
			list = splitList(v)
		}
		c.DefaultTypes = list
		return nil
	}},
	{"POOL_SIZE", "0", "warm sandboxes kept ready per default sandbox type", intIn(0, 1000, func(c *Config, n int) { c.PoolSize = n })},
	{"POOL_MAX_USES", "1", "users a pooled sandbox serves before it is destroyed; above 1 a deleted pooled sandbox is reset in place (processes, disk, /tmp, env, network policy, access token) and returned to its pool (docs/pools.md)", intIn(1, 1000000, func(c *Config, n int) { c.PoolMaxUses = n })},
	{"POOL_WARM_RESET", "true", "with POOL_MAX_USES above 1, reset a native host-template sandbox without restarting its init (milliseconds instead of a boot); false always resets by stopping and booting it again (docs/pools.md)", boolSetting(func(c *Config, b bool) { c.PoolWarmReset = b })},
	{"AUTO_CLEANUP", "true", "destroy every sandbox on shutdown (otherwise they survive a restart)", boolSetting(func(c *Config, b bool) { c.AutoCleanup = b })},
	{"DEFAULT_MOUNT_DIR", "", "host dir for per-sandbox workspaces (<dir>/<id>), kept after release", func(c *Config, v string) error { c.DefaultMountDir = v; return nil }},
	{"READONLY_MOUNTS", "", `JSON map of host path to sandbox path, mounted read-only in every sandbox`, func(c *Config, v string) error {
		if strings.TrimSpace(v) == "" {
			return nil
		}
		m := map[string]string{}
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf("want a JSON object: %v", err)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, host := range keys {
			if !filepath.IsAbs(host) || !filepath.IsAbs(m[host]) {
				return fmt.Errorf("paths must be absolute: %q -> %q", host, m[host])
			}
			c.ReadonlyMounts = append(c.ReadonlyMounts, sandbox.Mount{Source: host, Target: m[host], ReadOnly: true})
		}
		return nil
	}},
	{"MAX_SANDBOX_INSTANCES", "100", "maximum live sandboxes on this server (warm pool included), 0 = unlimited", intIn(0, 1<<20, func(c *Config, n int) { c.MaxInstances = n })},
	{"MAX_SANDBOXES_PER_USER", "20", "maximum live sandboxes per user (at most MAX_SANDBOX_INSTANCES when not set), 0 = unlimited", intIn(0, 1<<20, func(c *Config, n int) { c.MaxPerUser = n })},
	{"HEARTBEAT_TIMEOUT", "300", "seconds a session's sandboxes may stay idle before they are recycled, 0 = never", seconds(func(c *Config, d time.Duration) { c.HeartbeatTimeout = d })},
	{"MCP_SESSION_TIMEOUT", "1800", "seconds an MCP session (/mcp) may stay idle before it ends and its sandboxes are destroyed, 0 = never", seconds(func(c *Config, d time.Duration) { c.MCPSessionTimeout = d })},
	{"MCP_TEMPLATE", "", "template of the sandbox an MCP session (/mcp) creates on first use (default: the server's default template)", func(c *Config, v string) error { c.MCPTemplate = v; return nil }},
	{"SERVICE_START_TIMEOUT", "120", "seconds a create waits for the template's service (CMD, start_cmd, warm code context) to be ready before it fails", seconds(func(c *Config, d time.Duration) { c.ServiceStartTimeout = d })},
	{"DEFAULT_TIMEOUT", "300", "seconds a sandbox lives when the caller gives no timeout", seconds(func(c *Config, d time.Duration) { c.DefaultTimeout = d })},
	{"MAX_TIMEOUT", "86400", "largest timeout a caller may ask for, in seconds", seconds(func(c *Config, d time.Duration) { c.MaxTimeout = d })},
	{"PAUSED_TTL", "86400", "seconds a paused sandbox is kept before it is destroyed (its clock is stopped while paused), 0 = until deleted", seconds(func(c *Config, d time.Duration) { c.PausedTTL = d })},
	{"CGROUP_FAVOR_DYNMODS", "true", "native backend, as root: remount the host's cgroup2 mount with favordynmods (Linux 6.0+), so that moving each new sandbox into its cgroups does not wait for an RCU grace period (~8 ms a create); host-wide until reboot: forks and exits take a slightly slower lock path", boolSetting(func(c *Config, b bool) { c.CgroupFavorDynmods = b })},
	{"PAUSE_RECLAIM", "true", "reclaim a sandbox's page cache (and, with host swap, its other memory) as it pauses; its memory is made the first to reclaim either way", boolSetting(func(c *Config, b bool) { c.PauseReclaim = b })},
	{"DEFAULT_MEMORY", "512M", "memory limit of a sandbox (swap is not allowed)", size(func(c *Config, n int64) { c.Resources.MemoryBytes = n })},
	{"DEFAULT_CPUS", "1", "CPU quota of a sandbox in cores", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("want a positive number")
		}
		c.Resources.CPUs = f
		return nil
	}},
	{"DEFAULT_PIDS", "256", "maximum processes and threads in a sandbox", intIn(8, 1<<22, func(c *Config, n int) { c.Resources.PIDs = int64(n) })},
	{"SANDBOX_NOFILE_SOFT", "1024", "open-file limit (soft) of sandbox processes", intIn(minNofile, 1<<20, func(c *Config, n int) { c.NofileSoft = uint64(n) })},
	{"SANDBOX_NOFILE_HARD", "4096", "open-file limit (hard) of sandbox processes; lowered so pids × limit stays under 1/4 of fs.file-max", intIn(minNofile, 1<<20, func(c *Config, n int) { c.NofileHard = uint64(n) })},
	{"SANDBOX_ID_BASE", "1073741824", "first host uid/gid of the sandboxes' id ranges (65536 ids each); must not overlap host accounts", intIn(65536, 1<<32-1<<16, func(c *Config, n int) { c.IDBase = uint32(n) })},
	{"SANDBOX_ID_RANGES", "16384", "number of sandbox id ranges: one more than the most sandboxes (stopped ones included) the server holds; one owns the build cache between steps", intIn(1, 1<<16, func(c *Config, n int) { c.IDRanges = uint32(n) })},
	{"DEFAULT_DISK", "1G", "size of a sandbox's disk (/workspace, home)", size(func(c *Config, n int64) { c.Resources.DiskBytes = n })},
	{"DEFAULT_TMP", "256M", "size of a sandbox's /tmp (memory-backed: at most half the sandbox's memory)", size(func(c *Config, n int64) { c.Resources.TmpBytes = n })},
	{"MAX_MEMORY", "8G", "largest memory limit a caller may ask for", size(func(c *Config, n int64) { c.MaxResources.MemoryBytes = n })},
	{"MAX_CPUS", "8", "largest CPU quota a caller may ask for", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("want a positive number")
		}
		c.MaxResources.CPUs = f
		return nil
	}},
	{"MAX_PIDS", "4096", "largest pids limit a caller may ask for", intIn(8, 1<<22, func(c *Config, n int) { c.MaxResources.PIDs = int64(n) })},
	{"MAX_DISK", "20G", "largest disk a caller may ask for", size(func(c *Config, n int64) { c.MaxResources.DiskBytes = n })},
	{"DISK_RESERVE", "1G", "space of the data dir's filesystem that sandbox disks may not claim, and that a snapshot leaves free in the template store's filesystem (0 = none)", func(c *Config, v string) error {
		if v == "0" {
			c.DiskReserve = 0
			return nil
		}
		n, err := ParseSize(v)
		c.DiskReserve = n
		return err
	}},
	{"DISK_OVERCOMMIT", "1", "how many times the data dir's free space (minus DISK_RESERVE) sandbox disks may add up to; 1 = every disk can fill up (its blocks are reserved at create)", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0.1 || f > 100 {
			return fmt.Errorf("want a number from 0.1 to 100")
		}
		c.DiskOvercommit = f
		return nil
	}},
	{"MAX_UPLOAD_SIZE", "1G", "largest file upload", size(func(c *Config, n int64) { c.MaxUploadBytes = n })},
	{"MAX_EXEC_OUTPUT", "16M", "largest stdout/stderr kept for a buffered exec result (per stream)", size(func(c *Config, n int64) { c.MaxExecOutputBytes = n })},
	{"MAX_REQUESTS_PER_USER", "16", "heavy requests (exec, code, file transfers, snapshots) one user may have in flight; more get 429, 0 = unlimited", intIn(0, 1<<20, func(c *Config, n int) { c.MaxRequestsPerUser = n })},
	{"REQUEST_MEMORY", "1G", "memory the buffers of all heavy requests may reserve together (one user at most half); more get 429, 0 = unlimited", size(func(c *Config, n int64) { c.RequestMemory = n })},
	{"MAX_CONNECTIONS", "0", "open client connections, more are closed at once; 0 = half the open-files limit, at most 4096", intIn(0, 1<<22, func(c *Config, n int) { c.MaxConnections = n })},
	{"MAX_CONNECTIONS_PER_IP", "0", "open client connections from one address, more are closed at once; 0 = an eighth of MAX_CONNECTIONS, at least 16", intIn(0, 1<<22, func(c *Config, n int) { c.MaxConnectionsPerIP = n })},
	{"HEADER_TIMEOUT", "10", "seconds a client may take to send a request's headers", seconds(func(c *Config, d time.Duration) { c.HeaderTimeout = d })},
	{"BODY_TIMEOUT", "60", "seconds a request body may stall (no byte arriving) before the request fails", seconds(func(c *Config, d time.Duration) { c.BodyTimeout = d })},
	{"CONTAINER_PREFIX_KEY", "", "prefix of sandbox names in the agentscope API", func(c *Config, v string) error { c.ContainerPrefix = v; return nil }},
	{"CONTAINER_DEPLOYMENT", "native", "sandbox backend of the sandbox types: native, docker (types run agentscope's images, RUNTIME_SANDBOX_*, on a Docker engine; implies DOCKER_BACKEND=true) or k8s (the same images as agent-sandbox Sandboxes on a Kubernetes cluster; implies KUBE_BACKEND=true)", func(c *Config, v string) error {
		switch v {
		case "native", "":
			c.Deployment = "native"
			return nil
		case "docker":
			c.Deployment, c.DockerEnabled = "docker", true
			return nil
		case "k8s", "kubernetes", "kube":
			c.Deployment, c.Kube.Enabled = "k8s", true
			return nil
		case "agentrun", "fc", "gvisor", "cloud":
			return fmt.Errorf("backend %q is not available in this build; use native, docker or k8s", v)
		}
		return fmt.Errorf("unknown backend %q", v)
	}},
	{"DOCKER_BACKEND", "false", "run the Docker backend beside native: templates named docker:IMAGE run as Docker containers (see docs/docker.md)", boolSetting(func(c *Config, b bool) { c.DockerEnabled = c.DockerEnabled || b })},
	{"DOCKER_HOST", "", "the Docker engine of the Docker backend (unix:///path or tcp://host:port; empty: the default socket); it must run on this host", func(c *Config, v string) error {
		if v != "" && !strings.HasPrefix(v, "unix://") && !strings.HasPrefix(v, "tcp://") {
			return fmt.Errorf("want unix:///path or tcp://host:port, not %q", v)
		}
		c.DockerHost = v
		return nil
	}},
	{"KUBE_BACKEND", "false", "run the Kubernetes backend beside native: templates named kube:IMAGE run as agent-sandbox Sandboxes in K8S_NAMESPACE (see docs/kubernetes.md)", boolSetting(func(c *Config, b bool) { c.Kube.Enabled = c.Kube.Enabled || b })},
	{"K8S_NAMESPACE", "default", "namespace of the Kubernetes backend's Sandboxes, pods and policies", func(c *Config, v string) error {
		if !dnsLabel(v) {
			return fmt.Errorf("want a namespace name (a DNS-1123 label), not %q", v)
		}
		c.Kube.Namespace = v
		return nil
	}},
	{"KUBECONFIG_PATH", "", "kubeconfig file of the Kubernetes backend; empty: the in-cluster configuration of the daemon's pod", func(c *Config, v string) error { c.Kube.Kubeconfig = v; return nil }},
	{"K8S_AGENT_IMAGE", "", "image holding the static agent at /agentbox-agent, copied into every sandbox pod by an init container (required with the Kubernetes backend; deploy/kubernetes/Dockerfile.agent builds it)", func(c *Config, v string) error { c.Kube.AgentImage = v; return nil }},
	{"K8S_INSTANCE", "agentbox", "label value telling this daemon's sandboxes from other daemons' in the same namespace (daemons sharing a namespace need different ones)", func(c *Config, v string) error {
		if !dnsLabel(v) {
			return fmt.Errorf("want a DNS-1123 label, not %q", v)
		}
		c.Kube.Instance = v
		return nil
	}},
	{"K8S_RUNTIME_CLASS", "", "runtimeClassName of sandbox pods (gvisor, kata: what the cluster offers); empty: the cluster's default runtime", func(c *Config, v string) error {
		if v != "" && !dnsLabel(v) {
			return fmt.Errorf("want a RuntimeClass name, not %q", v)
		}
		c.Kube.RuntimeClass = v
		return nil
	}},
	{"K8S_NODE_SELECTOR", "", "nodeSelector of sandbox pods as key=value,... (agentbox.dev/node=true keeps them on agentbox nodes); empty: any node that admits them", func(c *Config, v string) error {
		c.Kube.NodeSelector = nil
		for _, kv := range strings.Split(v, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, val, ok := strings.Cut(kv, "=")
			if !ok || k == "" || strings.ContainsAny(k+val, " \t\"'") {
				return fmt.Errorf("want key=value,..., not %q", v)
			}
			if c.Kube.NodeSelector == nil {
				c.Kube.NodeSelector = map[string]string{}
			}
			c.Kube.NodeSelector[k] = val
		}
		return nil
	}},
	{"K8S_STORAGE_CLASS", "", "storage class of the sandboxes' workspace volumes (kept across stop and start); empty: the cluster's default class", func(c *Config, v string) error { c.Kube.StorageClass = v; return nil }},
	{"K8S_SECCOMP_PROFILE", "RuntimeDefault", "seccomp profile of sandbox pods: RuntimeDefault, or Localhost/<path> under the kubelet's seccomp directory", func(c *Config, v string) error {
		if v != "RuntimeDefault" && !strings.HasPrefix(v, "Localhost/") {
			return fmt.Errorf("want RuntimeDefault or Localhost/<path>, not %q", v)
		}
		c.Kube.SeccompProfile = v
		return nil
	}},
	{"K8S_USER_NAMESPACES", "false", "run sandbox pods in user namespaces (hostUsers: false; the nodes must support it); root sandboxes need it", boolSetting(func(c *Config, b bool) { c.Kube.UserNamespaces = b })},
	{"WORKERS", "1", "server processes on this host; above 1 (needs REDIS_ENABLED) `agentbox serve` starts that many workers sharing PORT, each its own replica on the same Redis (docs/scale-out.md)", intIn(1, 32, func(c *Config, n int) { c.Workers = n })},
	{"REDIS_ENABLED", "false", "keep sandbox records, sessions, pool membership and the node list in Redis (shared by several daemons) instead of the local bbolt file; see docs/scale-out.md", boolSetting(func(c *Config, b bool) { c.Redis.Enabled = b })},
	{"REDIS_SERVER", "localhost", "Redis host name or address", func(c *Config, v string) error {
		if v == "" || strings.ContainsAny(v, "/ \t") {
			return fmt.Errorf("want a host name or address")
		}
		c.Redis.Server = v
		return nil
	}},
	{"REDIS_PORT", "6379", "Redis port", intIn(1, 65535, func(c *Config, n int) { c.Redis.Port = n })},
	{"REDIS_DB", "0", "Redis database number", intIn(0, 1<<20, func(c *Config, n int) { c.Redis.DB = n })},
	{"REDIS_USER", "", "Redis ACL user name (empty: the default user)", func(c *Config, v string) error { c.Redis.User = v; return nil }},
	{"REDIS_PASSWORD", "", "Redis password", func(c *Config, v string) error { c.Redis.Password = v; return nil }},
	{"REDIS_KEY_PREFIX", "agentbox", "first part of every Redis key of records and nodes; deployments sharing one Redis database need different prefixes", redisKey(func(c *Config, v string) { c.Redis.KeyPrefix = v })},
	{"REDIS_CONTAINER_POOL_KEY", "_runtime_sandbox_container_container_pool", "first part of the Redis keys of warm-pool membership (one set per pool), as in agentscope", redisKey(func(c *Config, v string) { c.Redis.PoolKey = v })},
	{"REDIS_TIMEOUT", "2", "seconds a Redis command may take; with Redis down, requests that need state fail with 503 after it", seconds(func(c *Config, d time.Duration) { c.Redis.Timeout = d })},
	{"NODE_ID", "", "this daemon's name among the replicas sharing a Redis; empty: host name and a hash of the data dir (stable across restarts)", func(c *Config, v string) error {
		if len(v) > 128 || strings.ContainsAny(v, " \t\n\r") {
			return fmt.Errorf("want at most 128 characters without spaces")
		}
		c.NodeID = v
		return nil
	}},
	{"NODE_MAX_SANDBOXES", "0", "sandboxes this replica hands out at most at once (warm pooled ones not counted); placement sends creates to replicas with room; 0: no limit", intIn(0, 1<<20, func(c *Config, n int) { c.NodeMaxSandboxes = n })},
	{"NODE_ADDRESS", "", "URL other replicas and operators reach this daemon at, shown in GET /v1/nodes; empty: http://HOST:PORT", func(c *Config, v string) error { c.NodeAddress = v; return nil }},
	{"CLUSTER_SECRET", "", "secret shared by the replicas on one Redis, signing the requests one forwards to the replica that runs the sandbox (at least 32 characters); empty: nothing is forwarded and another replica's sandbox answers 503", func(c *Config, v string) error {
		if v != "" && len(v) < 32 {
			return fmt.Errorf("want at least 32 characters (e.g. openssl rand -hex 32)")
		}
		c.ClusterSecret = v
		return nil
	}},
	{"CLUSTER_MAX_CONNS", "256", "connections this replica opens to each other replica at most, and so the requests it forwards to each at once (more get 503 with Retry-After); also the forwarding connections it accepts from each other replica, once authenticated, outside MAX_CONNECTIONS_PER_IP", intIn(1, 1<<16, func(c *Config, n int) { c.ClusterMaxConns = n })},
	{"CLUSTER_MAX_PER_USER", "64", "requests of one user this replica forwards to one other replica at once (more get 429 with Retry-After), so one user cannot take every connection to it; less than CLUSTER_MAX_CONNS, 0 = no per-user limit", intIn(0, 1<<16, func(c *Config, n int) { c.ClusterMaxPerUser = n })},
	{"CLUSTER_PLACEMENT", "least_loaded", "where a create runs with several replicas: least_loaded (the live replica with the fewest sandboxes, then the least memory; needs CLUSTER_SECRET) or local (the replica that got the request)", func(c *Config, v string) error {
		switch v {
		case "least_loaded", "":
			c.ClusterPlacement = true
		case "local":
			c.ClusterPlacement = false
		default:
			return fmt.Errorf("want least_loaded or local")
		}
		return nil
	}},
	{"KUBE_NODE_NAME", "", "`agentbox node`: the Kubernetes Node's name; empty: agentbox-<host name>", func(c *Config, v string) error {
		if v != "" && !dnsSubdomain(v) {
			return fmt.Errorf("want a DNS subdomain name (lower case letters, digits, '-' and '.')")
		}
		c.KubeNode.Name = v
		return nil
	}},
	{"KUBE_NODE_KUBECONFIG", "", "`agentbox node`: kubeconfig of the node's identity; empty: the pod's in-cluster service account", func(c *Config, v string) error { c.KubeNode.Kubeconfig = v; return nil }},
	{"KUBE_NODE_ADDRESS", "", "`agentbox node`: the node's IP address, where the apiserver reaches its kubelet API and pods report their host IP (required)", func(c *Config, v string) error {
		if v != "" && net.ParseIP(v) == nil {
			return fmt.Errorf("want an IP address")
		}
		c.KubeNode.Address = v
		return nil
	}},
	{"KUBE_NODE_PORT", "10250", "`agentbox node`: port of its kubelet API (logs, exec, port-forward)", intIn(1, 65535, func(c *Config, n int) { c.KubeNode.Port = n })},
	{"KUBE_NODE_TLS_CERT", "", "`agentbox node`: the kubelet API's serving certificate (PEM), signed by a CA the apiserver's --kubelet-certificate-authority names (required)", func(c *Config, v string) error { c.KubeNode.TLSCert = v; return nil }},
	{"KUBE_NODE_TLS_KEY", "", "`agentbox node`: the key of KUBE_NODE_TLS_CERT (required)", func(c *Config, v string) error { c.KubeNode.TLSKey = v; return nil }},
	{"KUBE_NODE_CLIENT_CA", "", "`agentbox node`: CA of the client certificates the kubelet API accepts (the apiserver's kubelet client's); each request is then authorized by the apiserver (required)", func(c *Config, v string) error { c.KubeNode.ClientCA = v; return nil }},
	{"STORAGE_FOLDER", "", "where released workspaces are copied (with FILE_SYSTEM=local)", func(c *Config, v string) error { c.StorageFolder = v; return nil }},
	{"FILE_SYSTEM", "local", "storage for STORAGE_FOLDER: local", func(c *Config, v string) error {
		if v != "local" && v != "" {
			return fmt.Errorf("only \"local\" is supported")
		}
		c.FileSystem = v
		return nil
	}},
	{"NETWORK", "auto", "sandbox networking: auto (when the kernel supports it), on, or off (loopback only)", func(c *Config, v string) error {
		switch v {
		case "auto", "on", "off":
			c.Network = v
			return nil
		}
		return fmt.Errorf("want auto, on or off")
	}},
	{"DEFAULT_NETWORK_MODE", "none", "network mode of sandboxes that do not ask: none (loopback only) or egress", func(c *Config, v string) error {
		if v != "none" && v != "egress" {
			return fmt.Errorf("want none or egress")
		}
		c.DefaultNetworkMode = v
		return nil
	}},
	{"NETWORK_BRIDGE", "", "host bridge (and nftables table) of sandbox networking; empty: a free one, agentbox<N> (docs/configuration.md)", func(c *Config, v string) error {
		if len(v) > 15 || strings.ContainsAny(v, "/ \t") {
			return fmt.Errorf("want an interface name of at most 15 characters")
		}
		c.NetworkBridge = v
		return nil
	}},
	{"NETWORK_SUBNET", "", "IPv4 range sandbox addresses come from; empty: a free one, 10.(88+N).0.0/16 (docs/configuration.md)", func(c *Config, v string) error {
		if v == "" {
			c.NetworkSubnet = netip.Prefix{}
			return nil
		}
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is4() || p.Bits() > 28 {
			return fmt.Errorf("want an IPv4 CIDR of /28 or larger")
		}
		c.NetworkSubnet = p.Masked()
		return nil
	}},
	{"NETWORK_DNS", "", "upstream resolvers for sandboxes, comma-separated ip[:port] (default: the host's)", func(c *Config, v string) error {
		for _, e := range splitList(v) {
			ap, err := netip.ParseAddrPort(e)
			if err != nil {
				a, err2 := netip.ParseAddr(e)
				if err2 != nil {
					return fmt.Errorf("%q is not an address", e)
				}
				ap = netip.AddrPortFrom(a, 53)
			}
			c.NetworkDNS = append(c.NetworkDNS, ap)
		}
		return nil
	}},
	{"NETWORK_ALLOW_HOST_PORTS", "", "host TCP/UDP ports sandboxes may reach, comma-separated (default none)", func(c *Config, v string) error {
		for _, e := range splitList(v) {
			n, err := strconv.ParseUint(e, 10, 16)
			if err != nil || n == 0 {
				return fmt.Errorf("%q is not a port", e)
			}
			c.NetworkHostPorts = append(c.NetworkHostPorts, uint16(n))
		}
		return nil
	}},
	{"NETWORK_ALLOW_PRIVATE", "", "private ranges and host networks sandboxes may reach, comma-separated CIDRs (default none)", func(c *Config, v string) error {
		for _, e := range splitList(v) {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return fmt.Errorf("%q is not a CIDR", e)
			}
			c.NetworkPrivate = append(c.NetworkPrivate, p.Masked())
		}
		return nil
	}},
	{"NETWORK_BANDWIDTH", "0", "per-sandbox bandwidth limit in bits/s each way, e.g. 100M; 0 = unlimited", func(c *Config, v string) error {
		if v == "0" || v == "" {
			return nil
		}
		n, err := ParseSize(strings.TrimSuffix(strings.TrimSuffix(v, "bit"), "bps"))
		if err != nil {
			return err
		}
		// Sizes use binary multiples; bandwidths are decimal.
		c.NetworkBandwidth = uint64(float64(n) * decimalFactor(v))
		return nil
	}},
	{"NETWORK_MAX_CONNS", "0", "per-sandbox limit of concurrent outbound connections, 0 = unlimited", intIn(0, 1<<20, func(c *Config, n int) { c.NetworkMaxConns = uint32(n) })},
	{"PREVIEW_DOMAIN", "localhost", "browser previews: sandbox port P at <P>-<id>.<domain>, each its own origin (e.g. sandbox.example.com); empty turns them off", func(c *Config, v string) error {
		host := v
		if h, _, err := net.SplitHostPort(v); err == nil {
			host = h
		}
		if strings.ContainsAny(v, "/ *") || strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") || net.ParseIP(host) != nil {
			return fmt.Errorf("want a DNS name whose subdomains reach this server, optionally with :port")
		}
		c.PreviewDomain = strings.ToLower(v)
		return nil
	}},
	{"PREVIEW_MAX_PER_USER", "64", "preview requests (both forms; a WebSocket while it is open) one user may have in flight on this daemon; more get 429 with Retry-After, 0 = unlimited", intIn(0, 1<<20, func(c *Config, n int) { c.PreviewMaxPerUser = n })},
	{"PREVIEW_HEADER_TIMEOUT", "60", "seconds a preview waits for the sandbox server to start its answer (its response headers) before it fails with 504; an answer under way (a stream, a WebSocket) has no limit", seconds(func(c *Config, d time.Duration) { c.PreviewHeaderTimeout = d })},
	{"DESKTOP_NOVNC_DIR", "/usr/share/novnc", "host directory of noVNC's client (Debian's novnc package), served to the desktop page of desktop sandboxes; never the sandbox's copy", func(c *Config, v string) error {
		if v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("want an absolute path")
		}
		c.NoVNCDir = v
		return nil
	}},
	{"METRICS_TOKEN", "", "bearer token the operator reads /metrics with; without it /metrics is refused when API keys are set", func(c *Config, v string) error {
		c.MetricsToken = v
		return nil
	}},
	{"TEMPLATE_DIR", "", "directory of the template store, its build cache and bootstrap cache (default: <AGENTBOX_DATA_DIR>/templates); one daemon at a time", func(c *Config, v string) error {
		if v == "" {
			c.TemplateDir = ""
			return nil
		}
		if !filepath.IsAbs(v) {
			return fmt.Errorf("want an absolute path")
		}
		c.TemplateDir = filepath.Clean(v)
		return nil
	}},
	{"TEMPLATE_ADMIN_USERS", "default", "users who may pull, import, export and delete templates, comma-separated (\"default\" is the keyless operator and the BEARER_TOKEN user); everyone may list them and create sandboxes from them", func(c *Config, v string) error {
		c.TemplateAdmins = splitList(v)
		return nil
	}},
	{"TEMPLATE_MAX_IMPORT", "8G", "largest tarball a template import may upload", size(func(c *Config, n int64) { c.TemplateMaxImport = n })},
	{"TEMPLATE_MAX_PULLS", "2", "template pulls, imports and exports running at once (automatic pulls included); more wait for a turn", intIn(1, 64, func(c *Config, n int) { c.TemplateMaxPulls = n })},
	{"TEMPLATE_AUTO_BUILD", "base,code-interpreter,browser,desktop", "built-in templates the daemon builds in the background at start when they are not stored yet (from debian:bookworm bootstrapped through the host's apt, as make templates does), comma-separated in build order, from base, code-interpreter, browser (needs npm on the host) and desktop; off = none. A create of one still building is answered 503 template_building with Retry-After (docs/templates.md). Only the native backend builds; off with a test's fake backend", func(c *Config, v string) error {
		c.TemplateAutoBuild = nil
		if v == "off" || v == "" || v == "false" {
			return nil
		}
		for _, n := range splitList(v) {
			if !slices.Contains(BuiltinTemplates, n) {
				return fmt.Errorf("unknown built-in template %q (want some of %s, or off)", n, strings.Join(BuiltinTemplates, ", "))
			}
			if !slices.Contains(c.TemplateAutoBuild, n) {
				c.TemplateAutoBuild = append(c.TemplateAutoBuild, n)
			}
		}
		return nil
	}},
	{"TEMPLATE_AUTO_PULL", "false", "pull an image reference a create names when it is not a template yet (the create waits)", boolSetting(func(c *Config, b bool) { c.TemplateAutoPull = b })},
	{"STORAGE_QUOTA_PER_USER", "10G", "bytes one user's private templates (snapshots) may hold in the template store; a snapshot past it is refused or stopped with 429 and stores nothing; TEMPLATE_ADMIN_USERS are exempt; 0 = unlimited", sizeOrZero(func(c *Config, n int64) { c.StorageQuota = n })},
	{"MAX_TEMPLATES_PER_USER", "50", "private templates (snapshots) one user may keep; a snapshot into a new name past it gets 429; TEMPLATE_ADMIN_USERS are exempt; 0 = unlimited", intIn(0, 1<<20, func(c *Config, n int) { c.MaxPrivateTemplates = n })},
	{"SNAPSHOT_MAX_SIZE", "2G", "largest layer one snapshot of a user's may add (its files at their full size, the holes of sparse files included; bigger is stopped with 413); TEMPLATE_ADMIN_USERS are exempt; 0 = the store's layer limit (64G)", sizeOrZero(func(c *Config, n int64) { c.SnapshotMaxBytes = n })},
	{"AGENTBOX_REGISTRY_AUTH", "", `registry credentials as JSON {"host": {"username": "...", "password": "..."} | {"auth": "base64"} | {"token": "..."}}, besides docker's config.json ($DOCKER_CONFIG or ~/.docker)`, func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		var m map[string]map[string]string
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf("want a JSON object of registry hosts to credentials: %v", err)
		}
		c.RegistryAuth = v
		return nil
	}},
	{"REGISTRY_MIRRORS", "", `registry mirrors as JSON {"docker.io": ["https://mirror.example"]}: pulls try the mirrors in order, then the registry itself`, func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		m := map[string][]string{}
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf("want a JSON object of registry hosts to lists of mirror URLs: %v", err)
		}
		for host, urls := range m {
			if host == "" || strings.ContainsAny(host, "/ ") {
				return fmt.Errorf("registry %q: want a host name such as docker.io", host)
			}
			for _, u := range urls {
				if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
					return fmt.Errorf("mirror %q of %s: want an http(s) URL", u, host)
				}
			}
		}
		c.RegistryMirrors = m
		return nil
	}},
	{"RUNTIME_SANDBOX_REGISTRY", "", "registry of agentscope's sandbox images, for sandbox types not in SANDBOX_TEMPLATES (empty: Docker Hub)", imageNamePart(func(c *Config, v string) { c.RuntimeRegistry = v })},
	{"RUNTIME_SANDBOX_IMAGE_NAMESPACE", "agentscope", "namespace of agentscope's sandbox images: type T is [registry/][namespace/]runtime-sandbox-T:tag", imageNamePart(func(c *Config, v string) { c.RuntimeNamespace = v })},
	{"RUNTIME_SANDBOX_IMAGE_TAG", "latest", "tag of agentscope's sandbox images", func(c *Config, v string) error {
		if v == "" || strings.ContainsAny(v, "/:@ ") {
			return fmt.Errorf("want an image tag such as latest")
		}
		c.RuntimeTag = v
		return nil
	}},
	{"DEBUG", "false", "debug logging", boolSetting(func(c *Config, b bool) {
		if b {
			c.LogLevel = "debug"
		}
	})},
	{"LOG_LEVEL", "info", "debug, info, warn or error", func(c *Config, v string) error {
		switch strings.ToLower(v) {
		case "debug", "info", "warn", "error":
			if c.LogLevel != "debug" {
				c.LogLevel = strings.ToLower(v)
			}
			return nil
		}
		return fmt.Errorf("want debug, info, warn or error")
	}},
	{"LOG_FORMAT", "text", "text or json", func(c *Config, v string) error {
		if v != "text" && v != "json" {
			return fmt.Errorf("want text or json")
		}
		c.LogFormat = v
		return nil
	}},
}

// Names that agentscope deployments set but that mean nothing for this
// backend. Accepted (so existing .env files load) and reported as ignored.
var ignoredNames = []string{"PORT_RANGE", "REDIS_PORT_KEY",
	"OSS_ENDPOINT", "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_BUCKET_NAME"}

// KubeConfig is the Kubernetes backend's part of the configuration.
type KubeConfig struct {
	Enabled        bool
	Namespace      string
	Kubeconfig     string
	AgentImage     string
	Instance       string
	RuntimeClass   string
	NodeSelector   map[string]string
	StorageClass   string
	SeccompProfile string
	UserNamespaces bool
}

// dnsLabel reports whether s is a DNS-1123 label (a namespace's or a
// label value's safe form).
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Settings lists the known setting names with their defaults and help, for
// documentation and --help.
func Settings() [][3]string {
	out := make([][3]string, 0, len(settings))
	for _, s := range settings {
		out = append(out, [3]string{s.name, s.def, s.help})
	}
	return out
}

// Load resolves the configuration: defaults, then the .env file at path (if
// not empty), then environment variables, then overrides (flag values by
// setting name).
func Load(envFile string, environ []string, overrides map[string]string) (*Config, error) {
	values := map[string]string{}
	for _, s := range settings {
		values[s.name] = s.def
	}
	given := map[string]bool{}
	if envFile != "" {
		fileVals, err := ParseDotenv(envFile)
		if err != nil {
			return nil, err
		}
		for k, v := range fileVals {
			if !known(k) {
				return nil, fmt.Errorf("config file %s: unknown setting %s", envFile, k)
			}
			values[k] = v
			given[k] = true
		}
	}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && known(k) {
			values[k] = v
			given[k] = true
		}
	}
	for k, v := range overrides {
		if !known(k) {
			return nil, fmt.Errorf("unknown setting %s", k)
		}
		values[k] = v
		given[k] = true
	}
	c := &Config{APIKeys: map[string]string{}, Templates: map[string]string{}}
	for _, s := range settings {
		if err := s.set(c, strings.TrimSpace(values[s.name])); err != nil {
			return nil, fmt.Errorf("setting %s=%q: %w", s.name, values[s.name], err)
		}
	}
	// The per-user default follows a smaller server-wide limit.
	if !given["MAX_SANDBOXES_PER_USER"] && c.MaxInstances > 0 && c.MaxPerUser > c.MaxInstances {
		c.MaxPerUser = c.MaxInstances
	}
	for _, name := range ignoredNames {
		if given[name] {
			c.Ignored = append(c.Ignored, name)
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) validate() error {
	for _, t := range c.DefaultTypes {
		if t == "" || len(t) > 64 || strings.Trim(strings.ToLower(t), "abcdefghijklmnopqrstuvwxyz0123456789_.-") != "" {
			return fmt.Errorf("setting DEFAULT_SANDBOX_TYPE: type %q: want a name such as base or browser", t)
		}
	}
	if c.DefaultTimeout > c.MaxTimeout {
		return fmt.Errorf("setting DEFAULT_TIMEOUT: larger than MAX_TIMEOUT")
	}
	if c.DefaultTimeout <= 0 {
		return fmt.Errorf("setting DEFAULT_TIMEOUT: must be positive")
	}
	r, m := c.Resources, c.MaxResources
	if r.MemoryBytes > m.MemoryBytes || r.CPUs > m.CPUs || r.PIDs > m.PIDs || r.DiskBytes > m.DiskBytes {
		return fmt.Errorf("settings DEFAULT_*: a default resource exceeds its MAX_* setting")
	}
	if c.NofileSoft > c.NofileHard {
		return fmt.Errorf("setting SANDBOX_NOFILE_SOFT: larger than SANDBOX_NOFILE_HARD")
	}
	if c.MaxPerUser > 0 && c.MaxInstances > 0 && c.MaxPerUser > c.MaxInstances {
		return fmt.Errorf("setting MAX_SANDBOXES_PER_USER: larger than MAX_SANDBOX_INSTANCES")
	}
	if pooled := c.PoolSize * len(c.DefaultTypes); c.MaxInstances > 0 && pooled >= c.MaxInstances {
		return fmt.Errorf("setting POOL_SIZE: %d warm sandboxes leave no room under MAX_SANDBOX_INSTANCES=%d; raise it", pooled, c.MaxInstances)
	}
	if c.RequestMemory > 0 && (c.RequestMemory < 256<<20 || c.RequestMemory < 8*c.MaxExecOutputBytes) {
		// Half of it must hold one exec with the largest stdin and output.
		return fmt.Errorf("setting REQUEST_MEMORY: must be 0 or at least 256M and 8 times MAX_EXEC_OUTPUT")
	}
	if c.HeaderTimeout <= 0 || c.BodyTimeout <= 0 {
		return fmt.Errorf("settings HEADER_TIMEOUT, BODY_TIMEOUT: must be positive")
	}
	if c.PreviewHeaderTimeout <= 0 {
		return fmt.Errorf("setting PREVIEW_HEADER_TIMEOUT: must be positive")
	}
	if c.ClusterMaxPerUser >= c.ClusterMaxConns {
		// One user could then take every connection to a replica.
		return fmt.Errorf("setting CLUSTER_MAX_PER_USER: must be less than CLUSTER_MAX_CONNS (%d)", c.ClusterMaxConns)
	}
	if c.DefaultMountDir != "" && !filepath.IsAbs(c.DefaultMountDir) {
		abs, err := filepath.Abs(c.DefaultMountDir)
		if err != nil {
			return fmt.Errorf("setting DEFAULT_MOUNT_DIR: %w", err)
		}
		c.DefaultMountDir = abs
	}
	if c.StorageFolder != "" && !filepath.IsAbs(c.StorageFolder) {
		abs, err := filepath.Abs(c.StorageFolder)
		if err != nil {
			return fmt.Errorf("setting STORAGE_FOLDER: %w", err)
		}
		c.StorageFolder = abs
	}
	return nil
}

// BuiltinTemplates are the templates of templates/, in build order, that
// TEMPLATE_AUTO_BUILD may name.
var BuiltinTemplates = []string{"base", "code-interpreter", "browser", "desktop"}

// TypeTemplate returns the template of sandbox type t: its SANDBOX_TEMPLATES
// entry, else agentscope's image name for it,
// [registry/][namespace/]runtime-sandbox-<t>:<tag>.
func (c *Config) TypeTemplate(t string) string {
	if tmpl, ok := c.Templates[t]; ok {
		return tmpl
	}
	return c.RuntimeImage(t)
}

// RuntimeImage is agentscope's image name of sandbox type t,
// [registry/][namespace/]runtime-sandbox-<t>:<tag>.
func (c *Config) RuntimeImage(t string) string {
	name := "runtime-sandbox-" + t + ":" + c.RuntimeTag
	if c.RuntimeNamespace != "" {
		name = c.RuntimeNamespace + "/" + name
	}
	if c.RuntimeRegistry != "" {
		name = c.RuntimeRegistry + "/" + name
	}
	return name
}

// Loopback reports whether Host is a loopback address.
func (c *Config) Loopback() bool {
	if c.Host == "localhost" {
		return true
	}
	ip := net.ParseIP(c.Host)
	return ip != nil && ip.IsLoopback()
}

// Addr is the host:port to listen on.
func (c *Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

func known(name string) bool {
	for _, s := range settings {
		if s.name == name {
			return true
		}
	}
	for _, n := range ignoredNames {
		if n == name {
			return true
		}
	}
	return false
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func intIn(lo, hi int, set func(*Config, int)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want an integer from %d to %d", lo, hi)
		}
		set(c, n)
		return nil
	}
}

func seconds(set func(*Config, time.Duration)) func(*Config, string) error {
	return func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return fmt.Errorf("want a number of seconds >= 0")
		}
		set(c, time.Duration(f*float64(time.Second)))
		return nil
	}
}

// imageNamePart accepts "" or a registry host or namespace path.
func imageNamePart(set func(*Config, string)) func(*Config, string) error {
	return func(c *Config, v string) error {
		v = strings.Trim(v, "/")
		if strings.ContainsAny(v, " \t@\\") || strings.Contains(v, "//") || strings.Contains(v, "..") {
			return fmt.Errorf("want a registry host or image namespace such as registry.example.com or agentscope")
		}
		set(c, v)
		return nil
	}
}

// redisKey accepts a key prefix: printable, no spaces, not empty.
func redisKey(set func(*Config, string)) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" || len(v) > 200 {
			return fmt.Errorf("want 1 to 200 characters")
		}
		for _, r := range v {
			if r <= ' ' || r == 0x7f {
				return fmt.Errorf("want no spaces or control characters")
			}
		}
		set(c, v)
		return nil
	}
}

func boolSetting(set func(*Config, bool)) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := ParseBool(v)
		if err != nil {
			return err
		}
		set(c, b)
		return nil
	}
}

// ParseBool reads a boolean setting in pydantic's spellings, which
// agentscope's .env files use (true/false, 1/0, yes/no, on/off, t/f, y/n;
// empty is false).
func ParseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on", "t", "y":
		return true, nil
	case "0", "false", "no", "off", "f", "n", "":
		return false, nil
	}
	return false, fmt.Errorf("want true or false")
}

func size(set func(*Config, int64)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		set(c, n)
		return nil
	}
}

// sizeOrZero is size, where "0" also means none (no limit, no reserve).
func sizeOrZero(set func(c *Config, n int64)) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		if strings.TrimSpace(v) == "0" {
			set(c, 0)
			return nil
		}
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		set(c, n)
		return nil
	}
}

// decimalFactor converts a binary-multiple size (K = 1024) of v into its
// decimal reading (K = 1000), the convention for bandwidths.
func decimalFactor(v string) float64 {
	u := strings.ToUpper(v)
	switch {
	case strings.Contains(u, "K"):
		return 1000.0 / 1024
	case strings.Contains(u, "M"):
		return 1e6 / (1 << 20)
	case strings.Contains(u, "G"):
		return 1e9 / (1 << 30)
	}
	return 1
}

// ParseSize parses a byte size such as 512M, 1G, 1.5GiB or 1048576.
func ParseSize(v string) (int64, error) {
	s := strings.ToUpper(strings.TrimSpace(v))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "IB"), "B")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult, s = 1<<10, s[:n-1]
		case 'M':
			mult, s = 1<<20, s[:n-1]
		case 'G':
			mult, s = 1<<30, s[:n-1]
		case 'T':
			mult, s = 1<<40, s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	// !(f > 0) also refuses NaN; sizes must fit an int64 and be at least
	// a byte (converting NaN, Inf or 1e30 to int64 gives garbage, often a
	// negative size: found by FuzzParseSize).
	if err != nil || !(f > 0) {
		return 0, fmt.Errorf("want a size such as 512M or 2G, got %q", v)
	}
	b := f * float64(mult)
	if b < 1 || b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is out of range (1 byte to 8 EiB)", v)
	}
	return int64(b), nil
}

// ParseDotenv reads KEY=VALUE lines: blank lines and # comments are
// skipped, an optional "export " prefix is allowed, values may be single- or
// double-quoted.
func ParseDotenv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("config file %s:%d: want KEY=VALUE", path, i+1)
		}
		v = strings.TrimSpace(v)
		if n := len(v); n >= 2 && (v[0] == '"' && v[n-1] == '"' || v[0] == '\'' && v[n-1] == '\'') {
			v = v[1 : n-1]
		} else if idx := strings.Index(v, " #"); idx >= 0 {
			v = strings.TrimSpace(v[:idx])
		}
		out[k] = v
	}
	return out, nil
}

// KubeNode is the configuration of `agentbox node` (docs/kubernetes.md).
type KubeNode struct {
	Name, Kubeconfig, Address string
	Port                      int
	TLSCert, TLSKey, ClientCA string
}

// dnsSubdomain reports whether s is a Kubernetes object name (RFC 1123
// subdomain).
func dnsSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
