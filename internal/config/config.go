// Package config loads the daemon's settings from defaults, a .env file,
// the environment and command-line flags (in increasing precedence).
//
// Setting names follow agentscope-runtime's sandbox server where one exists
// (HOST, PORT, BEARER_TOKEN, POOL_SIZE, ...), so an existing .env works
// unchanged. A .env file may only contain known names: a typo fails the
// start with the name in the message, instead of being silently ignored.
//
// Each setting is declared (name, default, help, type) by the component
// that uses it, in its Settings struct (internal/settings parses them);
// Config composes those, the daemon-wide settings and the backends' (whose
// packages link their runtimes: libcontainer's init, the Kubernetes
// client), and resolves what several settings decide together.
package config

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/cluster"
	"github.com/agentbox/agentbox/internal/compat/agentscope"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/history"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/settings"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/volume"
	"github.com/agentbox/agentbox/internal/webhook"
)

// The components' settings, embedded in Config under names of their own
// (their fields are Config's).
type (
	ManagerSettings    = manager.Settings
	NetworkSettings    = netpolicy.Settings
	APISettings        = httpapi.Settings
	DataPlaneSettings  = dataplane.Settings
	AgentscopeSettings = agentscope.Settings
	MCPSettings        = mcpserver.Settings
	TemplateSettings   = template.Settings
	ClusterSettings    = cluster.Settings
	EventsSettings     = events.Settings
	WebhookSettings    = webhook.Settings
	HistorySettings    = history.Settings
	AuditSettings      = audit.Settings
	VolumeSettings     = volume.Settings
	SecretsSettings    = secrets.Settings
	TracingSettings    = tracing.Settings
	// RedisConfig is the REDIS_* settings.
	RedisConfig = store.RedisSettings
)

// Config is the daemon's resolved configuration.
type Config struct {
	Host Host `env:"HOST" envDefault:"127.0.0.1" help:"address to listen on"`
	Port int  `env:"PORT" envDefault:"8000" min:"1" max:"65535" help:"TCP port to listen on"`
	// APIKeys maps an API key to the user it authenticates (BEARER_TOKEN's
	// is "default", API_KEYS the others). Empty means no authentication
	// (and then the server only binds to loopback).
	APIKeys map[string]string

	DataDir     string `env:"AGENTBOX_DATA_DIR" envDefault:"/var/lib/agentbox" notEmpty:"true" help:"directory for sandbox state and the database, of every command (serve, run, doctor); default /var/lib/agentbox as root, ~/.cache/agentbox rootless"`
	AgentPath   string `env:"AGENT_PATH" envDefault:"" help:"path of the agentbox-agent binary (default: next to the agentbox binary)"`
	AutoCleanup bool   `env:"AUTO_CLEANUP" envDefault:"true" help:"destroy every sandbox on shutdown (otherwise they survive a restart)"`
	// MaxConnections and MaxConnectionsPerIP cap open client connections; 0
	// derives them from the open-files limit (see ConnectionLimits).
	MaxConnections      int           `env:"MAX_CONNECTIONS" envDefault:"0" min:"0" max:"4194304" help:"open client connections, more are closed at once; 0 = half the open-files limit, at most 4096"`
	MaxConnectionsPerIP int           `env:"MAX_CONNECTIONS_PER_IP" envDefault:"0" min:"0" max:"4194304" help:"open client connections from one address, more are closed at once; 0 = an eighth of MAX_CONNECTIONS, at least 16"`
	HeaderTimeout       time.Duration `env:"HEADER_TIMEOUT" envDefault:"10" help:"seconds a client may take to send a request's headers"`
	BodyTimeout         time.Duration `env:"BODY_TIMEOUT" envDefault:"60" help:"seconds a request body may stall (no byte arriving) before the request fails"`
	// Workers is WORKERS: worker processes `agentbox serve` runs, each a
	// replica of its own (internal/daemon/workers.go).
	Workers int "env:\"WORKERS\" envDefault:\"1\" min:\"1\" max:\"32\" help:\"server processes on this host; above 1 (needs REDIS_ENABLED) `agentbox serve` starts that many workers sharing PORT, each its own replica on the same Redis (docs/scale-out.md)\""
	// LogLevel is LOG_LEVEL, lower-cased, or debug with DEBUG.
	LogLevel  string
	LogFormat string `env:"LOG_FORMAT" envDefault:"text" oneof:"text json" help:"text or json"`
	// TemplateAutoBuild names the built-in templates the daemon builds in
	// the background at start when they are not stored (none: off).
	TemplateAutoBuild BuiltinList `env:"TEMPLATE_AUTO_BUILD" envDefault:"base,code-interpreter,browser,desktop" help:"built-in templates the daemon builds in the background at start when they are not stored yet (from debian:bookworm bootstrapped through the host's apt, as make templates does), comma-separated in build order, from base, code-interpreter, browser (needs npm on the host) and desktop; off = none. A create of one still building is answered 503 template_building with Retry-After (docs/templates.md). Only the native backend builds; off with a test's fake backend"`

	// Resources are a sandbox's defaults (DEFAULT_*), MaxResources the
	// largest a caller may ask for (MAX_*).
	Resources    sandbox.Resources
	MaxResources sandbox.Resources
	// Deployment is CONTAINER_DEPLOYMENT: "native", "docker" (sandbox
	// types run Docker images by default) or "k8s".
	Deployment string
	// DockerEnabled runs the Docker backend beside native (docker:IMAGE
	// templates: DOCKER_BACKEND, or CONTAINER_DEPLOYMENT=docker).
	DockerEnabled bool

	ManagerSettings
	NativeSettings
	NetworkSettings
	APISettings
	DataPlaneSettings
	AgentscopeSettings
	MCPSettings
	TemplateSettings
	ClusterSettings
	EventsSettings
	WebhookSettings
	HistorySettings
	AuditSettings
	VolumeSettings
	SecretsSettings
	TracingSettings
	DockerSettings
	ProviderSettings
	// Kube configures the Kubernetes backend (KUBE_BACKEND,
	// CONTAINER_DEPLOYMENT=k8s, K8S_*).
	Kube KubeConfig
	// KubeNode configures `agentbox node` (KUBE_NODE_*).
	KubeNode KubeNode
	// Redis is the shared state store (REDIS_*).
	Redis RedisConfig

	// Settings that were given but have no effect on this deployment, for a
	// warning at start.
	Ignored []string
}

