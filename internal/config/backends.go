package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/settings"
)

// The backends' settings are declared here rather than in their packages:
// importing a backend links its runtime (libcontainer's init, the Docker
// and Kubernetes clients) into everything that reads the configuration,
// and the nokube build has no Kubernetes backend at all.

// NativeSettings are the native backend's settings (native.Config).
type NativeSettings struct {
	PoolWarmReset      bool                `env:"POOL_WARM_RESET" envDefault:"true" help:"with POOL_MAX_USES above 1, reset a native host-template sandbox without restarting its init (milliseconds instead of a boot); false always resets by stopping and booting it again (docs/pools.md)"`
	CgroupFavorDynmods bool                `env:"CGROUP_FAVOR_DYNMODS" envDefault:"true" help:"native backend, as root: remount the host's cgroup2 mount with favordynmods (Linux 6.0+), so that moving each new sandbox into its cgroups does not wait for an RCU grace period (~8 ms a create); host-wide until reboot: forks and exits take a slightly slower lock path"`
	PauseReclaim       bool                `env:"PAUSE_RECLAIM" envDefault:"true" help:"reclaim a sandbox's page cache (and, with host swap, its other memory) as it pauses; its memory is made the first to reclaim either way"`
	NofileSoft         uint64              `env:"SANDBOX_NOFILE_SOFT" envDefault:"1024" min:"64" max:"1048576" help:"open-file limit (soft) of sandbox processes"`
	NofileHard         uint64              `env:"SANDBOX_NOFILE_HARD" envDefault:"4096" min:"64" max:"1048576" help:"open-file limit (hard) of sandbox processes; lowered so pids × limit stays under 1/4 of fs.file-max"`
	IDBase             uint32              `env:"SANDBOX_ID_BASE" envDefault:"1073741824" min:"65536" max:"4294901760" help:"first host uid/gid of the sandboxes' id ranges (65536 ids each); must not overlap host accounts"`
	IDRanges           uint32              `env:"SANDBOX_ID_RANGES" envDefault:"16384" min:"1" max:"65536" help:"number of sandbox id ranges: one more than the most sandboxes (stopped ones included) the server holds; one owns the build cache between steps"`
	DiskReserve        settings.SizeOrZero `env:"DISK_RESERVE" envDefault:"1G" help:"space of the data dir's filesystem that sandbox disks may not claim, and that a snapshot leaves free in the template store's filesystem (0 = none)"`
	RunscPath          settings.AbsPath    `env:"RUNSC_PATH" envDefault:"" help:"gVisor's runsc binary (make runsc builds the pinned one); set, sandboxes may ask for isolation \"gvisor\" (docs/gvisor.md); empty: container isolation only"`
	DiskOvercommit     Overcommit          `env:"DISK_OVERCOMMIT" envDefault:"1" help:"how many times the data dir's free space (minus DISK_RESERVE) sandbox disks may add up to; 1 = every disk can fill up (its blocks are reserved at create)"`
}

// Overcommit is DISK_OVERCOMMIT: a number from 0.1 to 100.
type Overcommit float64

// UnmarshalText reads the number.
func (o *Overcommit) UnmarshalText(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f < 0.1 || f > 100 {
		return fmt.Errorf("want a number from 0.1 to 100")
	}
	*o = Overcommit(f)
	return nil
}

// DockerSettings are the Docker backend's (DOCKER_BACKEND is an input of
// DockerEnabled).
type DockerSettings struct {
	DockerHost DockerHost `env:"DOCKER_HOST" envDefault:"" help:"the Docker engine of the Docker backend (unix:///path or tcp://host:port; empty: the default socket); it must run on this host"`
	// DockerGVisorRuntime names the engine runtime whose binary is runsc.
	DockerGVisorRuntime DockerRuntime `env:"DOCKER_GVISOR_RUNTIME" envDefault:"" help:"the engine runtime (registered with dockerd, e.g. runsc) that Docker sandboxes at isolation gvisor run on; the engine must pass runsc --host-uds=create (docs/gvisor.md); empty: the Docker backend refuses isolation gvisor"`
}

