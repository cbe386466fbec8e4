package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// These tests run against a real control plane (internal/kubetest: etcd,
// kube-apiserver, kube-scheduler and the agent-sandbox controller). What
// they check needs no node: the objects the backend and the controller
// make, stop, destroy and recover. The lifecycle on a node is in
// node_test.go.

// testAgentImage names the agent's image in the test pods (no node here
// pulls it; an agentbox node never runs the init container).
const testAgentImage = "agentbox-agent:test"

func newClusterBackend(t *testing.T, c *kubetest.Cluster, instance string, ready time.Duration) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := New(ctx, Config{REST: c.RESTConfig, Namespace: c.Namespace, Instance: instance, AgentImage: testAgentImage, ReadyTimeout: ready})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// within polls cond every 50ms until it holds, failing t after limit.
func within(t *testing.T, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s (last error %v)", what, limit, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func clusterSpec(labels map[string]string) sandbox.Spec {
	spec := testSpec()
	spec.ID = sandbox.NewID()
	spec.Labels = labels
	return spec
}

// bindClaims stands in for kube-controller-manager's volume controllers
// (no kube-controller-manager runs in the test control plane, and no
// storage provisioner): it binds every claim of the namespace to a volume
// of its own, as a provisioner and the PV binder would, and lets a
// deleted claim go (the pvc-protection controller's job). An agentbox
// node keeps a claim's data in a directory of its own named after the
// claim, so the volume's source is never mounted.
func bindClaims(t *testing.T, ns string, cl client.Client) { bindClaimsAt(t, ns, cl, "") }

