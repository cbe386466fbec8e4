package kube

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Warm pools are agent-sandbox's: a SandboxTemplate holding the pool's
// locked-down pod and a SandboxWarmPool keeping Replicas Sandboxes of it
// booted. A pool hit is a SandboxClaim: the controller hands one of the
// pool's Sandboxes over to it (and boots a new one in its place). Every
// pod of a pool starts with the pool's access token (a Secret of the
// pool); the backend replaces it with the sandbox's own through the
// agent (POST /init) before the sandbox is handed out, so a pool's token
// opens no sandbox that was handed out.

// LabelPool names the warm pool of a pool's objects and pods.
const LabelPool = "agentbox.dev/pool"

func poolObjectName(pool string) string { return "abpool-" + pool }

func poolSecretName(pool string) string { return poolObjectName(pool) + "-agent" }

func (b *Backend) poolLabels(pool string) map[string]string {
	return map[string]string{LabelPool: pool, LabelInstance: b.cfg.Instance, LabelManagedBy: ManagedBy}
}

// EnsurePool creates warm pool name (if it does not exist) keeping
// replicas sandboxes of spec booted. spec.ID and spec.AccessToken are
// ignored: every sandbox handed out gets its own.
func (b *Backend) EnsurePool(ctx context.Context, name string, spec sandbox.Spec, replicas int32) error {
	if !dnsLabelOK(name) || len(objectName(sandbox.ID(poolObjectName(name)))) > 63 {
		return sandbox.Errorf(sandbox.ClassInvalid, "pool name %q: want a DNS label of at most 53 characters", name)
	}
	if replicas < 0 || replicas > 1000 {
		return sandbox.Errorf(sandbox.ClassInvalid, "pool size %d: want 0 to 1000", replicas)
	}
	spec.ID = sandbox.ID(poolObjectName(name)) // validated like a sandbox's
	spec.AccessToken = ""
	spec.Resources = spec.Resources.WithDefaults(b.cfg.Defaults)
	if spec.Network.Mode == "" {
		spec.Network.Mode = sandbox.NetworkNone
	}
	hash, err := specHash(spec)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		done, err := b.reusePool(ctx, name, hash, replicas)
		if err != nil || done {
			return err
		}
		err = b.createPool(ctx, name, spec, hash, replicas)
		if !apierrors.IsAlreadyExists(err) || attempt == 2 {
			return err
		}
		// Made meanwhile by another call: look at it again.
	}
}

// specHash identifies the spec a pool's sandboxes are made from.
func specHash(spec sandbox.Spec) (string, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("kube: encode a pool's spec: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}

// reusePool looks at an existing pool name: one of this daemon made from
// the same spec is kept (resized to replicas; done), one from another spec
// is deleted (to be made again), one of another daemon is a conflict.
func (b *Backend) reusePool(ctx context.Context, name, hash string, replicas int32) (done bool, err error) {
	var wp extv1.SandboxWarmPool
	err = b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: poolObjectName(name)}, &wp)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, apiErr(err, "get SandboxWarmPool")
	case wp.Labels[LabelInstance] != b.cfg.Instance || wp.Labels[LabelManagedBy] != ManagedBy:
		return false, sandbox.Errorf(sandbox.ClassConflict, "warm pool %s belongs to another daemon (instance %q)", name, wp.Labels[LabelInstance])
	case wp.Annotations[annotationPoolSpec] != hash:
		b.log.Info("remaking a warm pool whose sandboxes' spec changed", "pool", name)
		return false, b.DeletePool(ctx, name)
	case wp.Spec.Replicas == nil || *wp.Spec.Replicas != replicas:
		patch := []byte(`{"spec":{"replicas":` + strconv.Itoa(int(replicas)) + `}}`)
		if err := b.c.Patch(ctx, &wp, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return false, apiErr(err, "resize SandboxWarmPool")
		}
	}
	return true, nil
}

// annotationPoolSpec holds the hash of the spec a warm pool was made from.
const annotationPoolSpec = "agentbox.dev/pool-spec"

