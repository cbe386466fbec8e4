// Package sandbox holds the domain types shared by every layer of agentbox:
// sandbox identifiers, the specification a sandbox is created from, its
// observable state, and the small set of error classes the API maps to HTTP.
package sandbox

import (
	"crypto/rand"
	"fmt"
	"time"
)

// ID identifies a sandbox. It is safe to use as a file name, a cgroup name
// and a DNS label.
type ID string

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// idLen gives ~103 bits of randomness: unguessable, short enough for a host name.
const idLen = 20

// NewID returns a fresh random sandbox ID.
func NewID() ID {
	b := make([]byte, idLen)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("sandbox: reading random bytes: %v", err))
	}
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return ID(b)
}

// Validate reports whether id is well formed. IDs come from URLs, so every
// layer that turns an ID into a path checks it first.
func (id ID) Validate() error {
	// ^[a-z0-9][a-z0-9-]{0,62}$, by hand: every binary that starts a
	// sandbox pays package init costs again in the container's init, and a
	// compiled regexp is most of this package's.
	ok := len(id) > 0 && len(id) <= 63 && id[0] != '-'
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return Errorf(ClassInvalid, "invalid sandbox id %q", string(id))
	}
	return nil
}

func (id ID) String() string { return string(id) }

// State is the lifecycle state of a sandbox as a backend sees it.
type State string

const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopped  State = "stopped" // processes gone, filesystem kept; Start boots it again
	StateError    State = "error"
	// StateLost is a sandbox whose daemon stopped answering (its lease in
	// the node registry expired): shown, not usable, deletable.
	StateLost State = "lost"
)

