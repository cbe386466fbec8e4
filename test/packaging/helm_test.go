package packaging

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentbox/agentbox/internal/backend/kube"
	"github.com/agentbox/agentbox/internal/kubetest"
)

// helmBinary is Helm built from the Go module proxy into the test cache by
// scripts/helm-tool.sh (scripts/test.sh builds it and sets AGENTBOX_HELM
// and AGENTBOX_REQUIRE_HELM); without it the chart's tests skip.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AGENTBOX_HELM"); p != "" {
		return p
	}
	out, err := exec.Command(filepath.Join(repoRoot(t), "scripts", "helm-tool.sh"), "--path").Output()
	if p := strings.TrimSpace(string(out)); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("AGENTBOX_REQUIRE_HELM") != "" {
		t.Fatal("no helm binary, and AGENTBOX_REQUIRE_HELM is set: scripts/helm-tool.sh builds it")
	}
	t.Skip("needs helm: scripts/helm-tool.sh builds it into the test cache")
	return ""
}

const chartNamespace = "agentbox"

// kubeVersion is the test control plane's (tools/k8s): helm template and
// lint check the chart's kubeVersion against it, not against the version
// a Helm built without its release ldflags assumes (1.20).
const kubeVersion = "1.36.0"

// helmTemplate renders the chart with --set values and returns its objects.
func helmTemplate(t *testing.T, helm string, set ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	args := []string{"template", "ab", filepath.Join(repoRoot(t), "deploy", "helm", "agentbox"), "--namespace", chartNamespace, "--kube-version", kubeVersion}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm, args...)
	cmd.Env = helmEnv(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	return decodeManifests(bytes.NewReader(out))
}

// helmEnv keeps Helm's cache, config and data out of the user's home.
func helmEnv(t *testing.T) []string {
	dir := t.TempDir()
	return append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
}

func decodeManifests(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func readManifestFile(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := decodeManifests(f)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	return nil
}

func field(t *testing.T, o *unstructured.Unstructured, path ...string) any {
	t.Helper()
	if o == nil {
		t.Fatalf("no object for %v", path)
	}
	v, ok, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s %s: no %v (%v)", o.GetKind(), o.GetName(), path, err)
	}
	return v
}

func container(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs := field(t, o, "spec", "template", "spec", "containers").([]any)
	if len(cs) != 1 {
		t.Fatalf("%s %s has %d containers", o.GetKind(), o.GetName(), len(cs))
	}
	return cs[0].(map[string]any)
}

func envNames(c map[string]any) []string {
	var names []string
	for _, e := range c["env"].([]any) {
		names = append(names, e.(map[string]any)["name"].(string))
	}
	return names
}

