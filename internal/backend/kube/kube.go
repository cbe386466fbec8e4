// Package kube is the Kubernetes backend: every sandbox is an agent-sandbox
// Sandbox (sigs.k8s.io/agent-sandbox, the community's CRDs) in one
// namespace. The agent-sandbox controller turns it into a pod, a headless
// Service and the workspace's PersistentVolumeClaim; the cluster schedules
// the pod, and the backend reaches the pod's agent (agentbox's static
// agent as PID 1, copied in by an init container) on the pod IP with the
// sandbox's access token.
//
// The pod is locked down like a native sandbox: non-root unless root is
// asked for (and then only in a pod user namespace), read-only root
// filesystem, every capability dropped, no privilege escalation, seccomp,
// no service account token, the sandbox's memory and CPU as limits, and
// the egress policy as a NetworkPolicy. Everything the backend creates
// carries its labels and an owner reference to the Sandbox, so nothing is
// orphaned. Differences from native are in docs/kubernetes.md.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Labels and annotations of everything the backend creates.
const (
	// LabelSandbox is the sandbox's id.
	LabelSandbox = "agentbox.dev/sandbox"
	// LabelInstance tells the daemons sharing a namespace apart, so one
	// daemon's Recover never takes another's sandboxes.
	LabelInstance = "agentbox.dev/instance"
	// LabelManagedBy is the standard managed-by label, set to ManagedBy.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "agentbox"
	// LabelRole marks the daemon's own pods: sandbox pods accept
	// connections from pods of that label only (their NetworkPolicy).
	LabelRole  = "agentbox.dev/role"
	RoleDaemon = "daemon"
	RoleSbx    = "sandbox"
)

// AgentPort is the TCP port the agent listens on in every sandbox pod.
const AgentPort = 49983

// TemplatePrefix starts the names of templates the kube backend runs:
// "kube:IMAGE" runs IMAGE as a sandbox pod.
const TemplatePrefix = "kube:"

// TemplateKind is the template kind of kube: templates.
const TemplateKind = "kube"

// DefaultResources fill zero resource fields (the same as native's).
var DefaultResources = sandbox.Resources{
	MemoryBytes: 512 << 20,
	CPUs:        1,
	PIDs:        256,
	DiskBytes:   1 << 30,
	TmpBytes:    256 << 20,
}

// Config configures the backend.
type Config struct {
	// Namespace holds every object of the backend (K8S_NAMESPACE).
	Namespace string
	// Kubeconfig is the path of a kubeconfig file (KUBECONFIG_PATH);
	// empty uses the in-cluster configuration of the daemon's pod.
	Kubeconfig string
	// REST, when set, is used instead of Kubeconfig (tests).
	REST *rest.Config
	// Instance tells this daemon's sandboxes from other daemons' in the
	// same namespace (LabelInstance). Required.
	Instance string
	// AgentImage is the image whose /agentbox-agent the init container
	// copies into every pod (K8S_AGENT_IMAGE).
	AgentImage string
	// RuntimeClass, when set, is every pod's runtimeClassName (gVisor,
	// Kata) (K8S_RUNTIME_CLASS).
	RuntimeClass string
	// GVisorRuntimeClass, when set, is the runtimeClassName of pods of
	// sandboxes at isolation gvisor (K8S_GVISOR_RUNTIME_CLASS: the
	// cluster's RuntimeClass whose handler is runsc, as GKE Sandbox's
	// "gvisor"); unset, such sandboxes are refused.
	GVisorRuntimeClass string
	// NodeSelector, when set, is every sandbox pod's nodeSelector
	// (agentbox.dev/node=true keeps them on agentbox nodes).
	NodeSelector map[string]string
	// StorageClass is the workspace PVCs' class; empty takes the
	// cluster's default (K8S_STORAGE_CLASS).
	StorageClass string
	// SeccompProfile is "RuntimeDefault" (the default) or
	// "Localhost/<path>" relative to the kubelet's seccomp directory.
	SeccompProfile string
	// UserNamespaces runs pods in a user namespace (hostUsers: false);
	// root sandboxes need it (K8S_USER_NAMESPACES).
	UserNamespaces bool
	// ImagePullPolicy of the sandbox images ("" = the cluster's default).
	ImagePullPolicy corev1.PullPolicy
	// Defaults fill zero fields of a spec's Resources.
	Defaults sandbox.Resources
	// ReadyTimeout bounds how long Create and Start wait for the pod and
	// its agent. Default 2 minutes (a cold image pull).
	ReadyTimeout time.Duration
	Logger       *slog.Logger
}

// Backend is the Kubernetes backend. Create it with New.
type Backend struct {
	cfg  Config
	log  *slog.Logger
	c    client.Client
	http *http.Client

	mu    sync.Mutex
	boxes map[sandbox.ID]*box
}

// box is the backend's view of one sandbox; mu serialises its lifecycle.
type box struct {
	mu        sync.Mutex
	id        sandbox.ID
	spec      sandbox.Spec // without the access token
	createdAt time.Time
	// name is the Sandbox's name: objectName(id), or the warm pool's name
	// of a Sandbox handed out through a SandboxClaim.
	name string
	// pool is the warm pool a sandbox came from: its pods start with the
	// pool's token, which the backend replaces with the sandbox's own.
	pool string
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.PortDialer = (*Backend)(nil)
	_ backend.Closer     = (*Backend)(nil)
)

