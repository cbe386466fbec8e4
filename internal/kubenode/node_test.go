package kubenode

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/testutil"
)

func TestMain(m *testing.M) {
	native.SealSelf()
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// env is a control plane with one agentbox node on it.
type env struct {
	c       *kubetest.Cluster
	node    *Node
	backend *native.Backend
	net     *netpolicy.Manager
	name    string
	// volumeDir holds the claims' directories, logDir generic pods' logs.
	volumeDir, logDir string
}

// startEnv starts the control plane, a native backend with sandbox
// networking on a bridge and subnet of the test's own, a template store
// holding a tiny image "tiny", and the node, whose identity has exactly
// the ClusterRole of deploy/kubernetes/node.yaml.
func startEnv(t *testing.T) *env {
	t.Helper()
	testutil.RequireRoot(t)
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	suffix := randHex(3)
	dir := testutil.ShortTempDir(t)
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 150 + byte(suffix[0])%40, byte(suffix[1]), 0}), 24)
	nm, err := netpolicy.New(ctx, netpolicy.Config{
		Bridge: "abkn" + hex.EncodeToString(suffix), Subnet: subnet,
		Upstream: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")},
		StateDir: filepath.Join(dir, "net"), NetnsDir: filepath.Join(dir, "netns"),
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatalf("netpolicy: %v", err)
	}
	t.Cleanup(func() {
		if err := nm.Close(true); err != nil {
			t.Errorf("close netpolicy: %v", err)
		}
	})
	nb, err := native.New(native.Config{Root: filepath.Join(dir, "n"), AgentPath: testutil.AgentBinary(t), Network: nm, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() {
		if err := nb.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	store, err := template.Open(ctx, filepath.Join(dir, "t"), template.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("template store: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.Import(ctx, tinyRootfs(t), "tiny", nil); err != nil {
		t.Fatalf("import the tiny image: %v", err)
	}

	name := "agentbox-test-node"
	_, rest := nodeIdentity(t, c, name)
	cert, key, err := c.ServingCert("kubelet-"+name, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, Config{
		NodeName: name, REST: rest, Backend: nb, Network: nm, Templates: store,
		Defaults: native.DefaultResources, VolumeDir: filepath.Join(dir, "vol"), LogDir: filepath.Join(dir, "logs"),
		Address: "127.0.0.1", Port: port, TLSCertFile: cert, TLSKeyFile: key, ClientCAFile: c.CAFile,
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := n.Stop(sctx); err != nil {
			t.Errorf("stop node: %v", err)
		}
	})
	return &env{c: c, node: n, backend: nb, net: nm, name: name, volumeDir: filepath.Join(dir, "vol"), logDir: filepath.Join(dir, "logs")}
}

// nodeIdentity issues the node a client certificate and binds it to the
// ClusterRole of deploy/kubernetes/node.yaml: what the manifest grants is
// what the node gets in the test.
func nodeIdentity(t *testing.T, c *kubetest.Cluster, name string) (string, *rest.Config) {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.ClusterRole
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var probe metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			t.Fatalf("node.yaml: %v", err)
		}
		if probe.Kind == "ClusterRole" {
			role = &rbacv1.ClusterRole{}
			if err := yaml.UnmarshalStrict([]byte(doc), role); err != nil {
				t.Fatalf("node.yaml ClusterRole: %v", err)
			}
		}
	}
	if role == nil {
		t.Fatal("node.yaml has no ClusterRole")
	}
	ctx := context.Background()
	if _, err := c.Clientset.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := "agentbox-node:" + name
	if _, err := c.Clientset.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agentbox-node"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path, cfg, err := c.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// TestAgentboxNode runs the kube backend's kind of pod on the node through
// the real control plane (scheduled by kube-scheduler, not bound by the
// test) and checks everything the contract promises: the node's taint, the
// pod Running with an IP, the agent at podIP:49983 with its token and
// refused without, exec and logs through the apiserver, and a delete that
// leaves no sandbox, process or mount behind. A generic pod runs its
// command with its exit code and output, and a pod that does not tolerate
// the taint is not scheduled here.
func TestAgentboxNode(t *testing.T) {
	e := startEnv(t)
	cs := e.c.Clientset
	ns := e.c.Namespace
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	node, err := cs.CoreV1().Nodes().Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasTaint(node, TaintKey, corev1.TaintEffectNoSchedule) {
		t.Fatalf("node taints %v, want %s:NoSchedule", node.Spec.Taints, TaintKey)
	}
	if node.Labels[LabelNode] != "true" || !nodeReady(node) {
		t.Fatalf("node labels %v, conditions %v", node.Labels, node.Status.Conditions)
	}

	token := randHex(16)
	tok := hex.EncodeToString(token)
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sbx-token"},
		Data:       map[string][]byte{"access-token": []byte(tok)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, sandboxPod("sbx", "sbx-token"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPod(t, ctx, cs, ns, "sbx", "Running with an IP", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && podReady(p)
	})
	if pod.Spec.NodeName != e.name {
		t.Fatalf("pod scheduled to %q, want %q", pod.Spec.NodeName, e.name)
	}
	if len(pod.Status.InitContainerStatuses) != 1 || pod.Status.InitContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("init container status %+v, want the installer terminated (skipped)", pod.Status.InitContainerStatuses)
	}
	id := sandboxID(string(pod.UID))
	if addr, ok := e.net.Addr(id); !ok || addr.String() != pod.Status.PodIP {
		t.Fatalf("pod IP %s, sandbox address %v %v", pod.Status.PodIP, addr, ok)
	}

	// The agent on the pod IP: /envs needs the token.
	agentURL := "http://" + pod.Status.PodIP + ":49983"
	if code := agentGet(t, agentURL+"/envs", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /envs without the token: %d, want 401", code)
	}
	if code := agentGet(t, agentURL+"/envs", "wrong"+tok); code != http.StatusUnauthorized {
		t.Fatalf("GET /envs with a wrong token: %d, want 401", code)
	}
	if code := agentGet(t, agentURL+"/envs", tok); code != http.StatusOK {
		t.Fatalf("GET /envs with the token: %d, want 200", code)
	}

	// Exec and logs through the apiserver and the node's kubelet API.
	out, errOut, err := execPod(ctx, e.c, ns, "sbx", []string{"/bin/sh", "-c", "read line; echo got:$line; echo oops >&2; exit 7"}, "hello\n")
	var exitErr interface{ ExitStatus() int }
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 7 {
		t.Fatalf("exec: err %v (want exit status 7), stdout %q stderr %q", err, out, errOut)
	}
	if out != "got:hello\n" || errOut != "oops\n" {
		t.Fatalf("exec stdout %q stderr %q", out, errOut)
	}
	// Port-forward through the apiserver reaches a port inside the sandbox.
	if code := portForwardGet(t, ctx, e.c, ns, "sbx", 49983, "/health"); code/100 != 2 {
		t.Fatalf("port-forward: the agent's /health answered %d", code)
	}

	// With a TTY the command runs in a terminal.
	tty, err := execTTY(ctx, e.c, ns, "sbx", []string{"/bin/sh", "-c", "test -t 0 && test -t 1 && echo on-a-tty"})
	if err != nil || !strings.Contains(tty, "on-a-tty") {
		t.Fatalf("exec with a TTY: %q, %v", tty, err)
	}
	logs, err := cs.CoreV1().Pods(ns).GetLogs("sbx", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "agent listening") {
		t.Fatalf("pod logs (err %v): %s", err, logs)
	}

	// The kubelet API itself: the apiserver's kubelet client may read the
	// log; a user of the cluster's CA without RBAC may not, nor may an
	// unauthenticated client.
	logPath := "/containerLogs/" + ns + "/sbx/sandbox"
	if code := e.kubeletGet(t, e.c.KubeletClientCertFile, e.c.KubeletClientKeyFile, logPath); code != http.StatusOK {
		t.Fatalf("kubelet API as the apiserver's kubelet client: %d, want 200", code)
	}
	_, _, err = e.c.UserKubeconfig("someone")
	if err != nil {
		t.Fatal(err)
	}
	userBase := filepath.Join(e.c.Dir, "user-someone")
	if code := e.kubeletGet(t, userBase+".crt", userBase+".key", logPath); code != http.StatusForbidden {
		t.Fatalf("kubelet API as a user without RBAC: %d, want 403", code)
	}
	if code := e.kubeletGet(t, "", "", logPath); code != http.StatusUnauthorized {
		t.Fatalf("kubelet API without credentials: %d, want 401", code)
	}

	// A generic pod runs its command; its output is its log.
	gen := genericPod("gen", []string{"/bin/sh", "-c", "echo out-line; echo err-line >&2; exit 3"})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, gen, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := waitPod(t, ctx, cs, ns, "gen", "Failed with exit 3", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	// An ended pod holds nothing: its sandbox is gone, its log stays.
	if _, err := e.backend.Inspect(ctx, sandboxID(string(g.UID))); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("sandbox of the ended pod gen: %v, want not found", err)
	}
	if cst := g.Status.ContainerStatuses; len(cst) != 1 || cst[0].State.Terminated == nil || cst[0].State.Terminated.ExitCode != 3 {
		t.Fatalf("generic pod container status %+v", g.Status.ContainerStatuses)
	}
	glogs, err := cs.CoreV1().Pods(ns).GetLogs("gen", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(glogs), "out-line") || !strings.Contains(string(glogs), "err-line") {
		t.Fatalf("generic pod logs (err %v): %q", err, glogs)
	}

	// Without the toleration nothing schedules here.
	plain := genericPod("untolerated", []string{"/bin/sh", "-c", "true"})
	plain.Spec.Tolerations = nil
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ctx, cs, ns, "untolerated", "Unschedulable", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})

	// Delete: the pod goes, and its sandbox with everything it had.
	info, err := e.backend.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sbx", "gen"} {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"sbx", "gen"} {
		waitGone(t, ctx, cs, ns, name)
	}
	// The ended pod is deleted from the node after the apiserver: its log
	// file goes then.
	genLog := filepath.Join(e.logDir, string(sandboxID(string(g.UID)))+".log")
	for i := 0; ; i++ {
		if _, err := os.Stat(genLog); os.IsNotExist(err) {
			break
		}
		if i == 300 {
			t.Fatalf("the deleted pod's log %s remains", genLog)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := e.backend.Inspect(ctx, id); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("sandbox %s after the pod's delete: %v, want not found", id, err)
	}
	if info.Pid > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", info.Pid)); err == nil {
			t.Fatalf("the sandbox's agent (pid %d) still runs", info.Pid)
		}
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(m, []byte(string(id))) {
		t.Fatalf("mounts of sandbox %s remain", id)
	}
	if _, ok := e.net.Addr(id); ok {
		t.Fatalf("sandbox %s still has a network address", id)
	}

	// A PVC at /workspace: the next pod of the claim finds the files; the
	// directory goes once the claim is gone. The test control plane binds
	// no claims (no PersistentVolume controller), so these pods name the
	// node instead of waiting for the scheduler.
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "ws"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimPod := func(name, script string) *corev1.Pod {
		p := genericPod(name, []string{"/bin/sh", "-c", script})
		p.Spec.NodeName = e.name
		p.Spec.Volumes = []corev1.Volume{{Name: "ws", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "ws"}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "ws", MountPath: "/workspace"}}
		return p
	}
	for i, step := range []struct{ name, script string }{
		{"ws-write", "echo kept > /workspace/f"},
		{"ws-read", "test \"$(cat /workspace/f)\" = kept"},
	} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, claimPod(step.name, step.script), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitPod(t, ctx, cs, ns, step.name, "Succeeded", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		if p.Status.Phase != corev1.PodSucceeded {
			l, _ := cs.CoreV1().Pods(ns).GetLogs(step.name, &corev1.PodLogOptions{}).DoRaw(ctx)
			t.Fatalf("claim pod %d (%s) %s: %+v %s", i, step.name, p.Status.Phase, p.Status.ContainerStatuses, l)
		}
		if i == 0 {
			if err := cs.CoreV1().Pods(ns).Delete(ctx, step.name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitGone(t, ctx, cs, ns, step.name)
		}
	}
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "ws", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimDir := filepath.Join(e.volumeDir, string(pvc.UID))
	if _, err := os.Stat(filepath.Join(claimDir, "f")); err != nil {
		t.Fatalf("the claim's directory: %v", err)
	}
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "ws", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "ws-read", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, cs, ns, "ws-read")
	// virtual-kubelet removes an ended pod from the apiserver first and
	// then deletes it from the node.
	for i := 0; ; i++ {
		if _, err := os.Stat(claimDir); os.IsNotExist(err) {
			break
		}
		if i == 300 {
			t.Fatal("the deleted claim's directory remains")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Stopping the node destroys the sandboxes of its pods and marks the
	// Node not ready.
	long := genericPod("long", []string{"/bin/sleep", "1000"})
	long.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, long, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lp := waitPod(t, ctx, cs, ns, "long", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	lid := sandboxID(string(lp.UID))
	if err := e.node.Stop(ctx); err != nil {
		t.Fatalf("stop the node: %v", err)
	}
	if _, err := e.backend.Inspect(ctx, lid); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("sandbox of pod long after the node stopped: %v, want not found", err)
	}
	if node, err := cs.CoreV1().Nodes().Get(ctx, e.name, metav1.GetOptions{}); err != nil || nodeReady(node) {
		t.Fatalf("node after stop: ready %v, err %v", err == nil && nodeReady(node), err)
	}
}

// sandboxPod is the kube backend's kind of pod: the agentbox label, the
// agent installer as init container, the agent as the command, its token
// from a Secret.
func sandboxPod(name, secret string) *corev1.Pod {
	f, tr := false, true
	uid := int64(1000)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelSandbox: name}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &f,
			RestartPolicy:                corev1.RestartPolicyNever,
			Tolerations:                  []corev1.Toleration{{Key: TaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			SecurityContext:              &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: &tr},
			InitContainers: []corev1.Container{{
				Name: "agent-install", Image: "agentbox/agent:test",
				Command:      []string{"/agentbox-agent", "install", "/opt/agentbox/agentbox-agent"},
				VolumeMounts: []corev1.VolumeMount{{Name: "agent", MountPath: "/opt/agentbox"}},
			}},
			Containers: []corev1.Container{{
				Name: "sandbox", Image: "tiny",
				Command: []string{"/opt/agentbox/agentbox-agent", "--listen", "tcp://0.0.0.0:49983", "--workdir", "/workspace"},
				Env: []corev1.EnvVar{{Name: "AGENTBOX_ACCESS_TOKEN", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "access-token"}}}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("500m")}},
				SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: &tr, AllowPrivilegeEscalation: &f,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "agent", MountPath: "/opt/agentbox", ReadOnly: true},
					{Name: "tmp", MountPath: "/tmp"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(64<<20, resource.BinarySI)}}},
			},
		},
	}
}

