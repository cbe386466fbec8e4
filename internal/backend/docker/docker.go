// Package docker is the Docker backend: every sandbox is a container of a
// Docker engine, created through the Engine API. Its PID 1 is agentbox's
// static agent, bind-mounted read-only from the host, serving on a unix
// socket in a per-sandbox directory bind-mounted from the backend's state
// directory: the daemon reaches the agent through that socket, so no port
// is published and the engine's socket never enters the sandbox.
//
// The container is locked down like a native sandbox: read-only root,
// every capability dropped, no-new-privileges, agentbox's seccomp profile,
// memory/CPU/pids limits, no network, a size-capped tmpfs /tmp, the sandbox
// user (uid 1000). Differences from native are in docs/docker.md.
package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/seccompprofile"
)

// Labels on every container the backend creates. LabelInstance tells the
// backends of different data dirs (daemons) on one engine apart, so one
// daemon's orphan cleanup never touches another's containers.
const (
	LabelSandbox  = "io.agentbox.sandbox"
	LabelInstance = "io.agentbox.instance"
	LabelBackend  = "io.agentbox.backend"
)

// DefaultResources fill zero resource fields (the same as native's).
var DefaultResources = sandbox.Resources{
	MemoryBytes: 512 << 20,
	CPUs:        1,
	PIDs:        256,
	DiskBytes:   1 << 30,
	TmpBytes:    256 << 20,
}

// Paths inside the container.
const (
	agentInSandbox     = "/opt/agentbox/agentbox-agent"
	shimInSandbox      = "/opt/agentbox/agentbox-shim"
	runInSandbox       = "/run/agentbox"
	workspaceInSandbox = "/workspace"
	sandboxHome        = "/home/user"
	sandboxUID         = 1000
	socketName         = "agent.sock"
	maxSocketPath      = 107
)

// rootCapabilities are a root sandbox's capabilities (as native's).
var rootCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_AUDIT_WRITE", "CAP_SETFCAP",
}

// Config configures the Docker backend.
type Config struct {
	// Root holds the backend's state: per sandbox a record, the agent's
	// socket directory, the workspace and home. Keep it short (unix socket
	// paths are limited to 107 bytes). The engine must run on this host:
	// it bind-mounts these directories and the agent binary.
	Root string
	// AgentPath is the host path of the static agentbox-agent binary.
	AgentPath string
	// Host is the engine's address ("unix:///var/run/docker.sock"); empty
	// takes DOCKER_HOST or the default socket.
	Host string
	// Defaults fill zero fields of a spec's Resources.
	Defaults sandbox.Resources
	// Pull lets Create pull an image the engine lacks.
	Pull bool
	// Load, when set, writes a docker-loadable tarball of the agentbox
	// template named image (the template store's docker export), so an
	// image the engine lacks is loaded from the store before it is
	// pulled. It returns a sandbox.ClassNotFound error when the store has
	// no such template.
	Load func(ctx context.Context, image string, w io.Writer) error
	// ReadyTimeout bounds how long Create and Start wait for the agent.
	// Default 30s.
	ReadyTimeout time.Duration
	// GVisorRuntime is the engine runtime (registered with dockerd) whose
	// binary is gVisor's runsc: sandboxes at isolation gvisor run on it.
	// Empty: isolation gvisor is refused.
	GVisorRuntime string
	Logger        *slog.Logger
}

// Backend is the Docker backend. Create it with New.
type Backend struct {
	cfg      Config
	log      *slog.Logger
	api      *client.Client
	instance string // LabelInstance value: a hash of Root
	sbRoot   string
	// idShift is the engine's user namespace remapping (userns-remap):
	// container uid 0 is host uid idShift. 0 without remapping.
	idShift  int
	userns   bool
	seccompU string // "seccomp=<json>" for user sandboxes
	seccompR string // and for root ones
	// shimPath is agentbox-shim next to the agent, the agent's exec shim
	// ("": the agent uses its own binary).
	shimPath string

	// loadMu serialises loads of store templates into the engine.
	loadMu sync.Mutex

	abandoned atomic.Bool
	onExit    atomic.Pointer[func(sandbox.ID, string)]

	mu    sync.Mutex
	boxes map[sandbox.ID]*box
}

