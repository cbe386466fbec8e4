// Package kubenode is `agentbox node`: a Kubernetes node agent built on the
// virtual-kubelet library. It registers a Node tainted for sandbox pods and
// runs every pod bound to it in-process as a native agentbox sandbox —
// the same isolation, limits and egress policy as the native backend —
// with the pod's image resolved through the template store. It reports
// pod status, IP and conditions, and serves logs, exec and port-forward
// through the kubelet API the apiserver calls. docs/kubernetes.md has the
// contract ("Pods on an agentbox node").
package kubenode

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/version"
)

// DefaultPort is the kubelet API's port.
const DefaultPort = 10250

// Config configures a node.
type Config struct {
	// NodeName is the Node's name. Required.
	NodeName string
	// REST reaches the apiserver as the node's identity.
	REST *rest.Config
	// Backend runs the sandboxes; Network gives their addresses (pod IPs);
	// Templates resolves images. Required.
	Backend   *native.Backend
	Network   Addresser
	Templates Templates
	// Defaults fill a pod's unset limits; MaxResources caps them.
	Defaults, MaxResources sandbox.Resources
	// VolumeDir holds the directories of PVCs mounted at /workspace;
	// LogDir the logs of generic pods' processes.
	VolumeDir, LogDir string
	// Address is the node's InternalIP: the kubelet API listens on it
	// (Port, default DefaultPort) and pods report it as their hostIP.
	Address string
	Port    int
	// TLSCertFile/TLSKeyFile are the kubelet API's serving certificate
	// (the apiserver verifies it with --kubelet-certificate-authority);
	// ClientCAFile the CA of the apiserver's kubelet client certificate:
	// no other client is served.
	TLSCertFile, TLSKeyFile, ClientCAFile string
	// Capacity is what the Node offers the scheduler (defaults: the host's
	// CPUs, 110 pods, MemoryBytes of memory or 64 GiB).
	CPUs        int
	MemoryBytes int64
	MaxPods     int
	Logger      *slog.Logger
}

// Node is a running agentbox node.
type Node struct {
	cfg    Config
	vk     *nodeutil.Node
	prov   *provider
	client kubernetes.Interface
	cancel context.CancelFunc
	done   chan error

	stopOnce sync.Once
	stopErr  error
}