// Scheme knows the core types and agent-sandbox's CRDs.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, sbv1.AddToScheme, extv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kube: scheme: %v", err))
		}
	}
	return s
}

// RESTConfig is the client configuration of path (a kubeconfig file), or
// the in-cluster one when path is empty.
func RESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kube: no KUBECONFIG_PATH and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kube: kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// New connects to the cluster and checks that agent-sandbox's Sandbox
// resource is served in the namespace.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Namespace == "" {
		return nil, errors.New("kube: Config.Namespace is required")
	}
	if cfg.Instance == "" {
		return nil, errors.New("kube: Config.Instance is required")
	}
	if cfg.AgentImage == "" {
		return nil, errors.New("kube: Config.AgentImage is required (K8S_AGENT_IMAGE: an image holding /agentbox-agent)")
	}
	if _, err := seccompProfile(cfg.SeccompProfile); err != nil {
		return nil, err
	}
	cfg.Defaults = cfg.Defaults.WithDefaults(DefaultResources)
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rc := cfg.REST
	if rc == nil {
		var err error
		if rc, err = RESTConfig(cfg.Kubeconfig); err != nil {
			return nil, err
		}
	}
	rc = rest.CopyConfig(rc)
	if rc.QPS == 0 {
		// Every sandbox is a handful of objects: client-go's default of 5
		// requests a second would make concurrent creates queue.
		rc.QPS, rc.Burst = 100, 200
	}
	// controller-runtime's client logs through its global logger, and
	// complains (with a stack) when none was set.
	setLogger.Do(func() { ctrllog.SetLogger(logr.FromSlogHandler(cfg.Logger.Handler())) })
	c, err := client.New(rc, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	var list sbv1.SandboxList
	if err := c.List(ctx, &list, client.InNamespace(cfg.Namespace), client.Limit(1)); err != nil {
		return nil, fmt.Errorf("kube: list Sandboxes in namespace %s (are agent-sandbox's CRDs installed, and may the daemon use them?): %w", cfg.Namespace, err)
	}
	return &Backend{
		cfg:   cfg,
		log:   cfg.Logger.With("backend", "kube"),
		c:     c,
		http:  &http.Client{Timeout: 2 * time.Second},
		boxes: map[sandbox.ID]*box{},
	}, nil
}

var setLogger sync.Once

// Name implements backend.Backend.
func (b *Backend) Name() string { return "kube" }

// Capabilities implements backend.Backend. Pods cannot be frozen or
// snapshotted through the Kubernetes API, their pids limit is the node's
// (kubelet's podPidsLimit), and their disk is the storage class's.
func (b *Backend) Capabilities() backend.Capabilities {
	c := backend.Capabilities{
		ResourceLimits: true,
		RootInUserNS:   b.cfg.UserNamespaces,
		Templates:      []string{TemplateKind},
		// Each sandbox's egress policy is a NetworkPolicy: what the
		// cluster's network plugin enforces, not this daemon's host
		// network (docs/kubernetes.md), so the daemon needs none of its
		// own for it.
		Egress: true,
	}
	if b.cfg.GVisorRuntimeClass != "" {
		c.Isolation = []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor}
		// The pod's runtime is the cluster's: what it lacks is the kube
		// backend's own lack (no pause, snapshots, previews by DialPort).
		c.GVisor = &backend.GVisorLimits{NoPause: true, NoSnapshot: true, NoRecycle: true, Templates: []string{TemplateKind}}
	}
	return c
}

// Client is the cluster client (tests use it to check what was created).
func (b *Backend) Client() client.Client { return b.c }

// Namespace is the backend's namespace.
func (b *Backend) Namespace() string { return b.cfg.Namespace }

// Close implements backend.Closer: sandboxes keep running, so a restarted
// daemon reattaches to them.
func (b *Backend) Close() error { return nil }

// Abandon makes the backend forget its sandboxes without touching them, as
// if its process had died (tests exercise Recover with it).
func (b *Backend) Abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.boxes = map[sandbox.ID]*box{}
}

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

// DialPort implements backend.PortDialer: the pod IP is reachable from the
// daemon (its NetworkPolicy admits the daemon's pods).
func (b *Backend) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "port %d out of range", port)
	}
	bx, err := b.lookup(id)
	if err != nil {
		return nil, err
	}
	pod, err := b.pod(ctx, bx.id)
	if err != nil {
		return nil, err
	}
	if pod == nil || pod.Status.PodIP == "" {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is not running", id)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)))
}

// networkPolicyName and the other object names of a sandbox. The prefix
// makes every name a DNS-1035 label (Services need one: a letter first).
func objectName(id sandbox.ID) string { return "ab-" + string(id) }

func secretName(id sandbox.ID) string { return objectName(id) + "-agent" }

// workspaceClaim is the PVC the controller makes from the Sandbox's
// volumeClaimTemplates ("<template>-<sandbox>").
func workspaceClaim(id sandbox.ID) string { return workspaceVolume + "-" + objectName(id) }
