package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
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

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// pollInterval is how often a wait re-reads the cluster.
const pollInterval = 50 * time.Millisecond

// apiErr classifies an API error: a refused object is the caller's,
// anything else the server's.
func apiErr(err error, what string) error {
	switch {
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return sandbox.Wrap(sandbox.ClassInvalid, err, what+": "+err.Error())
	case apierrors.IsAlreadyExists(err):
		return sandbox.Wrap(sandbox.ClassConflict, err, what+": "+err.Error())
	}
	return fmt.Errorf("kube: %s: %w", what, err)
}

// Create implements backend.Backend. Nothing of the sandbox runs before
// its NetworkPolicy exists: the Sandbox is created suspended, its Secret
// and NetworkPolicy (owned by it) next, and only then it is set running.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if err := backend.RefuseEgressRules(b.Name(), spec); err != nil {
		return sandbox.Info{}, err
	}
	if err := backend.CheckIsolation(b.Capabilities(), spec); err != nil {
		return sandbox.Info{}, err
	}
	bx, err := b.submit(ctx, spec)
	if err != nil {
		return sandbox.Info{}, err
	}
	defer bx.mu.Unlock()
	info, err := b.waitRunning(ctx, bx)
	if err != nil {
		if terr := b.teardown(context.WithoutCancel(ctx), spec.ID); terr != nil {
			b.log.Error("clean up a failed create", "sandbox", spec.ID, "err", terr)
		}
		b.forget(spec.ID)
		return sandbox.Info{}, err
	}
	return info, nil
}

// submit checks spec and creates the sandbox's objects, running. It
// returns the sandbox's box locked; on error nothing is left behind.
func (b *Backend) submit(ctx context.Context, spec sandbox.Spec) (*box, error) {
	spec.Resources = spec.Resources.WithDefaults(b.cfg.Defaults)
	if spec.Network.Mode == "" {
		spec.Network.Mode = sandbox.NetworkNone
	}
	if err := b.validate(spec); err != nil {
		return nil, err
	}
	bx, err := b.register(spec)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	sb := b.sandboxObject(spec)
	sb.Spec.OperatingMode = sbv1.SandboxOperatingModeSuspended
	if err := b.c.Create(ctx, sb); err != nil {
		bx.mu.Unlock()
		b.forget(spec.ID)
		if apierrors.IsAlreadyExists(err) {
			// A Sandbox of that name this backend does not know: not ours.
			return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
		}
		return nil, apiErr(err, "create Sandbox")
	}
	err = b.createOwned(ctx, sb, spec)
	if err == nil {
		err = b.setMode(ctx, spec.ID, sbv1.SandboxOperatingModeRunning)
	}
	if err != nil {
		if terr := b.teardown(context.WithoutCancel(ctx), spec.ID); terr != nil {
			b.log.Error("clean up a failed create", "sandbox", spec.ID, "err", terr)
		}
		bx.mu.Unlock()
		b.forget(spec.ID)
		return nil, err
	}
	return bx, nil
}

// createOwned creates the sandbox's Secret and NetworkPolicy, owned by sb.
func (b *Backend) createOwned(ctx context.Context, sb *sbv1.Sandbox, spec sandbox.Spec) error {
	rules, err := egressRules(spec.Network)
	if err != nil {
		return err
	}
	owner := ownerRef(sb)
	sec, err := b.secretObject(spec)
	if err != nil {
		return err
	}
	sec.OwnerReferences = []metav1.OwnerReference{owner}
	if err := b.c.Create(ctx, sec); err != nil {
		return apiErr(err, "create Secret")
	}
	np := b.networkPolicy(spec, rules)
	np.OwnerReferences = []metav1.OwnerReference{owner}
	if err := b.c.Create(ctx, np); err != nil {
		return apiErr(err, "create NetworkPolicy")
	}
	return nil
}

func ownerRef(sb *sbv1.Sandbox) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{
		APIVersion: sbv1.GroupVersion.String(), Kind: "Sandbox", Name: sb.Name, UID: sb.UID,
		BlockOwnerDeletion: &t,
	}
}