// Start registers the node and returns once it is ready (its Node Ready,
// its pod controller watching). Stop ends it.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.NodeName == "" || cfg.REST == nil || cfg.Backend == nil || cfg.Network == nil || cfg.Templates == nil {
		return nil, errors.New("kubenode: NodeName, REST, Backend, Network and Templates are required")
	}
	if cfg.Address == "" || net.ParseIP(cfg.Address) == nil {
		return nil, fmt.Errorf("kubenode: node address %q: want an IP address", cfg.Address)
	}
	if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" || cfg.ClientCAFile == "" {
		return nil, errors.New("kubenode: the kubelet API needs a serving certificate and key and a client CA")
	}
	if cfg.VolumeDir == "" || cfg.LogDir == "" {
		return nil, errors.New("kubenode: VolumeDir and LogDir are required")
	}
	for _, d := range []string{cfg.VolumeDir, cfg.LogDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("kubenode: %w", err)
		}
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = runtime.NumCPU()
	}
	if cfg.MemoryBytes <= 0 {
		cfg.MemoryBytes = 64 << 30
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = 110
	}
	client, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("kubenode: client: %w", err)
	}
	log := cfg.Logger.With("component", "kubenode", "node", cfg.NodeName)
	prov := &provider{cfg: &cfg, log: log, client: client, hostIP: cfg.Address, pods: map[string]*podState{}}

	// The kubelet API as a kubelet serves it: clients authenticate with a
	// certificate from the client CA (or a token the apiserver reviews),
	// and the apiserver decides what they may do (SubjectAccessReview on
	// nodes/proxy, nodes/log, ...): a certificate alone does not let any
	// user of the cluster exec into this node's pods.
	clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("kubenode: client CA: %w", err)
	}
	auth, err := nodeutil.WebhookAuth(client, cfg.NodeName, func(c *nodeutil.WebhookAuthConfig) error {
		c.AuthnConfig.ClientCertificateCAContentProvider = clientCA
		c.AuthnConfig.Anonymous = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubenode: kubelet API auth: %w", err)
	}
	mux := http.NewServeMux()
	vk, err := nodeutil.NewNode(cfg.NodeName,
		func(nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) { return prov, nil, nil },
		nodeutil.WithClient(client),
		func(nc *nodeutil.NodeConfig) error {
			nc.HTTPListenAddr = net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port))
			nc.Handler = nodeutil.WithAuth(auth, mux)
			nc.NumWorkers = 4
			nc.InformerResyncPeriod = time.Minute
			nc.NodeSpec = nodeObject(cfg)
			return nil
		},
		nodeutil.AttachProviderRoutes(mux),
		nodeutil.WithTLSConfig(nodeutil.WithKeyPairFromPath(cfg.TLSCertFile, cfg.TLSKeyFile), nodeutil.WithCAFromPath(cfg.ClientCAFile),
			func(tc *tls.Config) error {
				// A certificate or a bearer token (WebhookAuth reviews it).
				tc.ClientAuth = tls.VerifyClientCertIfGiven
				return nil
			}),
	)
	if err != nil {
		return nil, fmt.Errorf("kubenode: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n := &Node{cfg: cfg, vk: vk, prov: prov, client: client, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- vk.Run(runCtx) }()
	if err := vk.WaitReady(ctx, 0); err != nil {
		cancel()
		<-n.done //nolint:errcheck // waits for the node loop to end; the readiness error is the one reported
		return nil, fmt.Errorf("kubenode: node %s did not become ready: %w", cfg.NodeName, err)
	}
	// virtual-kubelet reports the node ready asynchronously: wait until
	// the apiserver has it, so the scheduler can use the node.
	if err := n.waitNodeReady(ctx, 30*time.Second); err != nil {
		_ = n.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	log.Info("agentbox node ready", "address", cfg.Address, "port", cfg.Port)
	return n, nil
}

func (n *Node) waitNodeReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		nd, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err == nil {
			for _, c := range nd.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubenode: node %s not Ready in the apiserver after %s (last error: %v)", n.cfg.NodeName, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodeObject is the Node the node registers: tainted so only pods that
// tolerate it land here, labelled for node selectors.
func nodeObject(cfg Config) corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(cfg.CPUs), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(cfg.MemoryBytes, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(cfg.MaxPods), resource.DecimalSI),
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: cfg.NodeName,
			Labels: map[string]string{
				"type":                   "virtual-kubelet",
				"kubernetes.io/role":     "agent",
				"kubernetes.io/hostname": cfg.NodeName,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     runtime.GOARCH,
				LabelNode:                "true",
			},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: TaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodePending,
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: cfg.Address},
				{Type: corev1.NodeHostName, Address: cfg.NodeName},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(cfg.Port)}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux", Architecture: runtime.GOARCH,
				KubeletVersion: "agentbox-" + version.Version, ContainerRuntimeVersion: "agentbox://" + version.Version,
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse},
			},
		},
	}
}

// Stop ends the node: its pods' sandboxes are destroyed (a node that goes
// away takes its sandboxes with it), the controllers stop, and the Node is
// marked not ready. Calling it again returns the first call's result.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() { n.stopErr = n.stop(ctx) })
	return n.stopErr
}

func (n *Node) stop(ctx context.Context) error {
	n.cancel()
	runErr := <-n.done
	if errors.Is(runErr, context.Canceled) {
		runErr = nil
	}
	err := n.prov.shutdown(ctx)
	if e := n.markNotReady(ctx); e != nil {
		n.cfg.Logger.Warn("mark the node not ready", "node", n.cfg.NodeName, "err", e)
	}
	return errors.Join(runErr, err)
}

func (n *Node) markNotReady(ctx context.Context) error {
	nd, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady {
			nd.Status.Conditions[i].Status = corev1.ConditionFalse
			nd.Status.Conditions[i].Reason = "AgentboxNodeStopped"
			nd.Status.Conditions[i].Message = "agentbox node stopped"
			nd.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	_, err = n.client.CoreV1().Nodes().UpdateStatus(ctx, nd, metav1.UpdateOptions{})
	return err
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
