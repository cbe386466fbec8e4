package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// realDaemonImage is deploy/kubernetes/Dockerfile's content, imported
// into the real node's containerd.
const realDaemonImage = "kubetest.local/agentbox:test"

// TestKubeInClusterDaemon: `agentbox serve` in-cluster as
// deploy/kubernetes ships it — rbac.yaml and daemon.yaml applied as they
// are (namespace and image names patched in), the daemon's pod run by the
// real node's kubelet under the manifest's ServiceAccount, reaching the
// apiserver with the pod's in-cluster credentials — serves the API: a
// sandbox created through it is a pod on the same node (the daemon talks
// to agent-sandbox like any client), exec and a file round trip go daemon
// → agent on the pod network, and delete leaves no object.
func TestKubeInClusterDaemon(t *testing.T) {
	e := startRealNodeEnv(t)
	ctx := ctxFor(t)
	admin := mustClient(t, e.c)
	ns := e.c.Namespace

	importDaemonImage(t, ctx, e.node)
	apiHost, apiPort := forwardAPIServer(t, e)

	const apiKey, apiUser = "k-incluster-0123456789", "op"
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "agentbox-api-keys", Namespace: ns},
		StringData: map[string]string{"API_KEYS": apiKey + ":" + apiUser}}
	if err := admin.Create(ctx, keys); err != nil {
		t.Fatalf("create the API keys Secret: %v", err)
	}
	var dep *appsv1.Deployment
	for _, f := range []string{"rbac.yaml", "daemon.yaml"} {
		objs, err := readManifests("../../../deploy/kubernetes/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			o.SetNamespace(ns)
			if o.GetKind() == "RoleBinding" {
				retargetSubjects(t, o, ns)
			}
			if o.GetKind() == "Deployment" {
				dep = &appsv1.Deployment{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, dep); err != nil {
					t.Fatalf("daemon.yaml's Deployment: %v", err)
				}
				patchDaemon(t, &dep.Spec.Template.Spec, apiHost, apiPort)
				m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dep)
				if err != nil {
					t.Fatal(err)
				}
				o = &unstructured.Unstructured{Object: m}
			}
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("%s: create %s %s: %v", f, o.GetKind(), o.GetName(), err)
			}
		}
	}
	if dep == nil {
		t.Fatal("daemon.yaml has no Deployment")
	}

	// No kube-controller-manager runs here, so no ReplicaSet controller
	// makes the Deployment's pod: the test makes the one pod it would,
	// from the Deployment as the apiserver stored it (defaults applied),
	// and the scheduler places it on the real node.
	if err := admin.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	t.Cleanup(func() {
		// Before the node goes: the daemon's pod, so Close finds only
		// what it must clean itself.
		if pod == nil {
			return
		}
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		zero := int64(0)
		_ = admin.Delete(c, pod, &client.DeleteOptions{GracePeriodSeconds: &zero})
	})
	pod = runDaemonPod(t, ctx, admin, dep, 0)
	if !e.node.Subnet.Contains(mustAddr(t, pod.Status.PodIP)) {
		t.Fatalf("daemon pod at %s, want the node's subnet %s", pod.Status.PodIP, e.node.Subnet)
	}
	api := &daemonAPI{t: t, url: "http://" + net.JoinHostPort(pod.Status.PodIP, "8000"), key: apiKey}
	defer func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", podLog(e.c, ns, pod.Name))
		}
	}()

	if code, body := api.call("GET", "/v1/sandboxes", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("the API without a key = %d %s, want 401", code, body)
	}
	code, body := api.call("GET", "/v1/info", apiKey, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"native+kube"`) {
		t.Fatalf("info = %d %s, want the kube backend", code, body)
	}

	// Egress is the kube sandbox's own (its NetworkPolicy, which the
	// cluster's network plugin enforces), though the daemon's pod has no
	// sandbox network of its own.
	start := time.Now()
	code, body = api.call("POST", "/v1/sandboxes", apiKey, map[string]any{"template": TemplatePrefix + realTemplateImage,
		"env": map[string]string{"GREETING": "in-cluster"}, "network": map[string]any{"mode": "egress", "deny_out": []string{"203.0.113.0/24"}}})
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("create through the in-cluster API = %d %s", code, body)
	}
	t.Logf("create through the in-cluster API: %s", time.Since(start).Round(time.Millisecond))
	var sb struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &sb); err != nil || sb.ID == "" {
		t.Fatalf("create answered %s (%v)", body, err)
	}
	id := sandbox.ID(sb.ID)
	// The daemon made the Sandbox; the controller and the kubelet its pod,
	// on the same node.
	var sbPod corev1.Pod
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ab-" + sb.ID}, &sbPod); err != nil {
		t.Fatalf("the sandbox's pod: %v", err)
	}
	if sbPod.Spec.NodeName != e.node.Name || !e.node.Subnet.Contains(mustAddr(t, sbPod.Status.PodIP)) {
		t.Fatalf("sandbox pod on %q at %s, want %s on %s", sbPod.Spec.NodeName, sbPod.Status.PodIP, e.node.Name, e.node.Subnet)
	}

	code, body = api.call("POST", "/v1/sandboxes/"+sb.ID+"/exec", apiKey, map[string]any{"cmd": []string{"/bin/sh", "-c", `echo "$GREETING"; id -u`}})
	var r struct {
		Stdout   string `json:"stdout"`
		ExitCode *int   `json:"exit_code"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &r) != nil || r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "in-cluster\n1000\n" {
		t.Fatalf("exec through the in-cluster API = %d %s", code, body)
	}
	const content = "through the daemon's pod\n"
	if code, body := api.call("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/workspace/in.txt", apiKey, []byte(content)); code/100 != 2 {
		t.Fatalf("upload = %d %s", code, body)
	}
	if code, body := api.call("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/workspace/in.txt", apiKey, nil); code != http.StatusOK || string(body) != content {
		t.Fatalf("download = %d %q, want %q", code, body, content)
	}
	var np networkingv1.NetworkPolicy
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ab-" + sb.ID}, &np); err != nil {
		t.Fatalf("the sandbox's NetworkPolicy: %v", err)
	}
	if eg := np.Spec.Egress; len(eg) != 1 || len(eg[0].To) != 1 || eg[0].To[0].IPBlock == nil || eg[0].To[0].IPBlock.CIDR != "0.0.0.0/0" ||
		!slices.Contains(eg[0].To[0].IPBlock.Except, "203.0.113.0/24") || !slices.Contains(eg[0].To[0].IPBlock.Except, "10.0.0.0/8") {
		t.Fatalf("egress of the sandbox's NetworkPolicy = %+v, want the internet but the denied and private ranges", eg)
	}

	// The daemon's pod goes as a rollout or a drain makes it go (deleted,
	// SIGTERM), and the next one takes the sandbox back from the records
	// on its claim: the same sandbox, running, its files and token.
	restart := time.Now()
	if err := admin.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Minute, "the first daemon pod is gone", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err), err
	})
	pod = runDaemonPod(t, ctx, admin, dep, 1)
	t.Logf("daemon restart (delete, then a new pod Ready): %s", time.Since(restart).Round(time.Millisecond))
	api.url = "http://" + net.JoinHostPort(pod.Status.PodIP, "8000")
	if code, body := api.call("GET", "/v1/sandboxes/"+sb.ID, apiKey, nil); code != http.StatusOK || !strings.Contains(string(body), `"running"`) {
		t.Fatalf("the sandbox after the daemon's restart = %d %s, want it running", code, body)
	}
	if code, body := api.call("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/workspace/in.txt", apiKey, nil); code != http.StatusOK || string(body) != content {
		t.Fatalf("download after the daemon's restart = %d %q, want %q", code, body, content)
	}
	code, body = api.call("POST", "/v1/sandboxes/"+sb.ID+"/exec", apiKey, map[string]any{"cmd": []string{"/bin/sh", "-c", `echo "$GREETING"`}})
	if code != http.StatusOK || !strings.Contains(string(body), `"stdout":"in-cluster\n"`) {
		t.Fatalf("exec after the daemon's restart = %d %s", code, body)
	}

	if code, body := api.call("DELETE", "/v1/sandboxes/"+sb.ID, apiKey, nil); code != http.StatusNoContent {
		t.Fatalf("delete = %d %s", code, body)
	}
	within(t, 2*time.Minute, "the sandbox's objects and pod are gone", func() (bool, error) {
		objs, err := objectsOf(ctx, admin, ns, id)
		if err != nil || len(objs) > 0 {
			return false, fmt.Errorf("left: %v (%v)", objs, err)
		}
		var pods corev1.PodList
		if err := admin.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		var names []string
		for _, p := range pods.Items {
			if p.Name != pod.Name {
				names = append(names, p.Name)
			}
		}
		return len(names) == 0, fmt.Errorf("pods left: %v", names)
	})
	if code, body := api.call("GET", "/v1/sandboxes", apiKey, nil); code != http.StatusOK || strings.Contains(string(body), sb.ID) {
		t.Fatalf("list after delete = %d %s", code, body)
	}
	// The manifest's settings suit a daemon without sandboxes of its own:
	// nothing it tried at start or since failed.
	if log := podLog(e.c, ns, pod.Name); strings.Contains(log, "level=ERROR") || strings.Contains(log, "level=WARN msg=\"sandbox networking unavailable") {
		t.Errorf("the daemon logged errors:\n%s", log)
	}
}