// inputs are the settings that resolve into other fields of Config.
type inputs struct {
	BearerToken   string     `env:"BEARER_TOKEN" envDefault:"" help:"API key accepted as 'Authorization: Bearer <token>' (user \"default\")"`
	APIKeys       KeyPairs   `env:"API_KEYS" envDefault:"" help:"more API keys, comma-separated key:user pairs; each user sees only their own sandboxes"`
	Deployment    Deployment `env:"CONTAINER_DEPLOYMENT" envDefault:"native" help:"sandbox backend of the sandbox types: native, docker (types run agentscope's images, RUNTIME_SANDBOX_*, on a Docker engine; implies DOCKER_BACKEND=true) or k8s (the same images as agent-sandbox Sandboxes on a Kubernetes cluster; implies KUBE_BACKEND=true)"`
	DockerBackend bool       `env:"DOCKER_BACKEND" envDefault:"false" help:"run the Docker backend beside native: templates named docker:IMAGE run as Docker containers (see docs/docker.md)"`
	KubeBackend   bool       `env:"KUBE_BACKEND" envDefault:"false" help:"run the Kubernetes backend beside native: templates named kube:IMAGE run as agent-sandbox Sandboxes in K8S_NAMESPACE (see docs/kubernetes.md)"`
	Debug         bool       `env:"DEBUG" envDefault:"false" help:"debug logging"`
	LogLevel      LogLevel   `env:"LOG_LEVEL" envDefault:"info" help:"debug, info, warn or error"`
	manager.ResourceSettings
}

// Settings lists the known setting names with their defaults and help, for
// documentation and --help.
func Settings() [][3]string {
	var c Config
	var in inputs
	fields := settings.Fields(&c, &in)
	out := make([][3]string, 0, len(fields))
	host := hostDefaults()
	for _, f := range fields {
		def := f.Default
		if d, ok := host[f.Name]; ok {
			def = d
		}
		out = append(out, [3]string{f.Name, def, f.Help})
	}
	return out
}

// hostDefaults are the defaults that depend on who runs the daemon.
func hostDefaults() map[string]string {
	return map[string]string{"AGENTBOX_DATA_DIR": DefaultDataDir()}
}