// box is the backend's view of one sandbox; mu serialises its lifecycle.
type box struct {
	mu  sync.Mutex
	id  sandbox.ID
	dir string
	rec record
	// stopWatch ends the goroutine waiting for the container to exit.
	stopWatch context.CancelFunc
	// stopping is set while the backend stops the container on purpose.
	stopping bool
	// pid and cgroups are the running agent's host pid and cgroup
	// directories, read once per boot: exec reads the limit counters
	// before and after every command, without asking the engine.
	pid     int
	cgroups map[string]string
}

// record is what the backend keeps of a sandbox on disk (0600, root's),
// enough to reattach after a daemon restart. The spec stays off the
// container's labels: its environment and token are secrets, and labels
// are readable by anyone who may list the engine's containers.
type record struct {
	Spec        sandbox.Spec `json:"spec"`
	AccessToken string       `json:"access_token,omitempty"`
	CreatedAt   time.Time    `json:"created_at"`
	Stopped     bool         `json:"stopped"`
	Reason      string       `json:"reason,omitempty"`
	Container   string       `json:"container"`
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Pauser       = (*Backend)(nil)
	_ backend.StatsReader  = (*Backend)(nil)
	_ backend.LimitCounter = (*Backend)(nil)
	_ backend.PortDialer   = (*Backend)(nil)
	_ backend.ExitWatcher  = (*Backend)(nil)
	_ backend.Closer       = (*Backend)(nil)
)

// New connects to the engine and prepares the state directory.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Root == "" {
		return nil, errors.New("docker: Config.Root is required")
	}
	if cfg.AgentPath == "" {
		return nil, errors.New("docker: Config.AgentPath is required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	cfg.Root = root
	agent, err := filepath.Abs(cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(agent); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("docker: agent binary %q not found (build it with make build)", agent)
	}
	cfg.AgentPath = agent
	cfg.Defaults = cfg.Defaults.WithDefaults(DefaultResources)
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	sbRoot := filepath.Join(root, "sb")
	if len(filepath.Join(sbRoot, string(sandbox.NewID()), "run", socketName)) > maxSocketPath {
		return nil, fmt.Errorf("docker: state directory %q is too long for unix socket paths; use a shorter data dir", root)
	}
	opts := []client.Opt{client.FromEnv}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	api, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: engine client: %w", err)
	}
	info, err := api.Info(ctx, client.InfoOptions{})
	if err != nil {
		api.Close()
		return nil, fmt.Errorf("docker: no Docker engine answers (is dockerd running? DOCKER_HOST): %w", err)
	}
	sum := sha256.Sum256([]byte(root))
	b := &Backend{
		cfg:      cfg,
		log:      cfg.Logger.With("backend", "docker"),
		api:      api,
		instance: hex.EncodeToString(sum[:6]),
		sbRoot:   sbRoot,
		boxes:    map[sandbox.ID]*box{},
	}
	if b.shimPath, err = backend.ShimBinary(cfg.AgentPath); err != nil {
		b.log.Warn("commands in sandboxes start below the agent's own binary (a slower first command, more memory per sandbox)", "reason", err)
	}
	if rt := cfg.GVisorRuntime; rt != "" {
		if _, ok := info.Info.Runtimes[rt]; !ok {
			api.Close()
			return nil, fmt.Errorf("docker: the engine has no runtime %q (DOCKER_GVISOR_RUNTIME; register runsc with dockerd, see docs/gvisor.md)", rt)
		}
	}
	for _, opt := range info.Info.SecurityOptions {
		if strings.Contains(opt, "name=userns") {
			b.userns = true
		}
	}
	if b.userns {
		if b.idShift, err = remapBase(info.Info.DockerRootDir); err != nil {
			api.Close()
			return nil, fmt.Errorf("docker: %w", err)
		}
	}
	// Root (0711: traverse only) must be searchable by the container's
	// uids for the engine to bind-mount what lies below.
	for _, d := range []string{root, sbRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			api.Close()
			return nil, fmt.Errorf("docker: create %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			api.Close()
			return nil, err
		}
	}
	for _, s := range []struct {
		caps []string
		dst  *string
	}{{nil, &b.seccompU}, {rootCapabilities, &b.seccompR}} {
		data, err := seccompprofile.Docker(s.caps)
		if err != nil {
			api.Close()
			return nil, fmt.Errorf("docker: %w", err)
		}
		*s.dst = "seccomp=" + string(data)
	}
	return b, nil
}