// runDaemonPod makes the Deployment's pod number n, as its ReplicaSet
// controller would (none runs here), from the Deployment as the apiserver
// stored it (defaults applied); the scheduler places it on the real node.
// It returns the pod once Ready.
func runDaemonPod(t *testing.T, ctx context.Context, admin client.Client, dep *appsv1.Deployment, n int) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", dep.Name, n), Namespace: dep.Namespace, Labels: dep.Spec.Template.Labels},
		Spec: dep.Spec.Template.Spec}
	start := time.Now()
	if err := admin.Create(ctx, pod); err != nil {
		t.Fatalf("create the daemon's pod: %v", err)
	}
	within(t, 4*time.Minute, "the daemon's pod is Ready", func() (bool, error) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		var restarts []string
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.RestartCount > 0 || cs.State.Waiting != nil {
				restarts = append(restarts, fmt.Sprintf("%s restarts %d %+v %+v", cs.Name, cs.RestartCount, cs.State.Waiting, cs.LastTerminationState.Terminated))
			}
		}
		return false, fmt.Errorf("pod %s, %s; %s", pod.Status.Phase, pod.Status.PodIP, strings.Join(restarts, "; "))
	})
	t.Logf("daemon pod %s Ready on the real node: %s", pod.Name, time.Since(start).Round(time.Millisecond))
	return pod
}