// createPool makes warm pool name: its SandboxWarmPool, and owned by it
// the pool's Secret, NetworkPolicy and SandboxTemplate.
func (b *Backend) createPool(ctx context.Context, name string, spec sandbox.Spec, hash string, replicas int32) error {
	token, err := newToken()
	if err != nil {
		return err
	}
	spec.AccessToken = token
	if err := b.validate(spec); err != nil {
		return err
	}
	rules, err := egressRules(spec.Network)
	if err != nil {
		return err
	}
	ns := b.cfg.Namespace
	obj := poolObjectName(name)
	pool := &extv1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: ns, Labels: b.poolLabels(name), Annotations: map[string]string{annotationPoolSpec: hash}},
		Spec:       extv1.SandboxWarmPoolSpec{Replicas: &replicas, TemplateRef: extv1.SandboxTemplateRef{Name: obj}},
	}
	if err := b.c.Create(ctx, pool); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return err // the caller looks again
		}
		return apiErr(err, "create SandboxWarmPool")
	}
	owner := metav1.OwnerReference{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxWarmPool", Name: pool.Name, UID: pool.UID}
	fail := func(err error) error {
		if derr := b.DeletePool(context.WithoutCancel(ctx), name); derr != nil {
			b.log.Error("clean up a failed pool", "pool", name, "err", derr)
		}
		return err
	}
	// The pool's token and its policy first: the template comes last, so
	// no pod of the pool runs before them.
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: poolSecretName(name), Namespace: ns, Labels: b.poolLabels(name), OwnerReferences: []metav1.OwnerReference{owner}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{secretToken: []byte(token)},
	}
	if err := b.c.Create(ctx, sec); err != nil {
		return fail(apiErr(err, "create the pool's Secret"))
	}
	np := b.networkPolicy(spec, rules)
	np.Name, np.Labels, np.OwnerReferences = obj, b.poolLabels(name), []metav1.OwnerReference{owner}
	np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{LabelPool: name, LabelInstance: b.cfg.Instance}}
	if err := b.c.Create(ctx, np); err != nil {
		return fail(apiErr(err, "create the pool's NetworkPolicy"))
	}
	podLabels := b.poolLabels(name)
	podLabels[LabelRole] = RoleSbx
	// A sandbox pod (an agentbox node runs it as one) of no sandbox yet:
	// a value no sandbox id can be (ids have no dots).
	podLabels[LabelSandbox] = "pool." + name
	wsTemplate := b.workspaceTemplate(spec)
	wsTemplate.Labels = b.poolLabels(name)
	noService := false
	tmpl := &extv1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: ns, Labels: b.poolLabels(name), OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: extv1.SandboxTemplateSpec{
			SandboxBlueprint: sbv1.SandboxBlueprint{
				PodTemplate: sbv1.PodTemplate{
					ObjectMeta: sbv1.PodMetadata{Labels: podLabels, Annotations: podAnnotations(spec)},
					Spec:       b.podSpec(spec, poolSecretName(name)),
				},
				VolumeClaimTemplates: []sbv1.PersistentVolumeClaimTemplate{wsTemplate},
				Service:              &noService,
			},
			// The backend's own NetworkPolicy above; the controller's
			// default one would differ from native's policy.
			NetworkPolicyManagement: extv1.NetworkPolicyManagementUnmanaged,
		},
	}
	if err := b.c.Create(ctx, tmpl); err != nil {
		return fail(apiErr(err, "create SandboxTemplate"))
	}
	return nil
}

// DeletePool deletes warm pool name and every sandbox it holds that was
// not handed out.
func (b *Backend) DeletePool(ctx context.Context, name string) error {
	ns := b.cfg.Namespace
	obj := poolObjectName(name)
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, o := range []client.Object{
		&extv1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: ns}},
		&extv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: poolSecretName(name), Namespace: ns}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: ns}},
	} {
		if err := b.c.Delete(ctx, o, bg); err != nil && !apierrors.IsNotFound(err) {
			return apiErr(err, fmt.Sprintf("delete %T %s", o, obj))
		}
	}
	// The pool's own Sandboxes (not handed out: those carry a claim as
	// their controller and their sandbox's labels), without waiting for
	// the garbage collector.
	var list sbv1.SandboxList
	if err := b.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return apiErr(err, "list Sandboxes")
	}
	for i := range list.Items {
		sb := &list.Items[i]
		if c := metav1.GetControllerOf(sb); c == nil || c.Kind != "SandboxWarmPool" || c.Name != obj {
			continue
		}
		if err := b.c.Delete(ctx, sb, bg); err != nil && !apierrors.IsNotFound(err) {
			return apiErr(err, "delete a pool's Sandbox")
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: ns}}
		if err := b.c.Delete(ctx, pod, client.GracePeriodSeconds(1)); err != nil && !apierrors.IsNotFound(err) {
			return apiErr(err, "delete a pool's pod")
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: workspaceVolume + "-" + sb.Name, Namespace: ns}}
		if err := b.c.Delete(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
			return apiErr(err, "delete a pool's claim")
		}
	}
	return nil
}