// remapBase finds the first host uid of the engine's userns-remap range.
// The engine keeps remapped containers under <root>/<uid>.<gid>, e.g.
// /var/lib/docker/100000.100000, and names that directory in DockerRootDir.
func remapBase(dockerRoot string) (int, error) {
	base := filepath.Base(dockerRoot)
	uid, _, ok := strings.Cut(base, ".")
	var n int
	if _, err := fmt.Sscanf(uid, "%d", &n); !ok || err != nil || n <= 0 {
		return 0, fmt.Errorf("the engine remaps user namespaces but its root dir %q does not tell the range", dockerRoot)
	}
	return n, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "docker" }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	c := backend.Capabilities{
		Pause:          true,
		ResourceLimits: true,
		RootInUserNS:   b.userns,
		Templates:      []string{sandbox.TemplateDocker},
	}
	if b.cfg.GVisorRuntime != "" {
		c.Isolation = []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor}
		c.GVisor = gvisorLimits()
	}
	return c
}

// gvisorLimits is what a Docker sandbox on runsc lacks: pause (the
// engine's pause would go to runsc's, which is untested here), root
// (root of gVisor's kernel would write host files as the host's root) and
// previews (its ports are in gVisor's network stack).
func gvisorLimits() *backend.GVisorLimits {
	return &backend.GVisorLimits{NoPause: true, NoRoot: true, NoRootOnRequest: true, NoPorts: true, Templates: []string{sandbox.TemplateDocker}}
}

// UsernsRemap reports whether the engine runs containers in a user
// namespace (userns-remap).
func (b *Backend) UsernsRemap() bool { return b.userns }

// Instance is the LabelInstance value of this backend's containers.
func (b *Backend) Instance() string { return b.instance }

// Client is the engine client (tests use it to check what was created).
func (b *Backend) Client() *client.Client { return b.api }

// Abandon makes the backend forget its sandboxes without touching them, as
// if its process had died (tests exercise Recover with it).
func (b *Backend) Abandon() {
	b.abandoned.Store(true)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bx := range b.boxes {
		if bx.stopWatch != nil {
			bx.stopWatch()
		}
	}
}

// Close releases the engine connection. Containers keep running so a
// restarted daemon reattaches to them.
func (b *Backend) Close() error {
	b.Abandon()
	return b.api.Close()
}

// OnAgentExit implements backend.ExitWatcher.
func (b *Backend) OnAgentExit(fn func(id sandbox.ID, reason string)) { b.onExit.Store(&fn) }

func (b *Backend) lookup(id sandbox.ID) (*box, error) {
	if err := id.Validate(); err != nil {
		return nil, sandbox.Errorf(sandbox.ClassNotFound, "sandbox %s not found", id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	bx, ok := b.boxes[id]
	if !ok {
		return nil, sandbox.Errorf(sandbox.ClassNotFound, "sandbox %s not found", id)
	}
	return bx, nil
}

// containerName is the engine's name of a sandbox's container: unique per
// backend instance, so a duplicate create is refused by the engine too.
func (b *Backend) containerName(id sandbox.ID) string {
	return "agentbox-" + b.instance + "-" + string(id)
}

func (b *Backend) socketPath(bx *box) string {
	return filepath.Join(bx.dir, "run", socketName)
}