// importDaemonImage lays out deploy/kubernetes/Dockerfile's image — the
// binaries in /usr/local/bin, agentbox-kube the entrypoint, user
// 65532 — and imports it. Instead of Debian's base it carries the shared
// libraries agentbox-kube links (cgo: libc, libseccomp), which is what of
// the base the daemon uses.
func importDaemonImage(t *testing.T, ctx context.Context, n *kubetest.Node) {
	t.Helper()
	root := t.TempDir()
	kubeBin := daemonKubeBinary(t)
	agentDir := filepath.Dir(testutil.AgentBinary(t))
	bins := map[string]string{"agentbox-kube": kubeBin, "agentbox-agent": testutil.AgentBinary(t), "agentbox-init": filepath.Join(agentDir, "agentbox-init")}
	if p := os.Getenv("AGENTBOX_BIN"); p != "" {
		if _, err := os.Stat(p); err == nil {
			bins["agentbox"] = p // the CLI, as the Dockerfile copies it
		}
	}
	for name, src := range bins {
		copyInto(t, root, src, "/usr/local/bin/"+name)
	}
	copyLibs(t, root, kubeBin)
	for _, d := range []string{"tmp", "var/lib/agentbox", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.ImportImage(ctx, realDaemonImage, root, kubetest.ImageConfig{
		Entrypoint: []string{"/usr/local/bin/agentbox-kube"}, User: "65532:65532"}); err != nil {
		t.Fatalf("import the daemon image: %v", err)
	}
}

var (
	kubeBinOnce sync.Once
	kubeBinPath string
	kubeBinErr  error
)

// daemonKubeBinary is bin/agentbox-kube (next to AGENTBOX_BIN, as make
// build puts it), or one built for the test process.
func daemonKubeBinary(t *testing.T) string {
	t.Helper()
	kubeBinOnce.Do(func() {
		if p := os.Getenv("AGENTBOX_BIN"); p != "" {
			k := filepath.Join(filepath.Dir(p), "agentbox-kube")
			if _, err := os.Stat(k); err == nil {
				kubeBinPath = k
				return
			}
		}
		root, err := testutil.ModuleRoot()
		if err != nil {
			kubeBinErr = err
			return
		}
		dir, err := os.MkdirTemp("", "agentbox-kube-")
		if err != nil {
			kubeBinErr = err
			return
		}
		kubeBinPath = filepath.Join(dir, "agentbox-kube")
		cmd := exec.Command("go", "build", "-o", kubeBinPath, "./cmd/agentbox")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			kubeBinErr = fmt.Errorf("build agentbox-kube: %w: %s", err, out)
		}
	})
	if kubeBinErr != nil {
		t.Fatal(kubeBinErr)
	}
	if strings.HasPrefix(kubeBinPath, os.TempDir()) {
		t.Cleanup(func() { os.RemoveAll(filepath.Dir(kubeBinPath)) })
	}
	return kubeBinPath
}

