// Package kubetest runs a real Kubernetes control plane for tests: etcd,
// kube-apiserver and kube-scheduler on loopback ports, the agent-sandbox
// CRDs (Established before anything uses them) and the agent-sandbox
// controller with its conversion webhook — nothing faked. No kubelet and
// no kube-controller-manager run: nodes are whatever the test starts (an
// `agentbox node`, internal/kubenode), and the harness creates the test
// namespace's default ServiceAccount itself.
//
// The binaries come from `make k8s-tools` (scripts/k8s-tools.sh), built
// once into the test cache. Without them Start skips — unless
// AGENTBOX_REQUIRE_K8S is set (scripts/test.sh sets it after building
// them), when it fails.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// DefaultNamespace is the namespace Start creates for the test.
const DefaultNamespace = "agentbox-test"

// Options tune New. The zero value is what Start uses.
type Options struct {
	// Namespace to create with its default ServiceAccount
	// (DefaultNamespace when empty).
	Namespace string
	// NoScheduler leaves kube-scheduler out: pods then stay Pending unless
	// they name their node.
	NoScheduler bool
	// NoController leaves the agent-sandbox controller (and its CRDs'
	// conversion webhook) out; the CRDs are still applied.
	NoController bool
}

// Cluster is a running control plane.
type Cluster struct {
	// Dir holds the certificates, kubeconfigs, etcd's data and every
	// process's log (<name>.log); removed by Close.
	Dir string
	// Server is the apiserver's URL (https://127.0.0.1:<port>).
	Server string
	// CAFile is the PEM of the one CA every certificate of the cluster
	// chains to (apiserver, clients, kubelets, webhook); CAData its bytes.
	CAFile string
	CAData []byte
	// AdminToken is a bearer token of a system:masters user "admin".
	AdminToken string
	// KubeconfigPath is a kubeconfig for the admin; RESTConfig the same
	// as a client-go config (QPS limits raised for tests).
	KubeconfigPath string
	RESTConfig     *rest.Config
	// Clientset is a typed client for the admin.
	Clientset kubernetes.Interface
	// Namespace exists, with its default ServiceAccount.
	Namespace string
	// ToolsDir holds the binaries and the agent-sandbox CRDs (crds/).
	ToolsDir string
	// KubeletClientCertFile/KeyFile are what the apiserver presents to
	// kubelets (CN kube-apiserver-kubelet-client): a node's kubelet API
	// should accept clients the CA signed.
	KubeletClientCertFile, KubeletClientKeyFile string

	ca    *authority
	procs []*proc // in start order
}

// Start runs a control plane for the test and stops it in t.Cleanup. It
// skips when the tools are not built, unless AGENTBOX_REQUIRE_K8S is set.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := New(ctx, opts)
	if errors.Is(err, ErrNoTools) {
		if os.Getenv("AGENTBOX_REQUIRE_K8S") != "" {
			t.Fatalf("%v; AGENTBOX_REQUIRE_K8S is set, so this fails instead of skipping", err)
		}
		t.Skipf("%v; the Kubernetes tests need them", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.reportLogs(t)
		}
		c.Close()
	})
	return c
}

// failureTailLines is how many lines of each process's log a failed test
// prints. CI shows the end of a failed run's output: kept short (and
// without the apiserver's routine chatter) so the test's own failure
// message above them stays in view. AGENTBOX_KUBETEST_LOGS keeps the
// whole logs instead.
const failureTailLines = 12

