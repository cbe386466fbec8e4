package kubetest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// TestCluster proves the harness's control plane is real and complete: the
// apiserver serves, the namespace has its default ServiceAccount, the
// agent-sandbox controller turns a Sandbox into a Pod, the CRDs' conversion
// webhook (the controller on loopback) converts to v1alpha1, a user from
// UserKubeconfig has only what RBAC grants, and Close leaves nothing.
func TestCluster(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := c.Clientset.CoreV1().ServiceAccounts(c.Namespace).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("default ServiceAccount: %v", err)
	}
	if v, err := c.Clientset.Discovery().ServerVersion(); err != nil || !strings.HasPrefix(v.GitVersion, "v1.") {
		t.Fatalf("server version %v: %v", v, err)
	}
	b, err := os.ReadFile(c.KubeconfigPath)
	if err != nil || !strings.Contains(string(b), c.Server) {
		t.Fatalf("kubeconfig %s does not name %s: %v", c.KubeconfigPath, c.Server, err)
	}

	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": "harness", "namespace": c.Namespace},
		"spec": map[string]any{
			"podTemplate": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "harness"}},
				"spec": map[string]any{
					"containers": []any{map[string]any{"name": "main", "image": "example.invalid/none:1"}},
				},
			},
		},
	}}
	if _, err := dyn.Resource(gvr).Namespace(c.Namespace).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Sandbox: %v", err)
	}
	// The controller creates the Sandbox's pod (it stays Pending: no node).
	var pod *corev1.Pod
	if err := poll(ctx, 90*time.Second, "the controller's pod for the Sandbox", func() error {
		p, err := c.Clientset.CoreV1().Pods(c.Namespace).Get(ctx, "harness", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		return nil
	}); err != nil {
		t.Fatalf("%v\ncontroller log:\n%s", err, c.Log("agent-sandbox-controller", 30))
	}
	if pod.Labels["app"] != "harness" {
		t.Fatalf("pod labels %v, want the template's app=harness", pod.Labels)
	}
	// The stored v1beta1 object read as v1alpha1 goes through the webhook.
	old := schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1alpha1", Resource: "sandboxes"}
	got, err := dyn.Resource(old).Namespace(c.Namespace).Get(ctx, "harness", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Sandbox as v1alpha1 (conversion webhook): %v", err)
	}
	if got.GetAPIVersion() != "agents.x-k8s.io/v1alpha1" {
		t.Fatalf("converted apiVersion %q", got.GetAPIVersion())
	}

	// A certificate user without RBAC grants is forbidden.
	_, cfg, err := c.UserKubeconfig("someone", "some-group")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list pods as an unbound user: %v, want Forbidden", err)
	}

	dir := c.Dir
	pids := []int{}
	for _, p := range c.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	c.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after Close: %v", dir, err)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + itoa(pid)); err == nil {
			if b, _ := os.ReadFile("/proc/" + itoa(pid) + "/stat"); !strings.Contains(string(b), ") Z") {
				t.Fatalf("process %d still runs after Close", pid)
			}
		}
	}
}

// TestToolsDirMatchesScript checks the Go key against the script's
// (scripts/k8s-tools.sh --dir), so the harness finds what make k8s-tools
// built.
func TestToolsDirMatchesScript(t *testing.T) {
	if os.Getenv("AGENTBOX_K8S_TOOLS") != "" {
		t.Skip("AGENTBOX_K8S_TOOLS overrides the computed directory")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := runScript(root+"/scripts/k8s-tools.sh", "--dir")
	if err != nil {
		t.Fatalf("k8s-tools.sh --dir: %v", err)
	}
	got, err := ToolsDir()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != got {
		t.Fatalf("ToolsDir() = %s, scripts/k8s-tools.sh --dir = %s", got, out)
	}
}
