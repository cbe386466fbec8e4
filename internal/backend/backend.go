// Package backend defines the contract between the manager and the things
// that actually isolate sandboxes (native libcontainer, Docker, Kubernetes).
//
// A backend manages lifecycle and isolation only. Everything that happens
// inside a sandbox goes through the in-sandbox agent, reached at Info.Agent,
// so exec, files and code run the same on every backend.
package backend

import (
	"context"
	"io"
	"net"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Backend creates and destroys sandboxes.
//
// All methods are safe for concurrent use. Methods that take an ID return an
// error of class sandbox.ClassNotFound for an ID the backend does not know.
type Backend interface {
	// Name is a short stable name ("native", "docker", "kube").
	Name() string

	// Capabilities reports which optional features this backend has.
	Capabilities() Capabilities

	// Create builds and boots a sandbox from spec. It returns once the agent
	// answers at Info.Agent, or fails and leaves nothing behind. spec.ID must be
	// set and unused.
	Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error)

	// Stop kills every process of the sandbox but keeps its filesystem, so
	// Start can boot it again. Stopping a stopped sandbox is not an error.
	Stop(ctx context.Context, id sandbox.ID) error

	// Start boots a stopped sandbox again and waits for its agent. Starting a
	// running sandbox is not an error.
	Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error)

	// Destroy kills the sandbox and removes everything it owns on the host
	// (processes, cgroups, mounts, directories). It is idempotent: destroying
	// an unknown ID succeeds, so callers can retry after a crash.
	Destroy(ctx context.Context, id sandbox.ID) error

	// Inspect returns the current state of one sandbox.
	Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error)

	// Recover is called once at daemon start. It finds the sandboxes a previous
	// process of this backend left behind, reattaches to the healthy ones and
	// returns them, and cleans up the remains of broken ones (half-created,
	// dead agent) so nothing leaks.
	Recover(ctx context.Context) ([]sandbox.Info, error)
}

// Capabilities tells the API and the manager what a backend can do.
//
// Pause, Snapshot and Recycle are claims the conformance suite holds a
// backend to (backendtest): a backend claiming one implements the matching
// optional interface (Pauser, Snapshotter, Recycler) and passes its
// checks; one that does not claim it may still implement the interface
// (a dispatcher such as multi, or a mode that lacks the feature), but then
// refuses the call with sandbox.ClassUnavailable.
type Capabilities struct {
	Pause bool `json:"pause"`
	// Snapshot: SnapshotDiff writes the layer of a sandbox's root
	// filesystem changes (for template kinds that have one).
	Snapshot bool `json:"snapshot"`
	// Recycle: Recycle resets a used sandbox in place for a warm pool.
	Recycle   bool `json:"recycle"`
	DiskLimit bool `json:"disk_limit"`
	// ResourceLimits: memory, CPU and process limits are enforced.
	ResourceLimits bool `json:"resource_limits"`
	// Egress: sandboxes can have egress networking (network mode
	// "egress", its allow and deny lists); without it only "none" is
	// accepted for them.
	Egress bool `json:"egress"`
	// RootInUserNS: root sandboxes (Spec.Root) can be created, as root of
	// a user namespace (an unprivileged host id).
	RootInUserNS bool `json:"root_in_userns"`
	// RootOnRequest: in every sandbox, not only root ones, a process or
	// file operation may act as root (user "root"), as root of the
	// sandbox's own user namespace with a small capability set; everything
	// that names no user stays the unprivileged sandbox user. Backends
	// without a user namespace per sandbox refuse such requests, saying
	// why.
	RootOnRequest bool `json:"root_on_request"`
	// Rootless: the daemon runs without root (see the backend's docs).
	Rootless     bool     `json:"rootless,omitempty"`
	Templates    []string `json:"templates"` // template kinds: "host", "dir"
	CgroupDriver string   `json:"cgroup_driver,omitempty"`
	// LimitsStopSandbox: memory or tasks past the limit stop the whole
	// sandbox (its agent included), not only the process the OOM killer
	// picks or the fork refused; the host is kept as safe.
	// The conformance suite's tests of a sandbox's own ambiance set it
	// from GVisor (backendtest.AtIsolation).
	LimitsStopSandbox bool `json:"limits_stop_sandbox,omitempty"`
	// Isolation lists the isolation levels the backend can create
	// sandboxes at (nil: container only; see Isolations).
	Isolation []sandbox.Isolation `json:"isolation,omitempty"`
	// GVisor is what a sandbox at isolation gvisor cannot have that the
	// fields above promise (nil: no gVisor level). A backend refuses such
	// a request for a gVisor sandbox with sandbox.ClassUnavailable.
	GVisor *GVisorLimits `json:"gvisor,omitempty"`
	// Provider, when set, names the remote provider the sandboxes run at
	// ("e2b"): they take none of this host's room (NODE_MAX_SANDBOXES,
	// memory), and their records say where they are.
	Provider string `json:"provider,omitempty"`
}