// TestHelmChart: deploy/helm/agentbox lints and renders; it refuses a
// release without API keys and values that would override what it sets
// itself; its objects keep what deploy/kubernetes says (the daemon's Role,
// its locked-down pod, the node's ClusterRole and privileges); and the
// whole rendering (node and persistence on) applies to the test control
// plane (its privileged DaemonSet refused for that alone), where the Role
// it grants the daemon's ServiceAccount is enough for the kube backend to
// start in the release's namespace and not in another.
func TestHelmChart(t *testing.T) {
	helm := helmBinary(t)
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "agentbox")
	lint := exec.Command(helm, "lint", "--strict", chart, "--kube-version", kubeVersion, "--set", "apiKeys.value=k1:alice")
	lint.Env = helmEnv(t)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}

	if _, err := helmTemplate(t, helm); err == nil || !strings.Contains(err.Error(), "apiKeys") {
		t.Errorf("a release without API keys: %v, want a refusal naming apiKeys", err)
	}
	if _, err := helmTemplate(t, helm, "apiKeys.value=k1:alice", "env.HOST=127.0.0.1"); err == nil || !strings.Contains(err.Error(), "env.HOST") {
		t.Errorf("env.HOST: %v, want a refusal (the chart sets HOST)", err)
	}

	base, err := helmTemplate(t, helm, "apiKeys.value=k1:alice")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range base {
		kinds = append(kinds, o.GetKind())
		if o.GetNamespace() != chartNamespace {
			t.Errorf("%s %s is in namespace %q, want the release's", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	if want := []string{"ServiceAccount", "Secret", "PersistentVolumeClaim", "Role", "RoleBinding", "Service", "Deployment"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("default rendering: %v, want %v", kinds, want)
	}
	if existing, err := helmTemplate(t, helm, "apiKeys.existingSecret=mine"); err != nil || find(existing, "Secret") != nil {
		t.Errorf("apiKeys.existingSecret: %v, want no Secret of the chart's", err)
	}

	// What deploy/kubernetes says, the chart says.
	rbac := readManifestFile(t, "deploy/kubernetes/rbac.yaml")
	if got, want := field(t, find(base, "Role"), "rules"), field(t, find(rbac, "Role"), "rules"); !reflect.DeepEqual(got, want) {
		t.Errorf("the chart's Role:\n%v\nwant deploy/kubernetes/rbac.yaml's:\n%v", got, want)
	}
	daemon := readManifestFile(t, "deploy/kubernetes/daemon.yaml")
	cd, md := find(base, "Deployment"), find(daemon, "Deployment")
	for _, p := range [][]string{{"spec", "template", "spec", "securityContext"}, {"spec", "replicas"}, {"spec", "strategy"}} {
		if got, want := field(t, cd, p...), field(t, md, p...); !reflect.DeepEqual(got, want) {
			t.Errorf("Deployment %v: %v, want daemon.yaml's %v", p, got, want)
		}
	}
	if got, want := container(t, cd)["securityContext"], container(t, md)["securityContext"]; !reflect.DeepEqual(got, want) {
		t.Errorf("daemon container securityContext: %v, want daemon.yaml's %v", got, want)
	}
	if got, want := envNames(container(t, cd)), envNames(container(t, md)); !reflect.DeepEqual(got, want) {
		t.Errorf("daemon env: %v, want daemon.yaml's %v", got, want)
	}
	// The data dir is on a claim by default, as in daemon.yaml: a
	// restarted pod takes its sandboxes back from the records there.
	for name, d := range map[string]*unstructured.Unstructured{"the chart": cd, "daemon.yaml": md} {
		vols := field(t, d, "spec", "template", "spec", "volumes").([]any)
		if data := vols[0].(map[string]any); data["name"] != "data" || data["persistentVolumeClaim"] == nil {
			t.Errorf("%s: data volume %v, want a persistentVolumeClaim", name, data)
		}
	}
	if find(daemon, "PersistentVolumeClaim") == nil {
		t.Error("daemon.yaml has no PersistentVolumeClaim for the data dir")
	}
	if off, err := helmTemplate(t, helm, "apiKeys.value=k1:alice", "persistence.enabled=false"); err != nil || find(off, "PersistentVolumeClaim") != nil {
		t.Errorf("persistence.enabled=false: %v, want no claim", err)
	} else if data := field(t, find(off, "Deployment"), "spec", "template", "spec", "volumes").([]any)[0].(map[string]any); data["emptyDir"] == nil {
		t.Errorf("persistence.enabled=false: data volume %v, want an emptyDir", data)
	}
	if l := field(t, cd, "spec", "template", "metadata", "labels").(map[string]any); l["agentbox.dev/role"] != "daemon" {
		t.Errorf("daemon pods are not labelled agentbox.dev/role=daemon (sandbox NetworkPolicies admit that role): %v", l)
	}

	full, err := helmTemplate(t, helm, "apiKeys.value=k1:alice", "node.enabled=true", "persistence.enabled=true",
		"env.POOL_SIZE=2", "instance=chart")
	if err != nil {
		t.Fatal(err)
	}
	node := readManifestFile(t, "deploy/kubernetes/node.yaml")
	if got, want := field(t, find(full, "ClusterRole"), "rules"), field(t, find(node, "ClusterRole"), "rules"); !reflect.DeepEqual(got, want) {
		t.Errorf("the node's ClusterRole:\n%v\nwant deploy/kubernetes/node.yaml's:\n%v", got, want)
	}
	cn, mn := find(full, "DaemonSet"), find(node, "DaemonSet")
	for _, p := range []string{"hostNetwork", "hostPID", "nodeSelector"} {
		if got, want := field(t, cn, "spec", "template", "spec", p), field(t, mn, "spec", "template", "spec", p); !reflect.DeepEqual(got, want) {
			t.Errorf("DaemonSet %s: %v, want node.yaml's %v", p, got, want)
		}
	}
	if got, want := container(t, cn)["securityContext"], container(t, mn)["securityContext"]; !reflect.DeepEqual(got, want) {
		t.Errorf("node container securityContext: %v, want node.yaml's %v", got, want)
	}
	if got, want := envNames(container(t, cn)), envNames(container(t, mn)); !reflect.DeepEqual(got, want) {
		t.Errorf("node env: %v, want node.yaml's %v", got, want)
	}
	vols := field(t, find(full, "Deployment"), "spec", "template", "spec", "volumes").([]any)
	if pvc := vols[0].(map[string]any)["persistentVolumeClaim"]; pvc == nil || find(full, "PersistentVolumeClaim") == nil {
		t.Errorf("persistence.enabled: data volume %v, want the chart's claim", vols[0])
	}

	// Applied to a real apiserver.
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.CreateNamespace(ctx, chartNamespace); err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(logr.Discard()) // the client's log would go nowhere, with a warning
	admin, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range full {
		err := admin.Create(ctx, o)
		if o.GetKind() == "DaemonSet" {
			// The node runs privileged, which the test control plane
			// refuses (--allow-privileged=false: it has no kubelet to run
			// it). The apiserver validates the whole object and lists
			// every field it refuses: that one must be the only one.
			const refusal = "spec.template.spec.containers[0].securityContext.privileged: Forbidden: disallowed by cluster policy"
			if err == nil || !strings.Contains(err.Error(), refusal) || strings.Count(err.Error(), ": Forbidden")+strings.Count(err.Error(), ": Invalid")+strings.Count(err.Error(), ": Required") != 1 {
				t.Fatalf("create DaemonSet %s: %v, want only the refusal of privileged pods", o.GetName(), err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	sa := field(t, find(full, "Deployment"), "spec", "template", "spec", "serviceAccountName").(string)
	rc := rest.CopyConfig(c.RESTConfig)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + chartNamespace + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + chartNamespace, "system:authenticated"}}
	b, err := kube.New(ctx, kube.Config{REST: rc, Namespace: chartNamespace, Instance: "chart", AgentImage: "agentbox-agent:test", ReadyTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("the kube backend as the chart's ServiceAccount: %v", err)
	}
	b.Abandon()
	if _, err := kube.New(ctx, kube.Config{REST: rc, Namespace: c.Namespace, Instance: "chart", AgentImage: "agentbox-agent:test"}); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the chart's ServiceAccount in another namespace: %v, want forbidden", err)
	}
}