func (b *Backend) register(spec sandbox.Spec) (*box, error) {
	bx := &box{id: spec.ID, createdAt: time.Now().UTC(), name: objectName(spec.ID)}
	bx.spec = spec
	bx.spec.AccessToken = ""
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.boxes[spec.ID]; ok {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	b.boxes[spec.ID] = bx
	return bx, nil
}

func (b *Backend) forget(id sandbox.ID) {
	b.mu.Lock()
	delete(b.boxes, id)
	b.mu.Unlock()
}

// setMode sets the Sandbox's operating mode: Suspended deletes its pod
// (the workspace claim stays), Running makes one.
func (b *Backend) setMode(ctx context.Context, id sandbox.ID, mode sbv1.SandboxOperatingMode) error {
	patch := []byte(`{"spec":{"operatingMode":"` + string(mode) + `"}}`)
	sb := &sbv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: b.sandboxName(id), Namespace: b.cfg.Namespace}}
	if err := b.c.Patch(ctx, sb, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return sandbox.Errorf(sandbox.ClassNotFound, "sandbox %s: its Sandbox is gone", id)
		}
		return apiErr(err, "set the Sandbox's operating mode")
	}
	return nil
}

// sandboxName is the name of sandbox id's Sandbox: ab-ID, or the warm
// pool's name of one handed out from a pool.
func (b *Backend) sandboxName(id sandbox.ID) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bx, ok := b.boxes[id]; ok && bx.name != "" {
		return bx.name
	}
	return objectName(id)
}

// getSandbox returns the Sandbox of id, nil when there is none. One this
// backend does not know by name (a pool's, before Recover) is found by
// its labels.
func (b *Backend) getSandbox(ctx context.Context, id sandbox.ID) (*sbv1.Sandbox, error) {
	var sb sbv1.Sandbox
	err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: b.sandboxName(id)}, &sb)
	if err == nil {
		return &sb, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, apiErr(err, "get Sandbox")
	}
	var list sbv1.SandboxList
	if err := b.c.List(ctx, &list, client.InNamespace(b.cfg.Namespace), client.MatchingLabels{LabelSandbox: string(id), LabelInstance: b.cfg.Instance}); err != nil {
		return nil, apiErr(err, "list Sandboxes")
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// pod returns the sandbox's pod, nil when there is none.
func (b *Backend) pod(ctx context.Context, id sandbox.ID) (*corev1.Pod, error) {
	sb, err := b.getSandbox(ctx, id)
	if err != nil || sb == nil {
		return nil, err
	}
	return b.podOf(ctx, sb)
}

func (b *Backend) podOf(ctx context.Context, sb *sbv1.Sandbox) (*corev1.Pod, error) {
	name := sb.Name
	if n := sb.Annotations[sbv1.SandboxPodNameAnnotation]; n != "" {
		name = n
	}
	var pod corev1.Pod
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, apiErr(err, "get pod")
	}
	return &pod, nil
}

// waitRunning waits until the sandbox's pod runs and its agent answers.
func (b *Backend) waitRunning(ctx context.Context, bx *box) (sandbox.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	last := "no pod yet"
	start := time.Now()
	var seenRunning time.Duration
	logged := ""
	for {
		// An API error is retried until the deadline: an apiserver blip
		// must not fail a create that is going well.
		pod, err := b.pod(ctx, bx.id)
		if err != nil {
			last = err.Error()
		}
		if pod != nil {
			if why, fatal := podProblem(pod); fatal {
				return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "sandbox %s: pod %s: %s", bx.id, pod.Name, why)
			} else if why != "" {
				last = why
			}
			if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" && pod.DeletionTimestamp == nil {
				addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(AgentPort))
				if seenRunning == 0 {
					seenRunning = time.Since(start)
				}
				err := b.health(ctx, addr)
				if err == nil && bx.pool != "" {
					// A pool's pod starts with the pool's token.
					err = b.personalise(ctx, bx, addr)
				}
				if err == nil {
					b.log.Debug("sandbox running", "sandbox", bx.id, "pod_running_ms", seenRunning.Milliseconds(), "agent_ms", time.Since(start).Milliseconds())
					return b.runningInfo(bx, addr), nil
				}
				last = "agent at " + addr + ": " + err.Error()
			}
		}
		if last != logged {
			b.log.Debug("waiting for the sandbox's pod", "sandbox", bx.id, "ms", time.Since(start).Milliseconds(), "state", last)
			logged = last
		}
		select {
		case <-ctx.Done():
			return sandbox.Info{}, fmt.Errorf("kube: sandbox %s not running after %s: %s", bx.id, b.cfg.ReadyTimeout, last)
		case <-time.After(pollInterval):
		}
	}
}

