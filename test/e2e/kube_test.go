package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	sdk "github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/backend/kube"
	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/testutil"
)

// The daemon on Kubernetes, end to end: a real control plane (kubetest)
// with the agent-sandbox controller, the real `agentbox node` binary as
// its node, and the real `agentbox serve` binary with
// CONTAINER_DEPLOYMENT=k8s, driven through its HTTP API only; the
// cluster's objects are read to check what the daemon made.

// kubeImage is the node's template the tests' pods run; kubePythonImage
// the same with the host's python3 (code contexts).
const (
	kubeImage       = "abtest"
	kubePythonImage = "abpython"
)

// kubeEnv is a control plane with an agentbox node on it.
type kubeEnv struct {
	c  *kubetest.Cluster
	cl client.Client
}

func startKubeEnv(t *testing.T) *kubeEnv {
	t.Helper()
	testutil.RequireRoot(t)
	daemonBin, agentBin := binaries(t)
	c := kubetest.Start(t)
	c.BindClaims(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dir := testutil.ShortTempDir(t)
	tmplDir := filepath.Join(dir, "templates")
	store, err := template.Open(ctx, tmplDir, template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(ctx, hostBinRootfs(t), kubeImage, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(ctx, hostPythonRootfs(t), kubePythonImage, nil); err != nil {
		t.Fatal(err)
	}
	store.Close()

	name := "agentbox-e2e-node"
	cert, key, err := c.ServingCert("kubelet-"+name, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 3)
	rand.Read(suffix)
	var out testutil.SyncBuffer
	cmd := exec.Command(daemonBin, "node")
	cmd.Env = append(cleanEnv(),
		"AGENTBOX_DATA_DIR="+filepath.Join(dir, "d"), "AGENT_PATH="+agentBin, "TEMPLATE_DIR="+tmplDir,
		"NETWORK=on", "NETWORK_BRIDGE=abke"+hex.EncodeToString(suffix),
		fmt.Sprintf("NETWORK_SUBNET=10.%d.%d.0/24", 190+int(suffix[0])%40, suffix[1]),
		"KUBE_NODE_NAME="+name, "KUBE_NODE_KUBECONFIG="+c.KubeconfigPath, "KUBE_NODE_ADDRESS=127.0.0.1",
		fmt.Sprintf("KUBE_NODE_PORT=%d", freePort(t)), "KUBE_NODE_TLS_CERT="+cert, "KUBE_NODE_TLS_KEY="+key,
		"KUBE_NODE_CLIENT_CA="+c.CAFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("agentbox node did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("agentbox node log (last lines):\n%s", lastLines(out.String(), 300))
		}
	})
	// controller-runtime's client wants a logger set before its first use.
	ctrllog.SetLogger(logr.Discard())
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	kubeWait(t, 90*time.Second, "the agentbox node is ready", func() (bool, error) {
		select {
		case <-exited:
			t.Fatalf("agentbox node exited:\n%s", out.String())
		default:
		}
		n, err := c.Clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %+v", n.Status.Conditions)
	})
	return &kubeEnv{c: c, cl: cl}
}

// daemonSettings run the daemon's sandbox type base as kube:abtest on the
// cluster under K8S_INSTANCE instance.
func (e *kubeEnv) daemonSettings(instance string, extra ...string) []string {
	return append([]string{
		"CONTAINER_DEPLOYMENT=k8s", "K8S_NAMESPACE=" + e.c.Namespace, "KUBECONFIG_PATH=" + e.c.KubeconfigPath,
		"K8S_AGENT_IMAGE=agentbox-agent:test", "K8S_INSTANCE=" + instance,
		`SANDBOX_TEMPLATES={"base":"kube:` + kubeImage + `","py":"kube:` + kubePythonImage + `"}`, "DEFAULT_SANDBOX_TYPE=base",
		"NETWORK=off", "DEFAULT_CPUS=0.1", "AUTO_CLEANUP=false", "API_KEYS=" + kubeKey + ":" + kubeUser, "TEMPLATE_ADMIN_USERS=" + kubeUser,
	}, extra...)
}

const (
	kubeKey  = "k-kube-op"
	kubeUser = "op"
)

// objectsOf counts what of sandbox id (by label) exists in the namespace.
func (e *kubeEnv) objectsOf(ctx context.Context, id string) (map[string]int, error) {
	sel := client.MatchingLabels{kube.LabelSandbox: id}
	lists := map[string]client.ObjectList{
		"Sandbox": &sbv1.SandboxList{}, "SandboxClaim": &extv1.SandboxClaimList{}, "Pod": &corev1.PodList{},
		"Secret": &corev1.SecretList{}, "PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{},
		"NetworkPolicy": &networkingv1.NetworkPolicyList{},
	}
	out := map[string]int{}
	for kind, l := range lists {
		if err := e.cl.List(ctx, l, client.InNamespace(e.c.Namespace), sel); err != nil {
			return nil, fmt.Errorf("list %s: %w", kind, err)
		}
		if n := metaLen(l); n > 0 {
			out[kind] = n
		}
	}
	return out, nil
}

func metaLen(l client.ObjectList) int {
	switch l := l.(type) {
	case *sbv1.SandboxList:
		return len(l.Items)
	case *extv1.SandboxClaimList:
		return len(l.Items)
	case *corev1.PodList:
		return len(l.Items)
	case *corev1.SecretList:
		return len(l.Items)
	case *corev1.PersistentVolumeClaimList:
		return len(l.Items)
	case *networkingv1.NetworkPolicyList:
		return len(l.Items)
	}
	return 0
}

// sandboxName is the name of sandbox id's Sandbox (and pod): ab-ID, or
// the pool's Sandbox its SandboxClaim got.
func (e *kubeEnv) sandboxName(t *testing.T, id string) string {
	t.Helper()
	var claim extv1.SandboxClaim
	err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: e.c.Namespace, Name: "ab-" + id}, &claim)
	switch {
	case apierrors.IsNotFound(err):
		return "ab-" + id
	case err != nil:
		t.Fatal(err)
	case claim.Status.SandboxStatus.Name == "":
		t.Fatalf("SandboxClaim of %s has no Sandbox", id)
	}
	return claim.Status.SandboxStatus.Name
}