// reportLogs logs the tail of every process's log, and copies the whole
// logs into $AGENTBOX_KUBETEST_LOGS/<test>/ when that is set.
func (c *Cluster) reportLogs(t testing.TB) {
	keep := os.Getenv("AGENTBOX_KUBETEST_LOGS")
	var kept string
	if keep != "" {
		kept = filepath.Join(keep, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
		if err := os.MkdirAll(kept, 0o755); err != nil { //nolint:gosec // G703: a directory the tester names (AGENTBOX_KUBETEST_LOGS)
			t.Logf("kubetest: keep logs: %v", err)
			kept = ""
		}
	}
	for _, p := range c.procs {
		t.Logf("--- %s log (last %d lines, routine lines left out) ---\n%s", p.name, failureTailLines, p.tail(failureTailLines))
		if kept != "" {
			if b, err := os.ReadFile(p.log); err == nil {
				err = os.WriteFile(filepath.Join(kept, p.name+".log"), b, 0o644) //nolint:gosec // G703: as above
				if err != nil {
					t.Logf("kubetest: keep %s log: %v", p.name, err)
				}
			}
		}
	}
	if kept != "" {
		t.Logf("kubetest: whole logs in %s", kept)
	}
}

// New starts a control plane; Close stops it. It returns ErrNoTools when
// the binaries are not built.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	dir, err := ToolsDir()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTools, err)
	}
	if !toolsPresent(dir) {
		return nil, fmt.Errorf("%w: nothing complete in %s", ErrNoTools, dir)
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	// A port taken between choosing it and binding it (other tests run on
	// this machine) fails the start-up: try again with fresh ports.
	var lastErr error
	for range 3 {
		c, err := start(ctx, dir, opts)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, lastErr
}

var errPortTaken = errors.New("kubetest: a chosen port was taken")

func start(ctx context.Context, tools string, opts Options) (_ *Cluster, err error) {
	dir, err := os.MkdirTemp("", "agentbox-kubetest-")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	c := &Cluster{Dir: dir, ToolsDir: tools, Namespace: opts.Namespace}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, webhookPort := ports[0], ports[1], ports[2], ports[3]
	if err := c.writeCredentials(); err != nil {
		return nil, err
	}
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := c.startEtcd(etcdPort, peerPort); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(etcdPort, apiPort); err != nil {
		return nil, err
	}
	if err := c.writeAdminKubeconfig(); err != nil {
		return nil, err
	}
	if !opts.NoScheduler {
		if _, err := c.run("kube-scheduler", []string{
			"--kubeconfig=" + c.KubeconfigPath,
			"--authentication-kubeconfig=" + c.KubeconfigPath,
			"--authorization-kubeconfig=" + c.KubeconfigPath,
			"--leader-elect=false",
			"--secure-port=0",
			"--v=2",
		}, nil); err != nil {
			return nil, err
		}
	}
	if err := c.applyCRDs(ctx, webhookPort, !opts.NoController); err != nil {
		return nil, err
	}
	if !opts.NoController {
		if err := c.startController(webhookPort); err != nil {
			return nil, err
		}
	}
	if err := c.createNamespace(ctx, opts.Namespace); err != nil {
		return nil, err
	}
	// As kubeadm does: the apiserver's kubelet client may use the kubelet
	// API (logs, exec, port-forward) of nodes that authorize their callers.
	if _, err := c.Clientset.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubetest:apiserver-kubelet-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: KubeletClientUser}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("kubetest: bind the kubelet client: %w", err)
	}
	return c, nil
}