// DockerRuntime is a runtime name registered with the Docker engine
// (dockerd --add-runtime or daemon.json "runtimes").
type DockerRuntime string

// UnmarshalText checks the name: letters, digits, '.', '_' and '-'.
func (r *DockerRuntime) UnmarshalText(b []byte) error {
	v := string(b)
	if len(v) > 64 || strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return fmt.Errorf("want a runtime name such as runsc, not %q", v)
	}
	*r = DockerRuntime(v)
	return nil
}

// DockerHost is the engine's address: unix:///path or tcp://host:port
// ("": DOCKER_HOST or the default socket).
type DockerHost string

// UnmarshalText checks the address.
func (h *DockerHost) UnmarshalText(b []byte) error {
	if v := string(b); v != "" && !strings.HasPrefix(v, "unix://") && !strings.HasPrefix(v, "tcp://") {
		return fmt.Errorf("want unix:///path or tcp://host:port, not %q", v)
	}
	*h = DockerHost(b)
	return nil
}

// KubeConfig is the Kubernetes backend's part of the configuration.
type KubeConfig struct {
	// Enabled is KUBE_BACKEND, or CONTAINER_DEPLOYMENT=k8s.
	Enabled        bool
	Namespace      Namespace      `env:"K8S_NAMESPACE" envDefault:"default" help:"namespace of the Kubernetes backend's Sandboxes, pods and policies"`
	Kubeconfig     string         `env:"KUBECONFIG_PATH" envDefault:"" help:"kubeconfig file of the Kubernetes backend; empty: the in-cluster configuration of the daemon's pod"`
	AgentImage     string         `env:"K8S_AGENT_IMAGE" envDefault:"" help:"image holding the static agent at /agentbox-agent, copied into every sandbox pod by an init container (required with the Kubernetes backend; deploy/kubernetes/Dockerfile.agent builds it)"`
	Instance       Label          `env:"K8S_INSTANCE" envDefault:"agentbox" help:"label value telling this daemon's sandboxes from other daemons' in the same namespace (daemons sharing a namespace need different ones)"`
	RuntimeClass   RuntimeClass   `env:"K8S_RUNTIME_CLASS" envDefault:"" help:"runtimeClassName of sandbox pods (gvisor, kata: what the cluster offers); empty: the cluster's default runtime"`
	GVisorClass    RuntimeClass   `env:"K8S_GVISOR_RUNTIME_CLASS" envDefault:"" help:"runtimeClassName of the pods of sandboxes at isolation gvisor (the cluster's RuntimeClass whose handler is runsc, e.g. gvisor); empty: the Kubernetes backend refuses isolation gvisor"`
	NodeSelector   NodeSelector   `env:"K8S_NODE_SELECTOR" envDefault:"" help:"nodeSelector of sandbox pods as key=value,... (agentbox.dev/node=true keeps them on agentbox nodes); empty: any node that admits them"`
	StorageClass   string         `env:"K8S_STORAGE_CLASS" envDefault:"" help:"storage class of the sandboxes' workspace volumes (kept across stop and start); empty: the cluster's default class"`
	SeccompProfile SeccompProfile `env:"K8S_SECCOMP_PROFILE" envDefault:"RuntimeDefault" help:"seccomp profile of sandbox pods: RuntimeDefault, or Localhost/<path> under the kubelet's seccomp directory"`
	UserNamespaces bool           `env:"K8S_USER_NAMESPACES" envDefault:"false" help:"run sandbox pods in user namespaces (hostUsers: false; the nodes must support it); root sandboxes need it"`
}

// Namespace is a Kubernetes namespace's name (a DNS-1123 label).
type Namespace string

// UnmarshalText checks the name.
func (n *Namespace) UnmarshalText(b []byte) error {
	if !dnsLabel(string(b)) {
		return fmt.Errorf("want a namespace name (a DNS-1123 label), not %q", b)
	}
	*n = Namespace(b)
	return nil
}

// Label is a DNS-1123 label (a label value's safe form).
type Label string