// waitGone waits until nothing of sandbox id is left in the cluster: no
// object labelled with it, and no pod of its Sandbox pod (the pod of a
// pool's Sandbox keeps the pool's labels). Call it while the sandbox
// still exists.
func (e *kubeEnv) waitGone(t *testing.T, id string) (wait func()) {
	t.Helper()
	ctx := context.Background()
	pods := []string{e.sandboxName(t, id)}
	return func() {
		t.Helper()
		kubeWait(t, 90*time.Second, "nothing of sandbox "+id+" is left", func() (bool, error) {
			objs, err := e.objectsOf(ctx, id)
			if err != nil {
				return false, err
			}
			for _, name := range pods {
				var pod corev1.Pod
				err := e.cl.Get(ctx, client.ObjectKey{Namespace: e.c.Namespace, Name: name}, &pod)
				if err == nil {
					objs["Pod "+name]++
				} else if !apierrors.IsNotFound(err) {
					return false, err
				}
			}
			return len(objs) == 0, fmt.Errorf("left %v", objs)
		})
	}
}

// execPod runs sh -c script in pod name through the apiserver (the
// node's kubelet API), as kubectl exec does.
func (e *kubeEnv) execPod(ctx context.Context, name, script string) (string, string, error) {
	req := e.c.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.c.Namespace).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"/bin/sh", "-c", script}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.c.RESTConfig, http.MethodPost, req.URL())
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}