// podProblem tells why a pod is not running yet; fatal when it never will.
func podProblem(pod *corev1.Pod) (string, bool) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		why := "ended (" + string(pod.Status.Phase) + ")"
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				why += fmt.Sprintf(": %s exited %d %s %s", cs.Name, t.ExitCode, t.Reason, t.Message)
			}
		}
		return why, true
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
			fatal := w.Reason == "InvalidImageName" || w.Reason == "ErrImageNeverPull"
			return cs.Name + ": " + w.Reason + " " + w.Message, fatal
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "not scheduled: " + c.Reason + " " + c.Message, false
		}
	}
	return "pod " + string(pod.Status.Phase), false
}

// health asks the agent at addr for GET /health (no token needed).
func (b *Backend) health(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

func (b *Backend) runningInfo(bx *box, addr string) sandbox.Info {
	return sandbox.Info{ID: bx.id, State: sandbox.StateRunning, Spec: bx.spec, CreatedAt: bx.createdAt,
		Agent: sandbox.Endpoint{Network: "tcp", Address: addr}}
}

// Stop implements backend.Backend: the Sandbox goes to zero replicas (its
// controller deletes the pod; the workspace claim stays) and the backend
// waits until the pod is gone.
func (b *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if err := b.setMode(ctx, id, sbv1.SandboxOperatingModeSuspended); err != nil {
		return err
	}
	return b.waitPodGone(ctx, id, true)
}

// waitPodGone waits until the sandbox has no pod. With kill it deletes the
// pod itself too (the controller does, but a stop should not wait for its
// next reconcile).
func (b *Backend) waitPodGone(ctx context.Context, id sandbox.ID, kill bool) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	for {
		pod, err := b.pod(ctx, id) // an API error is retried until the deadline
		if err == nil && pod == nil {
			return nil
		}
		if pod != nil && kill && pod.DeletionTimestamp == nil {
			if err := b.c.Delete(ctx, pod, client.GracePeriodSeconds(1), client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return apiErr(err, "delete pod")
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube: sandbox %s: its pod is still there after %s", id, b.cfg.ReadyTimeout)
		case <-time.After(pollInterval):
		}
	}
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if err := b.setMode(ctx, id, sbv1.SandboxOperatingModeRunning); err != nil {
		return sandbox.Info{}, err
	}
	return b.waitRunning(ctx, bx)
}

// Destroy implements backend.Backend. Owner references let the cluster's
// garbage collector remove what the Sandbox owns; the backend deletes it
// all itself too, so nothing waits for the collector (or leaks where none
// runs), and waits until the pod is gone.
func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	if err := id.Validate(); err != nil {
		return nil // no such sandbox can exist
	}
	if bx, err := b.lookup(id); err == nil {
		bx.mu.Lock()
		defer bx.mu.Unlock()
	}
	sb, err := b.getSandbox(ctx, id)
	if err != nil {
		return err
	}
	if sb != nil && sb.Labels[LabelInstance] != b.cfg.Instance {
		// Another daemon's sandbox of the same id: not ours to remove.
		b.forget(id)
		return nil
	}
	if err := b.teardown(ctx, id); err != nil {
		return err
	}
	b.forget(id)
	return nil
}

// teardown deletes every object of sandbox id (by name and by label) and
// waits until its pod is gone.
func (b *Backend) teardown(ctx context.Context, id sandbox.ID) error {
	var errs []error
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	del := func(obj client.Object, opts ...client.DeleteOption) {
		if err := b.c.Delete(ctx, obj, opts...); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, apiErr(err, fmt.Sprintf("delete %T %s", obj, obj.GetName())))
		}
	}
	ns := b.cfg.Namespace
	sb, err := b.getSandbox(ctx, id)
	if err != nil {
		return err
	}
	if sb != nil {
		if claim := metav1.GetControllerOf(sb); claim != nil && claim.Kind == "SandboxClaim" {
			del(&extv1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: ns}}, bg)
		}
		pod, err := b.podOf(ctx, sb)
		if err != nil {
			return err
		}
		del(sb, bg)
		if pod != nil {
			del(pod, client.GracePeriodSeconds(1))
		}
	}
	del(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: objectName(id), Namespace: ns}})
	del(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: workspaceClaim(id), Namespace: ns}})
	if sb != nil && sb.Name != objectName(id) {
		del(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: workspaceVolume + "-" + sb.Name, Namespace: ns}})
	}
	del(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName(id), Namespace: ns}})
	del(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: objectName(id), Namespace: ns}})
	// A pod adopted from a warm pool keeps its name; find it by label.
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelSandbox: string(id), LabelInstance: b.cfg.Instance}); err == nil {
		for i := range pods.Items {
			del(&pods.Items[i], client.GracePeriodSeconds(1))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return b.waitGone(ctx, id)
}

// waitGone waits until no pod of the sandbox is left.
func (b *Backend) waitGone(ctx context.Context, id sandbox.ID) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	for {
		var pods corev1.PodList
		err := b.c.List(ctx, &pods, client.InNamespace(b.cfg.Namespace), client.MatchingLabels{LabelSandbox: string(id), LabelInstance: b.cfg.Instance})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			n := len(pods.Items)
			return fmt.Errorf("kube: sandbox %s: %d pod(s) still there after %s (err %v)", id, n, b.cfg.ReadyTimeout, err)
		case <-time.After(pollInterval):
		}
	}
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	sb, err := b.getSandbox(ctx, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	if sb == nil {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassNotFound, "sandbox %s not found", id)
	}
	return b.state(ctx, bx, sb)
}