// CreateFromPool hands sandbox spec.ID out of warm pool pool through a
// SandboxClaim, and waits until its agent answers with spec.AccessToken.
// The sandbox is the pool's: of spec only ID, AccessToken, Labels and Env
// (set through the agent) count.
func (b *Backend) CreateFromPool(ctx context.Context, pool string, spec sandbox.Spec) (sandbox.Info, error) {
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.RefuseEgressRules(b.Name(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.CheckIsolation(b.Capabilities(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if len(objectName(spec.ID)) > 63 || spec.AccessToken == "" {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "sandbox %s: an id of at most 60 characters and an access token are required", spec.ID)
	}
	ns := b.cfg.Namespace
	var tmpl extv1.SandboxTemplate
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolObjectName(pool)}, &tmpl); err != nil {
		if apierrors.IsNotFound(err) {
			return sandbox.Info{}, sandbox.Errorf(sandbox.ClassNotFound, "no warm pool %q", pool)
		}
		return sandbox.Info{}, apiErr(err, "get SandboxTemplate")
	}
	full, err := poolSpec(&tmpl)
	if err != nil {
		return sandbox.Info{}, err
	}
	full.ID, full.AccessToken, full.Labels, full.Env = spec.ID, spec.AccessToken, spec.Labels, spec.Env
	bx, err := b.register(full)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.pool = pool
	bx.mu.Lock()
	defer bx.mu.Unlock()
	claim := &extv1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(spec.ID), Namespace: ns, Labels: b.labels(spec.ID)},
		Spec:       extv1.SandboxClaimSpec{WarmPoolRef: extv1.SandboxWarmPoolRef{Name: poolObjectName(pool)}},
	}
	if err := b.c.Create(ctx, claim); err != nil {
		b.forget(spec.ID)
		if apierrors.IsAlreadyExists(err) {
			return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
		}
		return sandbox.Info{}, apiErr(err, "create SandboxClaim")
	}
	fail := func(err error) (sandbox.Info, error) {
		if terr := b.teardown(context.WithoutCancel(ctx), spec.ID); terr != nil {
			b.log.Error("clean up a failed pool create", "sandbox", spec.ID, "err", terr)
		}
		b.forget(spec.ID)
		return sandbox.Info{}, err
	}
	sec, err := b.secretObject(full)
	if err == nil {
		sec.Data[secretPool] = []byte(pool)
		t := true
		sec.OwnerReferences = []metav1.OwnerReference{{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxClaim", Name: claim.Name, UID: claim.UID, BlockOwnerDeletion: &t}}
		err = b.c.Create(ctx, sec)
	}
	if err != nil {
		return fail(apiErr(err, "create Secret"))
	}
	start := time.Now()
	name, err := b.waitClaimed(ctx, claim.Name)
	if err != nil {
		return fail(err)
	}
	claimed := time.Since(start)
	b.mu.Lock()
	bx.name = name
	b.mu.Unlock()
	// The handed-out Sandbox becomes the sandbox's: its labels, so
	// Recover and a destroy by label find it.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": b.labels(spec.ID)}})
	if err := b.c.Patch(ctx, &sbv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fail(apiErr(err, "label the claimed Sandbox"))
	}
	info, err := b.waitRunning(ctx, bx)
	if err != nil {
		return fail(err)
	}
	b.log.Debug("handed out of the warm pool", "sandbox", spec.ID, "pool", pool, "claimed_ms", claimed.Milliseconds(), "running_ms", time.Since(start).Milliseconds())
	// The pod too (the controller owns its spec; labels are free).
	if pod, err := b.pod(ctx, spec.ID); err == nil && pod != nil {
		if err := b.c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+LabelSandbox+`":"`+string(spec.ID)+`"}}}`))); err != nil {
			b.log.Warn("label a claimed pod", "sandbox", spec.ID, "err", err)
		}
	}
	return info, nil
}

// waitClaimed waits until the controller has handed a Sandbox to claim
// name, and returns the Sandbox's name.
func (b *Backend) waitClaimed(ctx context.Context, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	for {
		var claim extv1.SandboxClaim
		err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: name}, &claim)
		if err == nil && claim.Status.SandboxStatus.Name != "" {
			return claim.Status.SandboxStatus.Name, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("kube: SandboxClaim %s got no Sandbox after %s (last error %v)", name, b.cfg.ReadyTimeout, err)
		case <-time.After(pollInterval):
		}
	}
}