// GVisorLimits are the features that do not hold for gVisor sandboxes.
type GVisorLimits struct {
	// NoPause: Pause is refused.
	NoPause bool `json:"no_pause,omitempty"`
	// NoSnapshot: SnapshotDiff is refused.
	NoSnapshot bool `json:"no_snapshot,omitempty"`
	// NoRecycle: Recycle is refused (a pooled gVisor sandbox is destroyed
	// after one use).
	NoRecycle bool `json:"no_recycle,omitempty"`
	// NoRootOnRequest: a request to act as root in a sandbox that is not
	// a root sandbox is refused.
	NoRootOnRequest bool `json:"no_root_on_request,omitempty"`
	// NoRoot: root sandboxes (Spec.Root) are refused.
	NoRoot bool `json:"no_root,omitempty"`
	// NoPorts: DialPort (previews) is refused.
	NoPorts bool `json:"no_ports,omitempty"`
	// LimitsStopSandbox: a sandbox past its memory or pids limit is
	// stopped as a whole, rather than losing only the process that
	// allocated or failing the fork: the host's cgroup limits hold gVisor's
	// kernel, which holds all of the sandbox's memory and runs its tasks
	// on host threads of its own (see Capabilities.LimitsStopSandbox).
	LimitsStopSandbox bool `json:"limits_stop_sandbox,omitempty"`
	// Templates are the template kinds a gVisor sandbox may use.
	Templates []string `json:"templates,omitempty"`
}

// Isolations returns the isolation levels c says a backend provides.
func Isolations(c Capabilities) []sandbox.Isolation {
	if len(c.Isolation) == 0 {
		return []sandbox.Isolation{sandbox.IsolationContainer}
	}
	return c.Isolation
}

// CheckIsolation refuses a spec whose isolation level c does not list.
func CheckIsolation(c Capabilities, spec sandbox.Spec) error {
	level := spec.Isolation.Or(sandbox.IsolationContainer)
	for _, l := range Isolations(c) {
		if l == level {
			return nil
		}
	}
	return sandbox.Errorf(sandbox.ClassInvalid, "isolation %q is not available on this backend", level)
}

// KindCapabilities is implemented by backends whose capabilities depend
// on the template kind of a sandbox (multi: each kind runs on its own
// backend).
type KindCapabilities interface {
	// CapabilitiesFor returns what the backend can do with sandboxes of
	// template kind kind.
	CapabilitiesFor(kind string) Capabilities
}

// CapabilitiesFor returns b's capabilities for sandboxes of template kind
// kind: b's KindCapabilities when it has them, else b's Capabilities.
func CapabilitiesFor(b Backend, kind string) Capabilities {
	if k, ok := b.(KindCapabilities); ok {
		return k.CapabilitiesFor(kind)
	}
	return b.Capabilities()
}

// RecycleRequest is what a recycled sandbox starts again with.
type RecycleRequest struct {
	// AccessToken replaces the agent's token: the previous user's stops
	// working. Required.
	AccessToken string
	// Network is the egress policy to start with (the pool's default); its
	// mode must be the sandbox's.
	Network sandbox.Network
}

// Recycler is implemented by backends that can reset a used sandbox in
// place to the state of a fresh one of the same spec, so a warm pool can
// hand it out again: every process killed, the agent restarted with a new
// access token and none of its state (env, code contexts, PTYs), the
// writable layer, home, workspace and /tmp back to the template's content,
// limits and egress policy as at create. A sandbox whose reset failed may
// be stopped; the caller destroys it.
type Recycler interface {
	Recycle(ctx context.Context, id sandbox.ID, req RecycleRequest) error
}

// Pauser is implemented by backends that can freeze a sandbox in place.
// Pausing a paused sandbox and resuming a running one are not errors; a
// stopped one is sandbox.ClassConflict.
type Pauser interface {
	Pause(ctx context.Context, id sandbox.ID) error
	Resume(ctx context.Context, id sandbox.ID) error
}

// Stats are resource usage counters of one sandbox since it started.
type Stats struct {
	MemoryBytes    int64   `json:"memory_bytes"`     // current usage
	MemoryMaxBytes int64   `json:"memory_max_bytes"` // peak usage
	MemoryLimit    int64   `json:"memory_limit"`
	CPUSeconds     float64 `json:"cpu_seconds"`
	Pids           int64   `json:"pids"`
	PidsLimit      int64   `json:"pids_limit"`
	OOMKills       int64   `json:"oom_kills"`       // processes killed by the OOM killer
	PidsLimitHits  int64   `json:"pids_limit_hits"` // forks refused by the pids limit
	DiskUsedBytes  int64   `json:"disk_used_bytes"`
	DiskTotalBytes int64   `json:"disk_total_bytes"`
	// NetworkDenials counts packets the egress policy rejected.
	NetworkDenials uint64 `json:"network_denials"`
	// NetworkTxBytes and NetworkRxBytes count the bytes the sandbox sent
	// and received (native backend with networking; 0 elsewhere).
	NetworkTxBytes uint64 `json:"network_tx_bytes"`
	NetworkRxBytes uint64 `json:"network_rx_bytes"`
}

// StatsReader is implemented by backends that can report resource usage.
// The manager uses OOMKills and PidsLimitHits to tell a caller that its
// command died from a limit rather than from a bug.
type StatsReader interface {
	Stats(ctx context.Context, id sandbox.ID) (Stats, error)
}