// kubeWait polls cond every 50ms until it holds, failing t after limit.
func kubeWait(t *testing.T, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s (last: %v)", what, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poolStats returns GET /v1/pools' entry of template, asked with key.
func poolStats(t *testing.T, d *daemon, key, template string) map[string]any {
	t.Helper()
	code, body := d.call(t, "GET", "/v1/pools", key, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/pools = %d %s", code, body)
	}
	var resp struct {
		Pools []map[string]any `json:"pools"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Pools {
		if p["template"] == template {
			return p
		}
	}
	t.Fatalf("no pool of %s in %s", template, body)
	return nil
}

// createSandbox creates a sandbox through the API and returns its JSON.
func createSandbox(t *testing.T, d *daemon, body map[string]any) map[string]any {
	t.Helper()
	code, resp := d.call(t, "POST", "/v1/sandboxes", kubeKey, body)
	if code != http.StatusCreated {
		t.Fatalf("create %v = %d %s", body, code, resp)
	}
	return mustJSON(t, resp)
}

// execOut runs sh -c script in sandbox id and returns its stdout, failing
// on a non-zero exit.
func execOut(t *testing.T, d *daemon, id, script string) string {
	t.Helper()
	code, resp := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", kubeKey, map[string]any{"cmd": []string{"/bin/sh", "-c", script}})
	if code != http.StatusOK {
		t.Fatalf("exec %q in %s = %d %s", script, id, code, resp)
	}
	r := mustJSON(t, resp)
	if r["exit_code"] != float64(0) {
		t.Fatalf("exec %q in %s: %s", script, id, resp)
	}
	return r["stdout"].(string)
}

// TestKubeDaemon: the daemon's warm pool on kube is agent-sandbox's (a
// SandboxWarmPool; a hit is a SandboxClaim) and counted as native pools
// are; a restarted daemon recovers its kube sandboxes, running and
// stopped, with their workspaces; AUTO_CLEANUP leaves nothing of the
// daemon in the cluster.
func TestKubeDaemon(t *testing.T) {
	e := startKubeEnv(t)
	const instance = "e2e"
	const template = "kube:" + kubeImage
	d := startDaemon(t, e.daemonSettings(instance, "POOL_SIZE=1")...)
	ctx := context.Background()
	var poolUID string

	t.Run("PoolClaim", func(t *testing.T) {
		kubeWait(t, 2*time.Minute, "the warm pool has a ready sandbox", func() (bool, error) {
			p := poolStats(t, d, kubeKey, template)
			return p["ready"] == float64(1), fmt.Errorf("pool %v", p)
		})
		if p := poolStats(t, d, kubeKey, template); p["size"] != float64(1) || p["hits"] != float64(0) {
			t.Fatalf("pool before a hit: %v", p)
		}
		// The pool is agent-sandbox's, of this daemon's instance.
		var pools extv1.SandboxWarmPoolList
		if err := e.cl.List(ctx, &pools, client.InNamespace(e.c.Namespace), client.MatchingLabels{kube.LabelInstance: instance}); err != nil || len(pools.Items) != 1 || *pools.Items[0].Spec.Replicas != 1 {
			t.Fatalf("SandboxWarmPools of the daemon: %+v, %v", pools.Items, err)
		}
		poolUID = string(pools.Items[0].UID)
		sb := createSandbox(t, d, map[string]any{"template": "base", "env": map[string]string{"WHO": "erin"}})
		id := sb["id"].(string)
		if sb["from_pool"] != true {
			t.Fatalf("created %v, want a pool hit", sb)
		}
		// Handed out through a SandboxClaim on the daemon's pool.
		var claim extv1.SandboxClaim
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: e.c.Namespace, Name: "ab-" + id}, &claim); err != nil {
			t.Fatalf("the hit's SandboxClaim: %v", err)
		}
		if claim.Spec.WarmPoolRef.Name != pools.Items[0].Name || claim.Status.SandboxStatus.Name == "" {
			t.Fatalf("claim %+v, want one on %s, bound", claim, pools.Items[0].Name)
		}
		if out := execOut(t, d, id, `echo "$WHO"; id -u`); out != "erin\n1000\n" {
			t.Fatalf("exec in the pool hit = %q", out)
		}
		if p := poolStats(t, d, kubeKey, template); p["hits"] != float64(1) || p["misses"] != float64(0) {
			t.Fatalf("pool after a hit: %v", p)
		}
		// The hand-out replaced the pool's token with the sandbox's own
		// (POST /init); exec through the apiserver and the node's kubelet
		// API still works.
		if out, errOut, err := e.execPod(ctx, claim.Status.SandboxStatus.Name, "echo kubelet-exec; id -u"); err != nil || out != "kubelet-exec\n1000\n" {
			t.Fatalf("kubectl exec into the handed-out pod: %q %q %v", out, errOut, err)
		}
		// The controller boots a replacement.
		kubeWait(t, 2*time.Minute, "the warm pool is refilled", func() (bool, error) {
			p := poolStats(t, d, kubeKey, template)
			return p["ready"] == float64(1), fmt.Errorf("pool %v", p)
		})
		gone := e.waitGone(t, id)
		if code, resp := d.call(t, "DELETE", "/v1/sandboxes/"+id, kubeKey, nil); code != http.StatusNoContent {
			t.Fatalf("delete = %d %s", code, resp)
		}
		gone()
	})

	t.Run("CodeContext", func(t *testing.T) {
		sb := createSandbox(t, d, map[string]any{"template": "py"})
		id := sb["id"].(string)
		gone := e.waitGone(t, id)
		c := d.sdk(t, kubeKey)
		cc, err := c.CreateCodeContext(ctx, id, "python", "")
		if err != nil {
			t.Fatalf("create a python context in a kube sandbox: %v", err)
		}
		if r, err := c.RunCode(ctx, id, sdk.CodeRequest{ContextID: cc.ID, Code: "import sys\nx = 41\nprint('set', sys.version_info[0])"}); err != nil || r.Error != nil || r.Stdout != "set 3\n" {
			t.Fatalf("first run: %+v, %v", r, err)
		}
		r, err := c.RunCode(ctx, id, sdk.CodeRequest{ContextID: cc.ID, Code: "x + 1"})
		if err != nil || r.Error != nil || len(r.Results) != 1 || r.Results[0].Text != "42" {
			t.Fatalf("the context kept x: %+v, %v", r, err)
		}
		// Another context does not share it.
		other, err := c.CreateCodeContext(ctx, id, "python", "")
		if err != nil {
			t.Fatal(err)
		}
		if r, err := c.RunCode(ctx, id, sdk.CodeRequest{ContextID: other.ID, Code: "x"}); err != nil || r.Error == nil || r.Error.Name != "NameError" {
			t.Fatalf("x in another context: %+v, %v", r, err)
		}
		if code, resp := d.call(t, "DELETE", "/v1/sandboxes/"+id, kubeKey, nil); code != http.StatusNoContent {
			t.Fatalf("delete = %d %s", code, resp)
		}
		gone()
	})

	t.Run("RestartRecover", func(t *testing.T) {
		// One cold (resources other than the pool's), one from the pool.
		cold := createSandbox(t, d, map[string]any{"template": "base", "resources": map[string]any{"cpus": 0.2}})
		kubeWait(t, 2*time.Minute, "the warm pool has a ready sandbox", func() (bool, error) {
			p := poolStats(t, d, kubeKey, template)
			return p["ready"] == float64(1), fmt.Errorf("pool %v", p)
		})
		hit := createSandbox(t, d, map[string]any{"template": "base"})
		if cold["from_pool"] == true || hit["from_pool"] != true {
			t.Fatalf("created %v and %v, want one cold and one pool hit", cold, hit)
		}
		running, stopped := cold["id"].(string), hit["id"].(string)
		for _, id := range []string{running, stopped} {
			execOut(t, d, id, "echo kept-"+id+" > /workspace/keep.txt")
		}
		if code, resp := d.call(t, "POST", "/v1/sandboxes/"+stopped+"/stop", kubeKey, map[string]any{}); code != http.StatusOK {
			t.Fatalf("stop = %d %s", code, resp)
		}

		restart(t, d)

		code, resp := d.call(t, "GET", "/v1/sandboxes", kubeKey, nil)
		if code != http.StatusOK {
			t.Fatalf("list = %d %s", code, resp)
		}
		states := map[string]string{}
		var list struct {
			Sandboxes []map[string]any `json:"sandboxes"`
		}
		if err := json.Unmarshal(resp, &list); err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Sandboxes {
			states[s["id"].(string)], _ = s["state"].(string)
		}
		if len(states) != 2 || states[running] != "running" || states[stopped] != "stopped" {
			t.Fatalf("after the restart: %v, want %s running and %s stopped", states, running, stopped)
		}
		if out := execOut(t, d, running, "cat /workspace/keep.txt"); out != "kept-"+running+"\n" {
			t.Fatalf("recovered running sandbox's file = %q", out)
		}
		if code, resp := d.call(t, "POST", "/v1/sandboxes/"+stopped+"/start", kubeKey, map[string]any{}); code != http.StatusOK {
			t.Fatalf("start = %d %s", code, resp)
		}
		if out := execOut(t, d, stopped, "cat /workspace/keep.txt"); out != "kept-"+stopped+"\n" {
			t.Fatalf("restarted sandbox's file = %q", out)
		}
		for _, id := range []string{running, stopped} {
			gone := e.waitGone(t, id)
			if code, resp := d.call(t, "DELETE", "/v1/sandboxes/"+id, kubeKey, nil); code != http.StatusNoContent {
				t.Fatalf("delete %s = %d %s", id, code, resp)
			}
			gone()
		}
	})

	t.Run("AutoCleanup", func(t *testing.T) {
		// The restarted daemon found its pool again: still one.
		var pools extv1.SandboxWarmPoolList
		if err := e.cl.List(ctx, &pools, client.InNamespace(e.c.Namespace), client.MatchingLabels{kube.LabelInstance: instance}); err != nil || len(pools.Items) != 1 || string(pools.Items[0].UID) != poolUID {
			t.Fatalf("SandboxWarmPools after a restart: %+v, %v; want the one made first (%s)", pools.Items, err, poolUID)
		}
		left := createSandbox(t, d, map[string]any{"template": "base"})
		gone := e.waitGone(t, left["id"].(string))
		d.env = append(d.env, "AUTO_CLEANUP=true")
		restart(t, d)
		d.stop()
		gone()
		kubeWait(t, 90*time.Second, "nothing of the daemon is left in the cluster", func() (bool, error) {
			var sbs sbv1.SandboxList
			var wps extv1.SandboxWarmPoolList
			var tmpls extv1.SandboxTemplateList
			var pods corev1.PodList
			for _, l := range []client.ObjectList{&sbs, &wps, &tmpls, &pods} {
				if err := e.cl.List(ctx, l, client.InNamespace(e.c.Namespace)); err != nil {
					return false, err
				}
			}
			n := len(sbs.Items) + len(wps.Items) + len(tmpls.Items) + len(pods.Items)
			return n == 0, fmt.Errorf("%d Sandboxes, %d SandboxWarmPools, %d SandboxTemplates, %d pods", len(sbs.Items), len(wps.Items), len(tmpls.Items), len(pods.Items))
		})
	})
}

// restart stops the daemon and starts it again with d.env; the stopped
// run's log is shown when t fails.
func restart(t *testing.T, d *daemon) {
	t.Helper()
	d.stop()
	prev := d.logs.String()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of the daemon before its restart (last lines):\n%s", lastLines(prev, 80))
		}
	})
	d.start()
}

// hostBinRootfs is a tiny image of the host's shell tools and their
// libraries.
func hostBinRootfs(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	addHostBins(t, root)
	return root
}

// hostPythonRootfs is hostBinRootfs with the host's /usr/bin/python3 (the
// Debian python a host sandbox gets) and its standard library: enough for
// the agent's built-in python driver of code contexts.
func hostPythonRootfs(t *testing.T) string {
	t.Helper()
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatalf("needs the host's /usr/bin/python3 (scripts/install-deps.sh installs it): %v", err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	addHostBins(t, root)
	stdlib := filepath.Join("/usr/lib", filepath.Base(py)) // /usr/lib/python3.11
	skip := map[string]bool{"test": true, "idlelib": true, "tkinter": true, "turtledemo": true, "ensurepip": true,
		"lib2to3": true, "pydoc_data": true, "__pycache__": true, "site-packages": true, "dist-packages": true}
	var libs []string
	err = filepath.WalkDir(stdlib, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skip[d.Name()] || strings.HasPrefix(d.Name(), "config-") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			copyHostFile(t, root, path, path)
			if strings.HasSuffix(path, ".so") {
				libs = append(libs, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	copyHostFile(t, root, py, py)
	if err := os.Symlink(filepath.Base(py), filepath.Join(root, "usr/bin/python3")); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(libs, py) {
		copyLibs(t, root, f)
	}
	return root
}

// copyHostFile copies the host file src to dst's path under root.
func copyHostFile(t *testing.T, root, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(root, dst)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// copyLibs copies the shared libraries ldd names for the host file f.
func copyLibs(t *testing.T, root, f string) {
	t.Helper()
	out, err := exec.Command("ldd", f).Output()
	if err != nil {
		return // static
	}
	for _, w := range strings.Fields(string(out)) {
		if strings.HasPrefix(w, "/") {
			lib, err := filepath.EvalSymlinks(w)
			if err != nil {
				t.Fatal(err)
			}
			copyHostFile(t, root, lib, w)
		}
	}
}

// addHostBins copies the host's shell tools and their libraries to root,
// with the directories a sandbox image needs.
func addHostBins(t *testing.T, root string) {
	t.Helper()
	for _, bin := range []string{"/bin/sh", "/bin/cat", "/bin/sleep", "/bin/ls", "/bin/echo", "/usr/bin/id"} {
		real, err := filepath.EvalSymlinks(bin)
		if err != nil {
			t.Fatal(err)
		}
		copyHostFile(t, root, real, bin)
		copyLibs(t, root, real)
	}
	for _, dir := range []string{"tmp", "workspace", "home/user", "etc", "proc", "dev", "sys", "opt/agentbox", "root"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