// Load resolves the configuration: defaults, then the .env file at path (if
// not empty), then environment variables, then overrides (flag values by
// setting name).
func Load(envFile string, environ []string, overrides map[string]string) (*Config, error) {
	c := &Config{}
	var in inputs
	loaded, err := settings.Load(settings.Source{EnvFile: envFile, Environ: environ, Overrides: overrides,
		Defaults: hostDefaults(), Ignored: agentscope.IgnoredSettings}, c, &in)
	if err != nil {
		return nil, err
	}
	c.resolve(&in, loaded.Given)
	c.Ignored = loaded.Ignored
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// resolve sets the fields several settings decide together.
func (c *Config) resolve(in *inputs, given map[string]bool) {
	c.APIKeys = map[string]string{}
	if in.BearerToken != "" {
		c.APIKeys[in.BearerToken] = "default"
	}
	for k, u := range in.APIKeys {
		c.APIKeys[k] = u
	}
	c.Deployment = string(in.Deployment)
	c.DockerEnabled = in.Deployment == "docker" || in.DockerBackend
	c.Kube.Enabled = in.Deployment == "k8s" || in.KubeBackend
	c.LogLevel = string(in.LogLevel)
	if in.Debug {
		c.LogLevel = "debug"
	}
	c.Resources, c.MaxResources = in.Defaults(), in.Max()
	if c.Templates == nil {
		c.Templates = map[string]string{}
	}
	// The per-user default follows a smaller server-wide limit.
	if !given["MAX_SANDBOXES_PER_USER"] && c.MaxInstances > 0 && c.MaxPerUser > c.MaxInstances {
		c.MaxPerUser = c.MaxInstances
	}
}

func (c *Config) validate() error {
	for _, t := range c.DefaultTypes {
		if t == "" || len(t) > 64 || strings.Trim(strings.ToLower(t), "abcdefghijklmnopqrstuvwxyz0123456789_.-") != "" {
			return fmt.Errorf("setting DEFAULT_SANDBOX_TYPE: type %q: want a name such as base or browser", t)
		}
	}
	if err := c.ProviderSettings.validate(); err != nil {
		return err
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

// Loopback reports whether Host is a loopback address.
func (c *Config) Loopback() bool {
	if c.Host == "localhost" {
		return true
	}
	ip := net.ParseIP(string(c.Host))
	return ip != nil && ip.IsLoopback()
}

// Addr is the host:port to listen on.
func (c *Config) Addr() string { return net.JoinHostPort(string(c.Host), strconv.Itoa(c.Port)) }

// ParseBool reads a boolean in pydantic's spellings (settings.ParseBool).
func ParseBool(v string) (bool, error) { return settings.ParseBool(v) }

// ParseSize parses a byte size such as 512M or 1G (settings.ParseSize).
func ParseSize(v string) (int64, error) { return settings.ParseSize(v) }

// ParseDotenv reads a .env file (settings.ParseDotenv).
func ParseDotenv(path string) (map[string]string, error) { return settings.ParseDotenv(path) }

// Host is HOST: an IP address or localhost ("" is every interface).
type Host string

// UnmarshalText checks the address.
func (h *Host) UnmarshalText(b []byte) error {
	if v := string(b); v != "" && net.ParseIP(v) == nil && v != "localhost" {
		return fmt.Errorf("not an IP address")
	}
	*h = Host(b)
	return nil
}

// KeyPairs is API_KEYS: comma-separated key:user pairs.
type KeyPairs map[string]string

// UnmarshalText reads the pairs.
func (p *KeyPairs) UnmarshalText(b []byte) error {
	m := KeyPairs{}
	for _, pair := range settings.SplitList(string(b)) {
		key, user, ok := strings.Cut(pair, ":")
		if !ok || key == "" || user == "" {
			return fmt.Errorf("want key:user pairs, got %q", pair)
		}
		m[key] = user
	}
	*p = m
	return nil
}

// Deployment is CONTAINER_DEPLOYMENT: native, docker or k8s (also
// kubernetes, kube).
type Deployment string

// UnmarshalText reads the backend's name.
func (d *Deployment) UnmarshalText(b []byte) error {
	switch v := string(b); v {
	case "native", "":
		*d = "native"
	case "docker":
		*d = "docker"
	case "k8s", "kubernetes", "kube":
		*d = "k8s"
	case "agentrun", "fc", "gvisor", "cloud":
		return fmt.Errorf("backend %q is not available in this build; use native, docker or k8s", v)
	default:
		return fmt.Errorf("unknown backend %q", v)
	}
	return nil
}

// LogLevel is LOG_LEVEL: debug, info, warn or error, in any case.
type LogLevel string

// UnmarshalText reads the level, lower-cased.
func (l *LogLevel) UnmarshalText(b []byte) error {
	switch v := strings.ToLower(string(b)); v {
	case "debug", "info", "warn", "error":
		*l = LogLevel(v)
		return nil
	}
	return fmt.Errorf("want debug, info, warn or error")
}

// BuiltinList is TEMPLATE_AUTO_BUILD: built-in templates, comma-separated
// in build order, each once; off (false, "") is none.
type BuiltinList []string

// UnmarshalText reads and checks the names.
func (l *BuiltinList) UnmarshalText(b []byte) error {
	*l = nil
	if v := string(b); v == "off" || v == "" || v == "false" {
		return nil
	}
	for _, n := range settings.SplitList(string(b)) {
		if !slices.Contains(BuiltinTemplates, n) {
			return fmt.Errorf("unknown built-in template %q (want some of %s, or off)", n, strings.Join(BuiltinTemplates, ", "))
		}
		if !slices.Contains(*l, n) {
			*l = append(*l, n)
		}
	}
	return nil
}