// personalise gives the agent of a pool's pod the sandbox's own token (it
// answers to the pool's) and the sandbox's environment.
func (b *Backend) personalise(ctx context.Context, bx *box, addr string) error {
	sec, err := b.secret(ctx, bx.id)
	if err != nil {
		return err
	}
	var pool corev1.Secret
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: poolSecretName(bx.pool)}, &pool); err != nil {
		return apiErr(err, "get the pool's Secret")
	}
	token := string(sec.Data[secretToken])
	own := agentclient.New(agentclient.Endpoint{Network: "tcp", Address: addr}, token)
	defer own.Close()
	if _, err := own.Envs(ctx); err == nil {
		return nil // done before (a Start after a Recover, say)
	}
	c := agentclient.New(agentclient.Endpoint{Network: "tcp", Address: addr}, string(pool.Data[secretToken]))
	defer c.Close()
	if len(bx.spec.Env) > 0 {
		if err := c.SetEnv(ctx, bx.spec.Env); err != nil {
			return fmt.Errorf("set the sandbox's environment: %w", err)
		}
	}
	if err := c.SetAccessToken(ctx, token); err != nil {
		return fmt.Errorf("give the agent the sandbox's token: %w", err)
	}
	return nil
}

// poolSpec reads back the spec a pool's template was made from.
func poolSpec(t *extv1.SandboxTemplate) (sandbox.Spec, error) {
	ps := t.Spec.PodTemplate.Spec
	if len(ps.Containers) != 1 {
		return sandbox.Spec{}, fmt.Errorf("kube: SandboxTemplate %s is not agentbox's", t.Name)
	}
	c := ps.Containers[0]
	spec := sandbox.Spec{Template: sandbox.Template{Ref: TemplatePrefix + c.Image, Kind: TemplateKind}}
	spec.Resources.MemoryBytes = c.Resources.Limits.Memory().Value()
	spec.Resources.CPUs = float64(c.Resources.Limits.Cpu().MilliValue()) / 1000
	if len(t.Spec.VolumeClaimTemplates) > 0 {
		spec.Resources.DiskBytes = t.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().Value()
	}
	if sc := c.SecurityContext; sc != nil && sc.ReadOnlyRootFilesystem != nil && !*sc.ReadOnlyRootFilesystem {
		spec.WritableRoot = true
	}
	if n, err := strconv.ParseInt(t.Spec.PodTemplate.ObjectMeta.Annotations[AnnotationPids], 10, 64); err == nil {
		spec.Resources.PIDs = n
	}
	if err := json.Unmarshal([]byte(t.Spec.PodTemplate.ObjectMeta.Annotations[AnnotationNetwork]), &spec.Network); err != nil {
		return sandbox.Spec{}, fmt.Errorf("kube: SandboxTemplate %s: network annotation: %w", t.Name, err)
	}
	if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		spec.Root = true
	}
	for _, v := range ps.Volumes {
		if v.Name == tmpVolume && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
			spec.Resources.TmpBytes = v.EmptyDir.SizeLimit.Value()
		}
	}
	return spec, nil
}

func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("kube: random token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func dnsLabelOK(s string) bool {
	return sandbox.ID(s).Validate() == nil && s[len(s)-1] != '-'
}

var _ backend.WarmPooler = (*Backend)(nil)

// PoolName implements backend.WarmPooler: the daemon's pool of a kube:
// template is named after the template and this daemon's K8S_INSTANCE,
// so daemons sharing a namespace keep pools of their own and a restarted
// daemon finds its pool again.
func (b *Backend) PoolName(t sandbox.Template) (string, bool) {
	if t.Kind != TemplateKind {
		return "", false
	}
	sum := sha256.Sum256([]byte(b.cfg.Instance + "\x00" + t.Ref))
	return "t" + hex.EncodeToString(sum[:6]), true
}

// PoolReady implements backend.WarmPooler.
func (b *Backend) PoolReady(ctx context.Context, name string) (int, error) {
	var wp extv1.SandboxWarmPool
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: poolObjectName(name)}, &wp); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, sandbox.Errorf(sandbox.ClassNotFound, "no warm pool %q", name)
		}
		return 0, apiErr(err, "get SandboxWarmPool")
	}
	return int(wp.Status.ReadyReplicas), nil
}

// Pools implements backend.WarmPooler: the warm pools of this K8S_INSTANCE.
func (b *Backend) Pools(ctx context.Context) ([]string, error) {
	var list extv1.SandboxWarmPoolList
	if err := b.c.List(ctx, &list, client.InNamespace(b.cfg.Namespace), client.MatchingLabels{LabelInstance: b.cfg.Instance, LabelManagedBy: ManagedBy}); err != nil {
		return nil, apiErr(err, "list SandboxWarmPools")
	}
	var out []string
	for _, wp := range list.Items {
		if name := wp.Labels[LabelPool]; name != "" && wp.DeletionTimestamp == nil {
			out = append(out, name)
		}
	}
	return out, nil
}