func genericPod(name string, cmd []string) *corev1.Pod {
	f := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &f,
			RestartPolicy:                corev1.RestartPolicyNever,
			Tolerations:                  []corev1.Toleration{{Key: TaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:                   []corev1.Container{{Name: "main", Image: "tiny", Command: cmd}},
		},
	}
}

func waitPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range evs.Items {
			t.Logf("event %s/%s: %s %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
	if last != nil {
		t.Fatalf("pod %s (node %q) not %s: phase %s reason %q message %q conditions %+v containers %+v", name,
			last.Spec.NodeName, what, last.Status.Phase, last.Status.Reason, last.Status.Message, last.Status.Conditions, last.Status.ContainerStatuses)
	}
	t.Fatalf("pod %s not %s: not found", name, what)
	return nil
}

func waitGone(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s still exists after its delete", name)
}

func execPod(ctx context.Context, c *kubetest.Cluster, ns, name string, cmd []string, stdin string) (string, string, error) {
	req := c.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: cmd, Stdin: stdin != "", Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(c.RESTConfig, http.MethodPost, req.URL())
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	err = ex.StreamWithContext(ctx, opts)
	return out.String(), errOut.String(), err
}

// execTTY runs cmd in a terminal of the pod and returns what it printed.
func execTTY(ctx context.Context, c *kubetest.Cluster, ns, name string, cmd []string) (string, error) {
	req := c.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: cmd, Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(c.RESTConfig, http.MethodPost, req.URL())
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	// The terminal's input stays open until the command ends.
	in, w := io.Pipe()
	defer w.Close()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: &out, Tty: true})
	return out.String(), err
}