// UnmarshalText checks the label.
func (l *Label) UnmarshalText(b []byte) error {
	if !dnsLabel(string(b)) {
		return fmt.Errorf("want a DNS-1123 label, not %q", b)
	}
	*l = Label(b)
	return nil
}

// RuntimeClass is a RuntimeClass name, or "" (the cluster's default).
type RuntimeClass string

// UnmarshalText checks the name.
func (r *RuntimeClass) UnmarshalText(b []byte) error {
	if len(b) > 0 && !dnsLabel(string(b)) {
		return fmt.Errorf("want a RuntimeClass name, not %q", b)
	}
	*r = RuntimeClass(b)
	return nil
}

// NodeSelector is key=value,... (nil: any node).
type NodeSelector map[string]string

// UnmarshalText reads the pairs.
func (s *NodeSelector) UnmarshalText(b []byte) error {
	v := string(b)
	*s = nil
	for _, kv := range strings.Split(v, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k+val, " \t\"'") {
			return fmt.Errorf("want key=value,..., not %q", v)
		}
		if *s == nil {
			*s = NodeSelector{}
		}
		(*s)[k] = val
	}
	return nil
}

// SeccompProfile is RuntimeDefault or Localhost/<path>.
type SeccompProfile string

// UnmarshalText checks the profile.
func (p *SeccompProfile) UnmarshalText(b []byte) error {
	if v := string(b); v != "RuntimeDefault" && !strings.HasPrefix(v, "Localhost/") {
		return fmt.Errorf("want RuntimeDefault or Localhost/<path>, not %q", v)
	}
	*p = SeccompProfile(b)
	return nil
}

// KubeNode is the configuration of `agentbox node` (docs/kubernetes.md).
type KubeNode struct {
	Name       NodeName  "env:\"KUBE_NODE_NAME\" envDefault:\"\" help:\"`agentbox node`: the Kubernetes Node's name; empty: agentbox-<host name>\""
	Kubeconfig string    "env:\"KUBE_NODE_KUBECONFIG\" envDefault:\"\" help:\"`agentbox node`: kubeconfig of the node's identity; empty: the pod's in-cluster service account\""
	Address    IPAddress "env:\"KUBE_NODE_ADDRESS\" envDefault:\"\" help:\"`agentbox node`: the node's IP address, where the apiserver reaches its kubelet API and pods report their host IP (required)\""
	Port       int       "env:\"KUBE_NODE_PORT\" envDefault:\"10250\" min:\"1\" max:\"65535\" help:\"`agentbox node`: port of its kubelet API (logs, exec, port-forward)\""
	TLSCert    string    "env:\"KUBE_NODE_TLS_CERT\" envDefault:\"\" help:\"`agentbox node`: the kubelet API's serving certificate (PEM), signed by a CA the apiserver's --kubelet-certificate-authority names (required)\""
	TLSKey     string    "env:\"KUBE_NODE_TLS_KEY\" envDefault:\"\" help:\"`agentbox node`: the key of KUBE_NODE_TLS_CERT (required)\""
	ClientCA   string    "env:\"KUBE_NODE_CLIENT_CA\" envDefault:\"\" help:\"`agentbox node`: CA of the client certificates the kubelet API accepts (the apiserver's kubelet client's); each request is then authorized by the apiserver (required)\""
}

// NodeName is a Kubernetes Node's name (a DNS subdomain), or "".
type NodeName string

// UnmarshalText checks the name.
func (n *NodeName) UnmarshalText(b []byte) error {
	if len(b) > 0 && !dnsSubdomain(string(b)) {
		return fmt.Errorf("want a DNS subdomain name (lower case letters, digits, '-' and '.')")
	}
	*n = NodeName(b)
	return nil
}

// IPAddress is an IP address, or "".
type IPAddress string

// UnmarshalText checks the address.
func (a *IPAddress) UnmarshalText(b []byte) error {
	if len(b) > 0 && net.ParseIP(string(b)) == nil {
		return fmt.Errorf("want an IP address")
	}
	*a = IPAddress(b)
	return nil
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