// retargetSubjects points a RoleBinding's ServiceAccount subjects at ns.
func retargetSubjects(t *testing.T, o *unstructured.Unstructured, ns string) {
	t.Helper()
	subs, _, err := unstructured.NestedSlice(o.Object, "subjects")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
			m["namespace"] = ns
		}
	}
	if err := unstructured.SetNestedSlice(o.Object, subs, "subjects"); err != nil {
		t.Fatal(err)
	}
}

// patchDaemon points daemon.yaml's pod at the imported images and at the
// apiserver. What a real cluster gives a pod for "kubernetes.default.svc"
// — the Service's ClusterIP, routed by kube-proxy — this one has not (no
// service network), so the pod resolves that name (which the apiserver's
// certificate carries) to the node's address, where forwardAPIServer
// listens.
func patchDaemon(t *testing.T, ps *corev1.PodSpec, apiHost netip.Addr, apiPort int) {
	t.Helper()
	if len(ps.Containers) != 1 {
		t.Fatalf("daemon.yaml's pod has %d containers, want 1", len(ps.Containers))
	}
	c := &ps.Containers[0]
	c.Image, c.ImagePullPolicy = realDaemonImage, corev1.PullNever
	agentImage := false
	for i, ev := range c.Env {
		if ev.Name == "K8S_AGENT_IMAGE" {
			c.Env[i].Value, agentImage = realAgentImage, true
		}
	}
	if !agentImage {
		t.Fatal("daemon.yaml sets no K8S_AGENT_IMAGE")
	}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "kubernetes.default.svc"},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: strconv.Itoa(apiPort)})
	ps.HostAliases = append(ps.HostAliases, corev1.HostAlias{IP: apiHost.String(), Hostnames: []string{"kubernetes.default.svc"}})
}

// forwardAPIServer relays TCP from the node's address (the bridge's
// gateway, reachable from its pods) to the apiserver on loopback, until
// the test ends.
func forwardAPIServer(t *testing.T, e *realNodeEnv) (netip.Addr, int) {
	t.Helper()
	u, err := url.Parse(e.c.Server)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(e.node.Gateway.String(), "0"))
	if err != nil {
		t.Fatalf("listen on the node's address: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer in.Close()
				out, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer out.Close()
				track(in, true)
				track(out, true)
				defer track(in, false)
				defer track(out, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e.node.Gateway, ln.Addr().(*net.TCPAddr).Port
}

// daemonAPI calls the in-cluster daemon's HTTP API.
type daemonAPI struct {
	t   *testing.T
	url string
	key string
}

func (d *daemonAPI) call(method, path, key string, body any) (int, []byte) {
	d.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if _, ok := body.(map[string]any); ok {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		d.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, data
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("pod IP %q: %v", s, err)
	}
	return a
}

// podLog is a pod's log, through the apiserver and the
// node's kubelet API.
func podLog(c *kubetest.Cluster, ns, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tail := int64(1000) // the whole log of a short run
	b, err := c.Clientset.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}