// portForwardGet forwards a local port to the pod's port through the
// apiserver and the node's kubelet API, GETs path on it and returns the
// status.
func portForwardGet(t *testing.T, ctx context.Context, c *kubetest.Cluster, ns, name string, port int, path string) int {
	t.Helper()
	req := c.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("portforward")
	rt, upgrader, err := spdy.RoundTripperFor(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, req.URL())
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		<-errc
	}()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("port-forward: %v", err)
	case <-ctx.Done():
		t.Fatal("port-forward not ready")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("port-forward ports %v: %v", ports, err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d%s", ports[0].Local, path))
	if err != nil {
		t.Fatalf("GET %s through port-forward: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func agentGet(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// kubeletGet calls the node's kubelet API directly with a client
// certificate (none when certFile is empty) and returns the status.
func (e *env) kubeletGet(t *testing.T, certFile, keyFile, path string) int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.c.CAData)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d%s", e.node.cfg.Port, path))
	if err != nil {
		t.Fatalf("GET %s on the kubelet API: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// tinyRootfs is a root filesystem with a shell and a few tools of the
// host's (their libraries copied along): a small image to import.
func tinyRootfs(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, bin := range []string{"/bin/sh", "/bin/cat", "/bin/sleep", "/bin/ls", "/bin/echo"} {
		real, err := filepath.EvalSymlinks(bin)
		if err != nil {
			t.Fatal(err)
		}
		copyInto(t, root, real, bin)
		out, err := exec.Command("ldd", real).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", real, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					lib, err := filepath.EvalSymlinks(f)
					if err != nil {
						t.Fatal(err)
					}
					copyInto(t, root, lib, f)
				}
			}
		}
	}
	for _, d := range []string{"tmp", "workspace", "home/user", "etc", "proc", "dev", "sys", "opt/agentbox"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// copyInto copies the host file src to dst's path under root.
func copyInto(t *testing.T, root, src, dst string) {
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

func randHex(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