// state reads a sandbox's state from its Sandbox and pod.
func (b *Backend) state(ctx context.Context, bx *box, sb *sbv1.Sandbox) (sandbox.Info, error) {
	info := sandbox.Info{ID: bx.id, Spec: bx.spec, CreatedAt: bx.createdAt}
	if sb.Spec.OperatingMode == sbv1.SandboxOperatingModeSuspended {
		info.State = sandbox.StateStopped
		return info, nil
	}
	pod, err := b.podOf(ctx, sb)
	if err != nil {
		return sandbox.Info{}, err
	}
	switch {
	case pod == nil:
		info.State, info.Reason = sandbox.StateError, "its pod is gone"
	case pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
		return b.runningInfo(bx, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(AgentPort))), nil
	default:
		why, _ := podProblem(pod)
		info.State, info.Reason = sandbox.StateError, why
	}
	return info, nil
}

// Recover implements backend.Backend: it finds this daemon's Sandboxes by
// their labels, reads each one's spec from its Secret, and removes the
// remains of half-created ones (no Secret: the create never finished).
func (b *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) {
	var list sbv1.SandboxList
	if err := b.c.List(ctx, &list, client.InNamespace(b.cfg.Namespace), client.MatchingLabels{LabelInstance: b.cfg.Instance, LabelManagedBy: ManagedBy}); err != nil {
		return nil, apiErr(err, "list Sandboxes")
	}
	var out []sandbox.Info
	for i := range list.Items {
		sb := &list.Items[i]
		id := sandbox.ID(sb.Labels[LabelSandbox])
		if id.Validate() != nil || sb.DeletionTimestamp != nil {
			continue
		}
		spec, pool, err := b.readSpec(ctx, id)
		if err != nil {
			b.log.Warn("removing a sandbox whose spec cannot be read", "sandbox", id, "err", err)
			if terr := b.teardown(ctx, id); terr != nil {
				b.log.Error("remove a broken sandbox", "sandbox", id, "err", terr)
			}
			continue
		}
		bx := &box{id: id, spec: spec, createdAt: sb.CreationTimestamp.UTC(), name: sb.Name, pool: pool}
		info, err := b.state(ctx, bx, sb)
		if err != nil {
			return nil, err
		}
		if info.State == sandbox.StateRunning {
			if herr := b.health(ctx, info.Agent.Address); herr != nil {
				info.State, info.Reason = sandbox.StateError, "agent does not answer: "+herr.Error()
				info.Agent = sandbox.Endpoint{}
			}
		}
		b.mu.Lock()
		if _, dup := b.boxes[id]; !dup {
			b.boxes[id] = bx
		}
		b.mu.Unlock()
		out = append(out, info)
	}
	return out, nil
}

// readSpec reads the spec a sandbox was created with, and the warm pool
// it came from, from its Secret.
func (b *Backend) readSpec(ctx context.Context, id sandbox.ID) (sandbox.Spec, string, error) {
	sec, err := b.secret(ctx, id)
	if err != nil {
		return sandbox.Spec{}, "", err
	}
	var spec sandbox.Spec
	if err := json.Unmarshal(sec.Data[secretSpec], &spec); err != nil {
		return sandbox.Spec{}, "", fmt.Errorf("kube: decode spec of %s: %w", id, err)
	}
	if spec.ID != id {
		return sandbox.Spec{}, "", fmt.Errorf("kube: Secret of %s holds the spec of %s", id, spec.ID)
	}
	return spec, string(sec.Data[secretPool]), nil
}

func (b *Backend) secret(ctx context.Context, id sandbox.ID) (*corev1.Secret, error) {
	var sec corev1.Secret
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: secretName(id)}, &sec); err != nil {
		return nil, apiErr(err, "get Secret")
	}
	return &sec, nil
}