// bindClaimsAt is bindClaims with each volume a real directory under dir
// (when not empty), which a real kubelet mounts as a hostPath: open to
// the sandbox's user, as a provisioner's volume would be.
func bindClaimsAt(t *testing.T, ns string, cl client.Client, dir string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var claims corev1.PersistentVolumeClaimList
			if err := cl.List(ctx, &claims, client.InNamespace(ns)); err == nil {
				for i := range claims.Items {
					if err := bindClaim(ctx, cl, &claims.Items[i], dir); err != nil && ctx.Err() == nil {
						t.Logf("bind claim %s: %v", claims.Items[i].Name, err)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

func bindClaim(ctx context.Context, cl client.Client, pvc *corev1.PersistentVolumeClaim, dir string) error {
	if pvc.DeletionTimestamp != nil {
		if len(pvc.Finalizers) > 0 {
			pvc.Finalizers = nil
			return cl.Update(ctx, pvc)
		}
		return nil
	}
	if pvc.Spec.VolumeName != "" {
		return nil
	}
	name := "pv-" + string(pvc.UID)
	src := "/nonexistent/agentbox-test/" + string(pvc.UID)
	if dir != "" {
		src = filepath.Join(dir, string(pvc.UID))
		if err := os.MkdirAll(src, 0o777); err != nil {
			return err
		}
		if err := os.Chmod(src, 0o777); err != nil {
			return err
		}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: src}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
		},
	}
	if err := cl.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pv.Status.Phase = corev1.VolumeBound
	if err := cl.Status().Update(ctx, pv); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
	pvc.Spec.VolumeName = name
	if err := cl.Update(ctx, pvc); err != nil {
		return err
	}
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.AccessModes = pvc.Spec.AccessModes
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
	return cl.Status().Update(ctx, pvc)
}

// objectsOf lists what of sandbox id exists in the namespace, by label.
func objectsOf(ctx context.Context, cl client.Client, ns string, id sandbox.ID) (map[string]int, error) {
	sel := client.MatchingLabels{LabelSandbox: string(id)}
	lists := map[string]client.ObjectList{
		"Sandbox": &sbv1.SandboxList{}, "Pod": &corev1.PodList{}, "Secret": &corev1.SecretList{},
		"NetworkPolicy": &networkingv1.NetworkPolicyList{}, "PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{},
	}
	out := map[string]int{}
	for kind, l := range lists {
		if err := cl.List(ctx, l, client.InNamespace(ns), sel); err != nil {
			return nil, fmt.Errorf("list %s: %w", kind, err)
		}
		if n := len(itemsOf(l)); n > 0 {
			out[kind] = n
		}
	}
	return out, nil
}

func itemsOf(l client.ObjectList) []any {
	var out []any
	switch l := l.(type) {
	case *sbv1.SandboxList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.PodList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.SecretList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *networkingv1.NetworkPolicyList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.PersistentVolumeClaimList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

// checkOwned fails t unless obj carries the sandbox's labels and is owned
// by its Sandbox.
func checkOwned(t *testing.T, obj metav1.Object, sb *sbv1.Sandbox, instance string) {
	t.Helper()
	l := obj.GetLabels()
	if l[LabelSandbox] != sb.Labels[LabelSandbox] || l[LabelInstance] != instance || (l[LabelManagedBy] != ManagedBy && obj.GetName() != sb.Name) {
		t.Errorf("%T %s: labels %v", obj, obj.GetName(), l)
	}
	owned := slices.ContainsFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool {
		return r.UID == sb.UID && r.Kind == "Sandbox" && r.Name == sb.Name
	})
	if !owned {
		t.Errorf("%T %s: not owned by Sandbox %s: %+v", obj, obj.GetName(), sb.Name, obj.GetOwnerReferences())
	}
}

// TestClusterObjects: against the real apiserver and agent-sandbox
// controller, a sandbox is a Sandbox whose pod has exactly the locked-down
// spec, and whose Secret, NetworkPolicy and workspace claim carry its
// labels and its owner reference; stop removes the pod and keeps the
// claim, destroy removes everything, and a restarted backend recovers
// its own sandboxes (running and stopped) by label, removes a half-created
// one and leaves another daemon's alone.
func TestClusterObjects(t *testing.T) {
	c := kubetest.Start(t)
	b := newClusterBackend(t, c, "inst-a", 3*time.Second)
	cl := b.Client()
	bindClaims(t, c.Namespace, cl)
	ns := c.Namespace

	t.Run("LockedDownPod", func(t *testing.T) {
		ctx := ctxFor(t)
		spec := clusterSpec(map[string]string{"owner": "alice"})
		spec.Resources.MemoryBytes = 300 << 20
		spec.Resources.CPUs = 0.5
		spec.Network = sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"1.2.3.0/24", "example.org"}}
		bx, err := b.submit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		bx.mu.Unlock()
		t.Cleanup(func() { b.Destroy(context.Background(), spec.ID) })
		var pod corev1.Pod
		within(t, time.Minute, "the controller makes the pod", func() (bool, error) {
			err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: objectName(spec.ID)}, &pod)
			return err == nil, err
		})
		checkLockedDown(t, pod.Spec, spec.Resources.WithDefaults(DefaultResources))
		var sb sbv1.Sandbox
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: objectName(spec.ID)}, &sb); err != nil {
			t.Fatal(err)
		}
		if sb.Labels[LabelSandbox] != string(spec.ID) || sb.Labels[LabelManagedBy] != ManagedBy {
			t.Errorf("Sandbox labels = %v", sb.Labels)
		}
		checkOwned(t, &pod, &sb, "inst-a")
		if ref := metav1.GetControllerOf(&pod); ref == nil || ref.UID != sb.UID {
			t.Errorf("pod's controller = %+v, want the Sandbox", ref)
		}
		if pod.Annotations[AnnotationNetwork] != `{"mode":"egress","allow_out":["1.2.3.0/24","example.org"]}` {
			t.Errorf("pod network annotation = %q", pod.Annotations[AnnotationNetwork])
		}
		var claimVol bool
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == workspaceClaim(spec.ID) {
				claimVol = true
			}
		}
		if !claimVol {
			t.Errorf("pod volumes %+v lack the workspace claim", pod.Spec.Volumes)
		}
		var pvc corev1.PersistentVolumeClaim
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: workspaceClaim(spec.ID)}, &pvc); err != nil {
			t.Fatal(err)
		}
		checkOwned(t, &pvc, &sb, "inst-a")
		if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(*resource.NewQuantity(DefaultResources.DiskBytes, resource.BinarySI)) != 0 {
			t.Errorf("claim size = %s", got.String())
		}
		var sec corev1.Secret
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName(spec.ID)}, &sec); err != nil {
			t.Fatal(err)
		}
		checkOwned(t, &sec, &sb, "inst-a")
		if string(sec.Data[secretToken]) != spec.AccessToken {
			t.Error("the Secret lacks the access token")
		}
		var np networkingv1.NetworkPolicy
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: objectName(spec.ID)}, &np); err != nil {
			t.Fatal(err)
		}
		checkOwned(t, &np, &sb, "inst-a")
		if len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].To) != 1 || np.Spec.Egress[0].To[0].IPBlock.CIDR != "1.2.3.0/24" {
			t.Errorf("egress = %+v", np.Spec.Egress)
		}

		// Stop: the pod goes, the claim (the workspace) stays.
		if err := b.Stop(ctx, spec.ID); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if info, err := b.Inspect(ctx, spec.ID); err != nil || info.State != sandbox.StateStopped {
			t.Fatalf("inspect stopped = %+v, %v", info, err)
		}
		objs, err := objectsOf(ctx, cl, ns, spec.ID)
		if err != nil || objs["Pod"] != 0 || objs["PersistentVolumeClaim"] != 1 || objs["Sandbox"] != 1 {
			t.Fatalf("after stop: %v, %v", objs, err)
		}

		// Destroy: nothing of the sandbox is left.
		if err := b.Destroy(ctx, spec.ID); err != nil {
			t.Fatalf("destroy: %v", err)
		}
		within(t, time.Minute, "every object of the sandbox is gone", func() (bool, error) {
			objs, err := objectsOf(ctx, cl, ns, spec.ID)
			return err == nil && len(objs) == 0, fmt.Errorf("left: %v (%v)", objs, err)
		})
		if _, err := b.Inspect(ctx, spec.ID); !sandbox.IsNotFound(err) {
			t.Fatalf("inspect after destroy: %v", err)
		}
		if err := b.Destroy(ctx, spec.ID); err != nil {
			t.Fatalf("second destroy: %v", err)
		}
	})

	t.Run("DuplicateAndInvalid", func(t *testing.T) {
		ctx := ctxFor(t)
		spec := clusterSpec(nil)
		bx, err := b.submit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		bx.mu.Unlock()
		t.Cleanup(func() { b.Destroy(context.Background(), spec.ID) })
		// Another daemon (instance) in the namespace: the name is taken.
		other := newClusterBackend(t, c, "inst-b", 3*time.Second)
		if _, err := other.Create(ctx, spec); sandbox.ClassOf(err) != sandbox.ClassConflict {
			t.Fatalf("create of a taken name: %v, want conflict", err)
		}
		if err := other.Destroy(ctx, spec.ID); err != nil {
			t.Fatalf("destroy of another daemon's sandbox: %v", err)
		}
		if objs, err := objectsOf(ctx, cl, ns, spec.ID); err != nil || objs["Sandbox"] != 1 || objs["Secret"] != 1 {
			t.Fatalf("another daemon's destroy touched the sandbox: %v, %v", objs, err)
		}
		bad := clusterSpec(nil)
		bad.Resources.CPUs = -1
		if _, err := b.Create(ctx, bad); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Fatalf("negative cpus: %v", err)
		}
		if objs, err := objectsOf(ctx, cl, ns, bad.ID); err != nil || len(objs) != 0 {
			t.Fatalf("a refused spec left %v, %v", objs, err)
		}
	})

	t.Run("CreateWithoutNodeCleansUp", func(t *testing.T) {
		// No node runs here: the pod is never scheduled, Create gives up
		// after ReadyTimeout and leaves nothing behind.
		ctx := ctxFor(t)
		spec := clusterSpec(nil)
		_, err := b.Create(ctx, spec)
		if err == nil {
			b.Destroy(ctx, spec.ID)
			t.Fatal("create without a node succeeded")
		}
		within(t, time.Minute, "the failed sandbox's objects are gone", func() (bool, error) {
			objs, err := objectsOf(ctx, cl, ns, spec.ID)
			return err == nil && len(objs) == 0, fmt.Errorf("left: %v (%v)", objs, err)
		})
	})

	t.Run("WarmPool", func(t *testing.T) {
		// A pool is a SandboxTemplate and a SandboxWarmPool; the
		// controller keeps its Sandboxes, whose pods are locked down like
		// any sandbox's and start with the pool's token only.
		ctx := ctxFor(t)
		spec := clusterSpec(nil)
		spec.AccessToken = ""
		if err := b.EnsurePool(ctx, "py", spec, 2); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.DeletePool(context.Background(), "py") })
		if err := b.EnsurePool(ctx, "py", spec, 2); err != nil {
			t.Fatalf("ensure an existing pool: %v", err)
		}
		var wp extv1.SandboxWarmPool
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "abpool-py"}, &wp); err != nil {
			t.Fatal(err)
		}
		for _, o := range []client.Object{&extv1.SandboxTemplate{}, &corev1.Secret{}, &networkingv1.NetworkPolicy{}} {
			name := "abpool-py"
			if _, ok := o.(*corev1.Secret); ok {
				name = poolSecretName("py")
			}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
				t.Fatalf("%T: %v", o, err)
			}
			if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != wp.UID || o.GetLabels()[LabelPool] != "py" {
				t.Errorf("%T %s: owners %+v labels %v", o, name, refs, o.GetLabels())
			}
		}
		var pods []corev1.Pod
		within(t, time.Minute, "the warm pool's two sandboxes, each with its pod", func() (bool, error) {
			var err error
			pods, err = livePoolPods(ctx, cl, ns, "py", wp.UID)
			return err == nil && len(pods) == 2, fmt.Errorf("%d (%v)", len(pods), err)
		})
		for _, p := range pods {
			checkLockedDown(t, p.Spec, spec.Resources.WithDefaults(DefaultResources))
			if ref := p.Spec.Containers[0].Env[len(p.Spec.Containers[0].Env)-1]; ref.ValueFrom == nil || ref.ValueFrom.SecretKeyRef.Name != poolSecretName("py") {
				t.Errorf("pool pod token env = %+v", ref)
			}
		}
		if _, err := b.CreateFromPool(ctx, "no-such-pool", clusterSpec(nil)); !sandbox.IsNotFound(err) {
			t.Errorf("claim from a missing pool: %v", err)
		}
		if err := b.DeletePool(ctx, "py"); err != nil {
			t.Fatal(err)
		}
		within(t, time.Minute, "the pool's sandboxes are gone", func() (bool, error) {
			var sbs sbv1.SandboxList
			err := cl.List(ctx, &sbs, client.InNamespace(ns))
			n := 0
			for _, sb := range sbs.Items {
				if c := metav1.GetControllerOf(&sb); c != nil && c.Name == "abpool-py" {
					n++
				}
			}
			return err == nil && n == 0, fmt.Errorf("%d left (%v)", n, err)
		})
	})

	t.Run("Recover", func(t *testing.T) {
		ctx := ctxFor(t)
		b1 := newClusterBackend(t, c, "inst-r", 3*time.Second)
		running, stopped := clusterSpec(map[string]string{"owner": "alice"}), clusterSpec(nil)
		for _, s := range []sandbox.Spec{running, stopped} {
			bx, err := b1.submit(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			bx.mu.Unlock()
		}
		if err := b1.Stop(ctx, stopped.ID); err != nil {
			t.Fatal(err)
		}
		// A create that died between the Sandbox and its Secret.
		half := clusterSpec(nil)
		hsb := b1.sandboxObject(half)
		hsb.Spec.OperatingMode = sbv1.SandboxOperatingModeSuspended
		if err := cl.Create(ctx, hsb); err != nil {
			t.Fatal(err)
		}
		// Another daemon's sandbox in the same namespace.
		b3 := newClusterBackend(t, c, "inst-other", 3*time.Second)
		foreign := clusterSpec(nil)
		fbx, err := b3.submit(ctx, foreign)
		if err != nil {
			t.Fatal(err)
		}
		fbx.mu.Unlock()
		t.Cleanup(func() {
			for _, id := range []sandbox.ID{running.ID, stopped.ID, half.ID} {
				b1.teardown(context.Background(), id)
			}
			b3.Destroy(context.Background(), foreign.ID)
		})
		b1.Abandon()
		b2 := newClusterBackend(t, c, "inst-r", 3*time.Second)
		infos, err := b2.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[sandbox.ID]sandbox.Info{}
		for _, in := range infos {
			byID[in.ID] = in
		}
		if len(byID) != 2 {
			t.Errorf("recovered %d sandboxes, want 2: %+v", len(byID), infos)
		}
		if r, ok := byID[running.ID]; !ok || r.Spec.Labels["owner"] != "alice" || r.Spec.AccessToken != "" || r.State == sandbox.StateStopped {
			t.Errorf("running sandbox = %+v (found %v)", r, ok)
		}
		if s, ok := byID[stopped.ID]; !ok || s.State != sandbox.StateStopped {
			t.Errorf("stopped sandbox = %+v (found %v)", s, ok)
		}
		within(t, time.Minute, "the half-created sandbox is removed", func() (bool, error) {
			objs, err := objectsOf(ctx, cl, ns, half.ID)
			return err == nil && len(objs) == 0, fmt.Errorf("left: %v (%v)", objs, err)
		})
		if objs, err := objectsOf(ctx, cl, ns, foreign.ID); err != nil || objs["Sandbox"] != 1 {
			t.Errorf("another daemon's sandbox after recover: %v, %v", objs, err)
		}
		for _, id := range []sandbox.ID{running.ID, stopped.ID} {
			if err := b2.Destroy(ctx, id); err != nil {
				t.Errorf("destroy recovered %s: %v", id, err)
			}
		}
	})
}