// Closer is implemented by backends that hold host resources beyond their
// sandboxes. Close must keep whatever running sandboxes need, so a daemon
// that stops without destroying them can reattach later.
type Closer interface {
	Close() error
}

// LimitCounter is implemented by backends that can cheaply read the two
// counters telling that a sandbox limit acted: processes killed by the OOM
// killer and forks refused by the pids limit. Exec reads them before and
// after every command.
type LimitCounter interface {
	LimitCounters(ctx context.Context, id sandbox.ID) (oomKills, pidsLimitHits int64, err error)
}

// PortDialer is implemented by backends that can connect to a TCP port a
// process listens on inside a sandbox (preview URLs), in any network mode
// and without publishing the port on the host.
type PortDialer interface {
	DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error)
}

// ExitWatcher is implemented by backends that notice when a sandbox's
// agent dies on its own (killed by the OOM killer, crashed): the sandbox
// is then stopped, and fn is called with its id and why. fn is called on a
// goroutine of its own, never while the backend holds a lock, so it may
// call the backend. Register once, before the first Create or Recover.
type ExitWatcher interface {
	OnAgentExit(fn func(id sandbox.ID, reason string))
}

// AgentExit is how a sandbox's agent ended on its own.
type AgentExit struct {
	Code      int    // exit code, 128+signal when a signal killed it (-1: unknown)
	Signal    string // the signal that killed it, if one did
	OOMKilled bool   // the sandbox's OOM killer acted before it died
}

// ExitReporter is implemented by ExitWatcher backends that can tell how
// the agent of a sandbox they reported ended (ok false: not known).
type ExitReporter interface {
	LastExit(ctx context.Context, id sandbox.ID) (exit AgentExit, ok bool)
}

// NetworkUpdater is implemented by backends that can change a running
// sandbox's egress policy. Changing the network mode itself is a conflict.
type NetworkUpdater interface {
	UpdateNetwork(ctx context.Context, id sandbox.ID, n sandbox.Network) error
}

// Snapshotter is implemented by backends that can turn what a sandbox
// changed in its root filesystem into a layer (snapshots: the layer on top
// of the sandbox's template becomes a new template).
type Snapshotter interface {
	// SnapshotDiff writes to w the uncompressed OCI layer tar of the
	// sandbox's root filesystem changes over its template, file owners in
	// the image's ids. The sandbox is frozen while its files are read when
	// the backend can. A template kind that has no such layer (host) is
	// sandbox.ClassInvalid.
	SnapshotDiff(ctx context.Context, id sandbox.ID, w io.Writer) error
}

// Forker is implemented by backends that can start a sandbox from a live
// copy of another's disk (fork).
type Forker interface {
	// Fork creates sandbox spec whose disk is a copy of running sandbox
	// src's, taken with src's filesystem frozen (consistent, as after a
	// crash at that instant: what src's processes had not written is not
	// in it); src keeps running. spec must have src's template and disk
	// size. Processes and memory are not carried: the fork boots fresh.
	Fork(ctx context.Context, src sandbox.ID, spec sandbox.Spec) (sandbox.Info, error)
}

// WarmPooler is implemented by backends that keep warm pools themselves
// (the kube backend: a SandboxWarmPool whose hits are SandboxClaims). The
// manager's pool of a template such a backend pools is the backend's,
// instead of sandboxes the manager creates one by one.
type WarmPooler interface {
	// PoolName returns the name of the backend's pool of template t for
	// this daemon, or false when the backend keeps no pools of t.
	PoolName(t sandbox.Template) (string, bool)
	// EnsurePool creates pool name keeping replicas sandboxes of spec
	// booted, or resizes it; a pool of name made from another spec is made
	// again. spec.ID and spec.AccessToken are ignored.
	EnsurePool(ctx context.Context, name string, spec sandbox.Spec, replicas int32) error
	// PoolReady is the number of booted sandboxes pool name holds.
	PoolReady(ctx context.Context, name string) (int, error)
	// CreateFromPool hands sandbox spec.ID (of template spec.Template) out
	// of pool name with spec.AccessToken, spec.Env and spec.Labels. It
	// returns once the agent answers that token, or fails and leaves
	// nothing of the sandbox behind.
	CreateFromPool(ctx context.Context, name string, spec sandbox.Spec) (sandbox.Info, error)
	// DeletePool deletes pool name and the sandboxes it holds that were
	// not handed out. An unknown name is not an error.
	DeletePool(ctx context.Context, name string) error
	// Pools lists the names of this daemon's pools.
	Pools(ctx context.Context) ([]string, error)
}

// RefuseEgressRules refuses a spec with egress broker rules on a backend
// whose sandboxes' traffic does not pass this host's broker (docker,
// kube, remote providers): rules there would be accepted and inject
// nothing.
func RefuseEgressRules(backendName string, spec sandbox.Spec) error {
	if len(spec.Network.Rules) == 0 {
		return nil
	}
	return sandbox.Errorf(sandbox.ClassInvalid, "network rules (the egress broker) are not available on the %s backend", backendName)
}