// Resources are the hard limits of a sandbox. Zero means "use the backend default".
type Resources struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`       // CPU quota in cores, e.g. 0.5
	PIDs        int64   `json:"pids,omitempty"`       // max tasks (processes + threads)
	DiskBytes   int64   `json:"disk_bytes,omitempty"` // /workspace + home + writable root
	TmpBytes    int64   `json:"tmp_bytes,omitempty"`  // tmpfs /tmp
}

// WithDefaults returns r with every zero field taken from d.
func (r Resources) WithDefaults(d Resources) Resources {
	if r.MemoryBytes == 0 {
		r.MemoryBytes = d.MemoryBytes
	}
	if r.CPUs == 0 {
		r.CPUs = d.CPUs
	}
	if r.PIDs == 0 {
		r.PIDs = d.PIDs
	}
	if r.DiskBytes == 0 {
		r.DiskBytes = d.DiskBytes
	}
	if r.TmpBytes == 0 {
		r.TmpBytes = d.TmpBytes
	}
	return r
}

// Mount is an extra host directory exposed inside the sandbox.
type Mount struct {
	Source   string `json:"source"` // host path
	Target   string `json:"target"` // path inside the sandbox
	ReadOnly bool   `json:"read_only"`
	// IDMapped says Source's files carry the sandbox's own ids (a volume:
	// uid 1000 is the sandbox user in every sandbox that mounts it), so a
	// backend that gives the sandbox a user namespace maps them through it.
	IDMapped bool `json:"idmapped,omitempty"`
}

// VolumeMount asks for a volume in a sandbox: the caller's volume Name
// at Path, read-only or not, its whole tree or only SubPath (a directory
// of the volume, created when missing).
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	SubPath  string `json:"subpath,omitempty"`
}

// Spec is everything a backend needs to create a sandbox.
type Spec struct {
	ID ID `json:"id"`
	// Template is the resolved template the root filesystem is made of.
	Template Template `json:"template"`

	Resources Resources `json:"resources"`

	// Env is the default environment of every process in the sandbox.
	Env map[string]string `json:"env,omitempty"`

	// Root runs the sandbox's processes as uid 0 — always inside a user
	// namespace, so root in the sandbox is an unprivileged user on the host.
	Root bool `json:"root,omitempty"`

	// WritableRoot gives the root filesystem a per-sandbox writable layer
	// (counted against DiskBytes). The default is a read-only root.
	WritableRoot bool `json:"writable_root,omitempty"`

	// WorkspaceDir, when set, is a host directory used as /workspace instead
	// of the sandbox's own capped disk (agentscope's mount_dir). It survives
	// the sandbox.
	WorkspaceDir string `json:"workspace_dir,omitempty"`

	// Mounts are extra host directories (agentscope's READONLY_MOUNTS).
	Mounts []Mount `json:"mounts,omitempty"`

	// Service is what the agent runs and supervises after boot (see
	// ServiceOf); nil runs nothing.
	Service *Service `json:"service,omitempty"`

	// AccessToken, when set, is required by the in-sandbox agent on every request.
	AccessToken string `json:"-"`

	// AgentListen, when set, is a second address the agent serves on
	// inside the sandbox, tcp://0.0.0.0:PORT: the pod IP of a sandbox on an
	// agentbox Kubernetes node (internal/kubenode). It needs AccessToken and
	// network mode egress (an address of the sandbox's own).
	AgentListen string `json:"agent_listen,omitempty"`

	// Hostname, when set, is the sandbox's host name (a DNS label) instead
	// of its ID: a pod's spec.hostname on an agentbox Kubernetes node.
	Hostname string `json:"hostname,omitempty"`

	// Network is the sandbox's network policy. The zero value means no network
	// besides loopback.
	Network Network `json:"network"`

	// Isolation is the sandbox's isolation level ("": container). A
	// backend that cannot provide it refuses the create (ClassInvalid).
	Isolation Isolation `json:"isolation,omitempty"`

	// Labels are opaque to backends; they are stored with the sandbox so a
	// restarted daemon can tell what a recovered sandbox was for.
	Labels map[string]string `json:"labels,omitempty"`
}

// NetworkMode selects how a sandbox reaches the network.
type NetworkMode string

const (
	NetworkNone   NetworkMode = "none"   // loopback only
	NetworkEgress NetworkMode = "egress" // outbound through the host, filtered by policy
)

// Network is a sandbox's network configuration and egress policy.
type Network struct {
	Mode     NetworkMode `json:"mode,omitempty"`
	AllowOut []string    `json:"allow_out,omitempty"` // CIDRs or domain names
	DenyOut  []string    `json:"deny_out,omitempty"`
	// Rules send HTTP and HTTPS to their hosts through the egress broker,
	// which changes the requests as they say (internal/broker). They open
	// nothing the allow and deny lists close.
	Rules []EgressRule `json:"rules,omitempty"`
}

// EgressRule is one host's request transformation in the egress broker.
// Secret references in header values are written ${secret:NAME}; the
// sandbox never sees the values.
type EgressRule struct {
	// Host is an exact name ("api.example.com") or a wildcard
	// ("*.example.com": names strictly below it).
	Host string `json:"host"`
	// Methods and Paths (path prefixes, each starting with "/") limit the
	// requests whose headers are changed; empty: all.
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	// Headers are set on matching requests, replacing any the sandbox
	// sent under the same name.
	Headers map[string]string `json:"headers,omitempty"`
	// Secrets are the names whose placeholders the broker replaces by
	// their values in requests to Host (header values and the URL); a
	// placeholder sent anywhere else stays as it is.
	Secrets []string `json:"secrets,omitempty"`
}

// Endpoint tells how to reach a sandbox's agent.
type Endpoint struct {
	Network string `json:"network"` // "unix", "tcp" or "http" (a provider's envd)
	Address string `json:"address"` // socket path, host:port or base URL
	// Pid, when set, is the host pid that listens on a unix socket: a
	// client connects only to a socket that process listens on (the Docker
	// backend's sandboxes can replace their agent's socket).
	Pid int `json:"pid,omitempty"`
	// Header is sent with every request of an "http" endpoint (the
	// provider's routing headers); CodeAddress and CodeHeader, when set,
	// are where its code interpreter answers instead.
	Header      map[string]string `json:"header,omitempty"`
	CodeAddress string            `json:"code_address,omitempty"`
	CodeHeader  map[string]string `json:"code_header,omitempty"`
	// Token, when set, is the token the agent wants instead of the
	// sandbox's access token: a provider's envd token, an operator
	// secret that no tenant sees.
	Token string `json:"-"`
}

// Info is what a backend reports about one sandbox.
type Info struct {
	ID        ID        `json:"id"`
	State     State     `json:"state"`
	Spec      Spec      `json:"spec"`
	CreatedAt time.Time `json:"created_at"`
	// Pid is the host pid of the sandbox's init (the agent), 0 when not running.
	Pid   int      `json:"pid,omitempty"`
	Agent Endpoint `json:"agent"`
	// Reason explains StateError or StateStopped, e.g. "agent exited: signal: killed".
	Reason string `json:"reason,omitempty"`
}