// livePoolPods returns the pods of the pool's live Sandboxes: Sandboxes
// the pool controls that are not being deleted, and their pods. The
// controller may replace or trim a pool's Sandboxes while it converges
// (an extra one made from a stale cache is deleted again); the pod of a
// deleted Sandbox is the garbage collector's to remove, and no
// kube-controller-manager runs here, so such a pod stays and is not one
// of the pool's.
func livePoolPods(ctx context.Context, cl client.Client, ns, pool string, poolUID types.UID) ([]corev1.Pod, error) {
	var sbs sbv1.SandboxList
	if err := cl.List(ctx, &sbs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	live := map[types.UID]bool{}
	for _, sb := range sbs.Items {
		if c := metav1.GetControllerOf(&sb); c != nil && c.UID == poolUID && sb.DeletionTimestamp.IsZero() {
			live[sb.UID] = true
		}
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelPool: pool}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if c := metav1.GetControllerOf(&p); c != nil && live[c.UID] && p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	if len(out) != len(live) {
		return nil, fmt.Errorf("%d live sandboxes, %d of them with a pod", len(live), len(out))
	}
	return out, nil
}

// TestClusterDeployManifests: deploy/kubernetes applies to the real
// apiserver as it is, and the Role it grants the daemon's ServiceAccount
// (its namespace only) is enough for the backend: a sandbox is created,
// stopped, recovered and destroyed under that identity, while the same
// identity may not touch another namespace.
func TestClusterDeployManifests(t *testing.T) {
	c := kubetest.Start(t)
	ctx := ctxFor(t)
	const ns = "agentbox"
	if err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(c.RESTConfig, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rbac.yaml", "daemon.yaml"} {
		objs, err := readManifests("../../../deploy/kubernetes/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetNamespace() != ns {
				t.Errorf("%s: %s %s is in namespace %q, want %q", f, o.GetKind(), o.GetName(), o.GetNamespace(), ns)
			}
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("%s: create %s %s: %v", f, o.GetKind(), o.GetName(), err)
			}
		}
	}
	rc := rest.CopyConfig(c.RESTConfig)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":agentbox",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	b, err := New(ctx, Config{REST: rc, Namespace: ns, Instance: "deployed", AgentImage: testAgentImage, ReadyTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("backend as the daemon's ServiceAccount: %v", err)
	}
	bindClaims(t, ns, admin)
	spec := clusterSpec(map[string]string{"owner": "bob"})
	bx, err := b.submit(ctx, spec)
	if err != nil {
		t.Fatalf("create as the daemon's ServiceAccount: %v", err)
	}
	bx.mu.Unlock()
	within(t, time.Minute, "the controller makes the pod", func() (bool, error) {
		p, err := b.pod(ctx, spec.ID)
		return p != nil, err
	})
	if err := b.Stop(ctx, spec.ID); err != nil {
		t.Fatalf("stop as the daemon's ServiceAccount: %v", err)
	}
	b.Abandon()
	infos, err := b.Recover(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != spec.ID || infos[0].State != sandbox.StateStopped {
		t.Fatalf("recover as the daemon's ServiceAccount: %+v, %v", infos, err)
	}
	if err := b.Destroy(ctx, spec.ID); err != nil {
		t.Fatalf("destroy as the daemon's ServiceAccount: %v", err)
	}
	within(t, time.Minute, "every object of the sandbox is gone", func() (bool, error) {
		objs, err := objectsOf(ctx, admin, ns, spec.ID)
		return err == nil && len(objs) == 0, fmt.Errorf("left: %v (%v)", objs, err)
	})
	// Limited to its namespace.
	if _, err := New(ctx, Config{REST: rc, Namespace: c.Namespace, Instance: "deployed", AgentImage: testAgentImage}); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the daemon's ServiceAccount in another namespace: %v, want forbidden", err)
	}
}

// readManifests decodes the YAML documents of a manifest file.
func readManifests(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}