// KubeletClientUser is the user of the apiserver's kubelet client
// certificate, bound to system:kubelet-api-admin.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// run starts a tool from the tools directory.
func (c *Cluster) run(name string, args, env []string) (*proc, error) {
	p, err := startProc(c.Dir, name, filepath.Join(c.ToolsDir, name), args, env)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// waitUp wraps proc.waitFor, turning a bind failure into errPortTaken.
func waitUp(p *proc, timeout time.Duration, what string, ready func() error) error {
	err := p.waitFor(timeout, what, ready)
	if err != nil && errors.Is(err, errExited) && portInUse(p) {
		return fmt.Errorf("%w: %v", errPortTaken, err)
	}
	return err
}

func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

// writeCredentials writes the CA, the apiserver's serving and kubelet-client
// certificates, the service-account signing key and the admin's token.
func (c *Cluster) writeCredentials() error {
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	c.ca = ca
	c.CAData = ca.certPEM
	c.CAFile = c.path("ca.crt")
	if err := os.WriteFile(c.CAFile, ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := ca.writePair(c.path("apiserver"), "kube-apiserver", nil,
		[]string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, true); err != nil {
		return err
	}
	if err := ca.writePair(c.path("kubelet-client"), KubeletClientUser, nil, nil, false); err != nil {
		return err
	}
	c.KubeletClientCertFile, c.KubeletClientKeyFile = c.path("kubelet-client.crt"), c.path("kubelet-client.key")
	if err := writeSigningKey(c.path("sa.key")); err != nil {
		return err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	c.AdminToken = hex.EncodeToString(tok)
	line := c.AdminToken + `,admin,admin-uid,"system:masters"` + "\n"
	if err := os.WriteFile(c.path("tokens.csv"), []byte(line), 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return nil
}

func (c *Cluster) startEtcd(port, peer int) error {
	client := "http://127.0.0.1:" + strconv.Itoa(port)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	p, err := c.run("etcd", []string{
		"--name=default",
		"--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// A test's data need not survive a crash of the machine.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return waitUp(p, 60*time.Second, "healthy", func() error {
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"true"`) {
			return fmt.Errorf("health %d: %s", resp.StatusCode, b)
		}
		return nil
	})
}

func (c *Cluster) startAPIServer(etcdPort, port int) error {
	const issuer = "https://kubernetes.default.svc.cluster.local"
	p, err := c.run("kube-apiserver", []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + c.path("apiserver-certs"),
		"--tls-cert-file=" + c.path("apiserver.crt"),
		"--tls-private-key-file=" + c.path("apiserver.key"),
		"--client-ca-file=" + c.CAFile,
		"--token-auth-file=" + c.path("tokens.csv"),
		// The Node authorizer and NodeRestriction confine a node's
		// credentials to its own Node and pods, as on a real cluster.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// TaintNodesByCondition taints every new Node not-ready, a taint
		// only kube-controller-manager's node lifecycle controller (not
		// run here) removes.
		"--disable-admission-plugins=TaintNodesByCondition",
		"--service-account-issuer=" + issuer,
		"--api-audiences=" + issuer,
		"--service-account-key-file=" + c.path("sa.key"),
		"--service-account-signing-key-file=" + c.path("sa.key"),
		// Only allocated by the apiserver: no service network exists.
		"--service-cluster-ip-range=10.96.0.0/16",
		"--kubelet-client-certificate=" + c.KubeletClientCertFile,
		"--kubelet-client-key=" + c.KubeletClientKeyFile,
		"--kubelet-certificate-authority=" + c.CAFile,
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=false",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	}, nil)
	if err != nil {
		return err
	}
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	return waitUp(p, 150*time.Second, "ready", func() error {
		req, _ := http.NewRequest(http.MethodGet, c.Server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 8192))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d: %s", resp.StatusCode, b)
		}
		return nil
	})
}

// httpClient trusts the cluster's CA.
func (c *Cluster) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CAData) {
		return nil, errors.New("kubetest: bad CA PEM")
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

func (c *Cluster) writeAdminKubeconfig() error {
	c.KubeconfigPath = c.path("admin.kubeconfig")
	if err := c.writeKubeconfig(c.KubeconfigPath, "admin", &clientcmdapi.AuthInfo{Token: c.AdminToken}); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath)
	if err != nil {
		return fmt.Errorf("kubetest: admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.RESTConfig = cfg
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubetest: clientset: %w", err)
	}
	c.Clientset = cs
	return nil
}

func (c *Cluster) writeKubeconfig(path, user string, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user, Namespace: c.Namespace}
	cfg.CurrentContext = "kubetest"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("kubetest: write kubeconfig: %w", err)
	}
	return os.Chmod(path, 0o600)
}

// UserKubeconfig issues a client certificate for user in groups (say
// "system:node:n1" in "system:nodes", or a service's own identity for RBAC
// tests) and returns a kubeconfig file for it and the same as a REST
// config. The user has only what RBAC (or the Node authorizer) grants.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, *rest.Config, error) {
	safe := strings.NewReplacer(":", "_", "/", "_").Replace(user)
	base := c.path("user-" + safe)
	if err := c.ca.writePair(base, user, groups, nil, false); err != nil {
		return "", nil, err
	}
	path := base + ".kubeconfig"
	if err := c.writeKubeconfig(path, user, &clientcmdapi.AuthInfo{
		ClientCertificate: base + ".crt", ClientKey: base + ".key",
	}); err != nil {
		return "", nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return "", nil, fmt.Errorf("kubetest: %s kubeconfig: %w", user, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return path, cfg, nil
}

// ServingCert issues a server certificate for hosts (IPs or DNS names)
// signed by the cluster's CA — a kubelet API's, which the apiserver
// verifies against that CA — and writes it as <name>.crt/.key in Dir.
func (c *Cluster) ServingCert(name string, hosts ...string) (certFile, keyFile string, err error) {
	base := c.path(name)
	if err := c.ca.writePair(base, name, nil, hosts, true); err != nil {
		return "", "", err
	}
	return base + ".crt", base + ".key", nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applyCRDs creates agent-sandbox's CRDs from the pinned module's files and
// waits until each is Established. Their conversion webhook points at the
// controller on loopback (webhookPort) with the cluster's CA — the
// controller's own cert management would point it at an in-cluster
// Service, which no service network here reaches. Without a controller
// the CRDs get no conversion (only their storage version is then usable).
func (c *Cluster) applyCRDs(ctx context.Context, webhookPort int, webhook bool) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("kubetest: dynamic client: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(c.ToolsDir, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("kubetest: no CRDs in %s/crds", c.ToolsDir)
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("kubetest: %w", err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &obj.Object); err != nil {
			return fmt.Errorf("kubetest: %s: %w", filepath.Base(f), err)
		}
		if webhook {
			if _, found, _ := unstructured.NestedMap(obj.Object, "spec", "conversion", "webhook"); found {
				cc := map[string]any{
					"url":      fmt.Sprintf("https://127.0.0.1:%d/convert", webhookPort),
					"caBundle": base64.StdEncoding.EncodeToString(c.CAData),
				}
				if err := unstructured.SetNestedMap(obj.Object, cc, "spec", "conversion", "webhook", "clientConfig"); err != nil {
					return fmt.Errorf("kubetest: %s: %w", filepath.Base(f), err)
				}
			}
		} else {
			unstructured.RemoveNestedField(obj.Object, "spec", "conversion")
		}
		if _, err := dyn.Resource(crdGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("kubetest: create CRD %s: %w", obj.GetName(), err)
		}
		names = append(names, obj.GetName())
	}
	for _, name := range names {
		if err := poll(ctx, 60*time.Second, "CRD "+name+" Established", func() error {
			u, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cd := range conds {
				m, _ := cd.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return errors.New("not Established yet")
		}); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startController(webhookPort int) error {
	certDir := c.path("webhook")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := c.ca.writePair(filepath.Join(certDir, "tls"), "agent-sandbox-webhook", nil, []string{"127.0.0.1", "localhost"}, true); err != nil {
		return err
	}
	p, err := c.run("agent-sandbox-controller", []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--leader-elect=false",
		"--extensions=true",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--enable-webhook=true",
		"--manage-webhook-certs=false",
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-cert-dir=" + certDir,
		"--webhook-cert-name=tls.crt",
		"--webhook-key-name=tls.key",
	}, nil)
	if err != nil {
		return err
	}
	// Up once its webhook server answers TLS with our certificate (the
	// manager starts it together with the controllers).
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(webhookPort))
	return waitUp(p, 90*time.Second, "serving its webhook", func() error {
		d := &net.Dialer{Timeout: 2 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// createNamespace creates ns and, standing in for the absent
// kube-controller-manager, the default ServiceAccount of ns and of
// "default" (pods are refused without one) and the kube-root-ca.crt
// ConfigMap a real kubelet mounts into pods that mount a token.
func (c *Cluster) createNamespace(ctx context.Context, ns string) error {
	_, err := c.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubetest: create namespace %s: %w", ns, err)
	}
	for _, n := range []string{ns, metav1.NamespaceDefault} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: n}}
		if _, err := c.Clientset.CoreV1().ServiceAccounts(n).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubetest: create %s/default ServiceAccount: %w", n, err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: n}, Data: map[string]string{"ca.crt": string(c.CAData)}}
		if _, err := c.Clientset.CoreV1().ConfigMaps(n).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubetest: create %s/kube-root-ca.crt: %w", n, err)
		}
	}
	return nil
}

// CreateNamespace creates another namespace with its default
// ServiceAccount.
func (c *Cluster) CreateNamespace(ctx context.Context, ns string) error {
	return c.createNamespace(ctx, ns)
}

// Close stops every process (the controller first, etcd last) and removes
// Dir. Safe to call twice.
func (c *Cluster) Close() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(15 * time.Second)
	}
	c.procs = nil
	if c.Dir != "" {
		_ = os.RemoveAll(c.Dir)
		c.Dir = ""
	}
}

// Log returns the tail of a control-plane process's log ("etcd",
// "kube-apiserver", "kube-scheduler", "agent-sandbox-controller").
func (c *Cluster) Log(name string, lines int) string {
	for _, p := range c.procs {
		if p.name == name {
			return p.tail(lines)
		}
	}
	return ""
}

// poll runs f every 100ms until it succeeds, ctx ends or timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = f(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: %s: %v (last: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
