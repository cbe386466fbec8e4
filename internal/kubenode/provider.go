package kubenode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// Templates resolves a pod's image to a template (the template store).
type Templates interface {
	Resolve(ctx context.Context, ref string) (sandbox.Template, error)
}

// Addresser tells a sandbox's address on the node's sandbox subnet (the
// pod IP): netpolicy.Manager.
type Addresser interface {
	Addr(id sandbox.ID) (netip.Addr, bool)
}

// provider runs the node's pods on the native backend. It implements
// virtual-kubelet's Provider and PodNotifier.
type provider struct {
	cfg    *Config
	log    *slog.Logger
	client kubernetes.Interface
	// hostIP is the node's address, reported as every pod's hostIP.
	hostIP string

	mu     sync.Mutex
	pods   map[string]*podState // by namespace/name
	notify func(*corev1.Pod)
	// wg counts the goroutines that boot and watch pods.
	wg sync.WaitGroup
}

// podState is one pod the node runs.
type podState struct {
	key  string
	plan *podPlan
	// mu guards pod (its status included) and the fields below.
	mu      sync.Mutex
	pod     *corev1.Pod
	deleted bool
	// ready is closed once the sandbox exists (or failed to).
	ready chan struct{}
	// cancel stops the pod's goroutines (boot, the generic process).
	cancel  context.CancelFunc
	logPath string
	token   string
}

func podKey(ns, name string) string { return ns + "/" + name }

func (p *provider) get(ns, name string) *podState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[podKey(ns, name)]
}

// NotifyPods implements node.PodNotifier.
func (p *provider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = f
	p.mu.Unlock()
}

// publish sends the pod's current status to virtual-kubelet.
func (p *provider) publish(st *podState) {
	p.mu.Lock()
	f := p.notify
	p.mu.Unlock()
	st.mu.Lock()
	pod := st.pod.DeepCopy()
	st.mu.Unlock()
	if f != nil {
		f(pod)
	}
}

// CreatePod starts booting the pod's sandbox and returns: the status
// follows through NotifyPods.
func (p *provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	if _, ok := p.pods[key]; ok {
		p.mu.Unlock()
		return errdefs.AsInvalidInput(fmt.Errorf("pod %s already runs on this node", key))
	}
	st := &podState{key: key, pod: pod.DeepCopy(), ready: make(chan struct{})}
	p.pods[key] = st
	p.mu.Unlock()

	now := metav1.Now()
	st.pod.Status = corev1.PodStatus{
		Phase: corev1.PodPending, HostIP: p.hostIP, StartTime: &now,
		HostIPs:    []corev1.HostIP{{IP: p.hostIP}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
	}
	plan, err := planPod(pod, p.cfg.Defaults, p.cfg.MaxResources)
	if err != nil {
		p.fail(st, "Unsupported", err.Error())
		close(st.ready)
		return nil
	}
	st.plan = plan
	st.token = plan.spec.AccessToken
	if st.token == "" {
		// Generic pods: the node talks to their agent over its host socket,
		// still with a token of its own.
		st.token = randomToken()
		plan.spec.AccessToken = st.token
	}
	st.pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting(plan.container, plan.image, "ContainerCreating", "")}
	for _, n := range plan.skippedInit {
		st.pod.Status.InitContainerStatuses = append(st.pod.Status.InitContainerStatuses, initSkipped(n, pod))
	}
	bootCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.cancel = cancel
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.boot(bootCtx, st)
	}()
	return nil
}

// boot creates the sandbox and, for a generic pod, starts its process.
func (p *provider) boot(ctx context.Context, st *podState) {
	plan := st.plan
	err := p.createSandbox(ctx, st)
	close(st.ready)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("pod failed to start", "pod", st.key, "err", err)
			p.fail(st, "SandboxFailed", err.Error())
		}
		return
	}
	info, err := p.cfg.Backend.Inspect(ctx, plan.id)
	if err != nil {
		p.fail(st, "SandboxFailed", err.Error())
		return
	}
	ip := ""
	if a, ok := p.cfg.Network.Addr(plan.id); ok {
		ip = a.String()
	}
	now := metav1.Now()
	st.mu.Lock()
	st.pod.Status.PodIP = ip
	if ip != "" {
		st.pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	st.mu.Unlock()
	if plan.agentbox {
		p.setRunning(st, now, 0)
		p.publish(st)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.watchAgent(ctx, st, info)
		}()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.runGeneric(ctx, st, info)
	}()
}

// createSandbox resolves the template and creates the sandbox; a PVC at
// /workspace becomes the claim's directory on the node.
func (p *provider) createSandbox(ctx context.Context, st *podState) error {
	plan := st.plan
	if !template.VisibleTo(plan.image, "") {
		// A pod's image is its author's choice (a tenant's, through the
		// kube backend), held to a tenant's rule: users' private snapshots
		// and the operator's build cache are not started from, nor pulled
		// into (TEMPLATE_AUTO_PULL) under their reserved names.
		return fmt.Errorf("image %s: private templates and the build cache of the node's store are not available to pods", plan.image)
	}
	tmpl, err := p.cfg.Templates.Resolve(ctx, plan.image)
	if err != nil {
		return fmt.Errorf("image %s: %w", plan.image, err)
	}
	if tmpl.Kind == sandbox.TemplateHost {
		return fmt.Errorf("image %s: the host template is not available to pods", plan.image)
	}
	plan.spec.Template = tmpl
	if plan.claim != "" {
		dir, err := p.claimDir(ctx, st.pod.Namespace, plan.claim)
		if err != nil {
			return err
		}
		plan.spec.WorkspaceDir = dir
	}
	if _, err := p.cfg.Backend.Create(ctx, plan.spec); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	return nil
}

// claimDir is the node directory of a PVC, named after the claim's UID:
// the same claim gets the same directory in the next pod.
func (p *provider) claimDir(ctx context.Context, ns, name string) (string, error) {
	pvc, err := p.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentVolumeClaim %s: %w", name, err)
	}
	dir := filepath.Join(p.cfg.VolumeDir, string(pvc.UID))
	if err := os.Mkdir(dir, 0o755); err == nil {
		// The sandbox user owns a new workspace, as on the sandbox's own
		// disk (the native backend then moves it to the sandbox's host ids).
		if err := os.Chown(dir, 1000, 1000); err != nil {
			return "", fmt.Errorf("persistentVolumeClaim %s: %w", name, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("persistentVolumeClaim %s: %w", name, err)
	}
	return dir, nil
}

// watchAgent marks the pod failed when its agent dies on its own.
func (p *provider) watchAgent(ctx context.Context, st *podState, info sandbox.Info) {
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address, Pid: info.Agent.Pid}, st.token)
	defer c.Close()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		in, err := p.cfg.Backend.Inspect(ctx, st.plan.id)
		if ctx.Err() != nil {
			return
		}
		if err != nil || in.State == sandbox.StateStopped || in.State == sandbox.StateError {
			reason := "sandbox gone"
			if err == nil {
				reason = in.Reason
			}
			p.terminate(st, corev1.PodFailed, 137, "AgentExited", reason)
			p.release(st) // before the status shows the end
			p.publish(st)
			return
		}
	}
}

// release destroys the sandbox of a pod that ended for good, as a kubelet
// stops its containers: nothing of it runs or holds resources until the
// pod is deleted; its status and log stay.
func (p *provider) release(st *podState) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.cfg.Backend.Destroy(ctx, st.plan.id); err != nil {
		p.log.Warn("destroy the sandbox of an ended pod", "pod", st.key, "err", err)
	}
}

// setRunning marks the pod running and ready.
func (p *provider) setRunning(st *podState, started metav1.Time, restarts int32) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := &st.pod.Status
	s.Phase = corev1.PodRunning
	s.ContainerStatuses = []corev1.ContainerStatus{{
		Name: st.plan.container, Image: st.plan.image, ImageID: st.plan.spec.Template.Digest,
		Ready: true, Started: ptr(true), RestartCount: restarts,
		ContainerID: "agentbox://" + string(st.plan.id),
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
	}}
	setConditions(s, true, started)
}

// terminate puts the pod in a terminal phase with the container's end.
func (p *provider) terminate(st *podState, phase corev1.PodPhase, code int32, reason, msg string) {
	now := metav1.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	s := &st.pod.Status
	s.Phase = phase
	var started metav1.Time
	if len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil {
		started = s.ContainerStatuses[0].State.Running.StartedAt
	}
	cs := corev1.ContainerStatus{Name: st.plan.container, Image: st.plan.image,
		ContainerID: "agentbox://" + string(st.plan.id),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, Message: msg, StartedAt: started, FinishedAt: now,
			ContainerID: "agentbox://" + string(st.plan.id)}}}
	if len(s.ContainerStatuses) == 1 {
		cs.RestartCount = s.ContainerStatuses[0].RestartCount
	}
	s.ContainerStatuses = []corev1.ContainerStatus{cs}
	setConditions(s, false, now)
}

// fail marks a pod that could not run.
func (p *provider) fail(st *podState, reason, msg string) {
	st.mu.Lock()
	s := &st.pod.Status
	s.Phase = corev1.PodFailed
	s.Reason, s.Message = reason, msg
	now := metav1.Now()
	for i := range s.ContainerStatuses {
		s.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: reason, Message: msg, FinishedAt: now}}
		s.ContainerStatuses[i].Ready = false
	}
	setConditions(s, false, now)
	st.mu.Unlock()
	p.publish(st)
}

// setConditions sets Initialized, ContainersReady and Ready.
func setConditions(s *corev1.PodStatus, ready bool, at metav1.Time) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	want := map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodScheduled:              corev1.ConditionTrue,
		corev1.PodInitialized:            corev1.ConditionTrue,
		corev1.ContainersReady:           status,
		corev1.PodReady:                  status,
		corev1.PodReadyToStartContainers: corev1.ConditionTrue,
	}
	var out []corev1.PodCondition
	for _, c := range s.Conditions {
		if v, ok := want[c.Type]; ok {
			if c.Status != v {
				c.Status, c.LastTransitionTime = v, at
			}
			delete(want, c.Type)
		}
		out = append(out, c)
	}
	types := make([]string, 0, len(want))
	for t := range want {
		types = append(types, string(t))
	}
	sort.Strings(types)
	for _, t := range types {
		out = append(out, corev1.PodCondition{Type: corev1.PodConditionType(t), Status: want[corev1.PodConditionType(t)], LastTransitionTime: at})
	}
	s.Conditions = out
}

func waiting(name, image, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

// initSkipped is the status of the agent installer, which the node does not
// run: the node's own agent is the sandbox's PID 1.
func initSkipped(name string, pod *corev1.Pod) corev1.ContainerStatus {
	image := ""
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			image = c.Image
		}
	}
	now := metav1.Now()
	return corev1.ContainerStatus{Name: name, Image: image, Ready: true,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", Message: "skipped: the agentbox node provides the agent", StartedAt: now, FinishedAt: now}}}
}

// UpdatePod keeps the node's copy of labels and annotations current; the
// running sandbox does not change.
func (p *provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	st := p.get(pod.Namespace, pod.Name)
	if st == nil {
		return errdefs.NotFoundf("pod %s/%s is not on this node", pod.Namespace, pod.Name)
	}
	st.mu.Lock()
	st.pod.Labels, st.pod.Annotations = pod.Labels, pod.Annotations
	st.mu.Unlock()
	return nil
}

// DeletePod destroys the pod's sandbox (processes, cgroups, mounts, disk,
// network) and reports its containers terminated; virtual-kubelet then
// removes the pod. A PVC's directory is removed once the claim is gone.
func (p *provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	st := p.get(pod.Namespace, pod.Name)
	if st == nil {
		return errdefs.NotFoundf("pod %s/%s is not on this node", pod.Namespace, pod.Name)
	}
	if err := p.destroy(ctx, st); err != nil {
		return err
	}
	st.mu.Lock()
	already := st.deleted
	st.deleted = true
	phase := st.pod.Status.Phase
	st.mu.Unlock()
	if !already && st.plan != nil && phase != corev1.PodFailed && phase != corev1.PodSucceeded {
		p.terminate(st, corev1.PodSucceeded, 0, "Completed", "pod deleted")
	}
	p.publish(st)
	p.mu.Lock()
	delete(p.pods, st.key)
	p.mu.Unlock()
	st.mu.Lock()
	logPath := st.logPath
	st.mu.Unlock()
	if st.plan != nil && !st.plan.agentbox && logPath != "" {
		// A generic pod's log is the node's file; an agentbox pod's went
		// with its sandbox.
		if err := removePodLog(logPath); err != nil {
			p.log.Warn("remove a deleted pod's log", "pod", st.key, "err", err)
		}
	}
	if st.plan != nil && st.plan.claim != "" && st.plan.spec.WorkspaceDir != "" {
		p.sweepClaim(ctx, pod.Namespace, st.plan.claim, st.plan.spec.WorkspaceDir)
	}
	return nil
}

// destroy stops the pod's goroutines and destroys its sandbox.
func (p *provider) destroy(ctx context.Context, st *podState) error {
	if st.cancel != nil {
		st.cancel()
	}
	<-st.ready
	if st.plan == nil {
		return nil
	}
	if err := p.cfg.Backend.Destroy(ctx, st.plan.id); err != nil {
		return fmt.Errorf("destroy sandbox of %s: %w", st.key, err)
	}
	return nil
}

// sweepClaim removes a claim's directory once the claim is gone (or going):
// its next pod would get a new claim, and a new UID.
func (p *provider) sweepClaim(ctx context.Context, ns, name, dir string) {
	pvc, err := p.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && pvc.DeletionTimestamp == nil && filepath.Join(p.cfg.VolumeDir, string(pvc.UID)) == dir:
		return
	case err != nil && !apierrors.IsNotFound(err):
		p.log.Warn("cannot tell whether a claim is gone; its directory stays", "claim", ns+"/"+name, "err", err)
		return
	}
	p.mu.Lock()
	for _, other := range p.pods {
		if other.plan != nil && other.plan.spec.WorkspaceDir == dir {
			p.mu.Unlock()
			return
		}
	}
	p.mu.Unlock()
	if err := os.RemoveAll(dir); err != nil {
		p.log.Warn("remove the directory of a deleted claim", "dir", dir, "err", err)
	}
}

// GetPod implements PodLifecycleHandler.
func (p *provider) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	st := p.get(ns, name)
	if st == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", ns, name)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.pod.DeepCopy(), nil
}

// GetPodStatus implements PodLifecycleHandler.
func (p *provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods implements PodLifecycleHandler.
func (p *provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	states := make([]*podState, 0, len(p.pods))
	for _, st := range p.pods {
		states = append(states, st)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(states))
	for _, st := range states {
		st.mu.Lock()
		out = append(out, st.pod.DeepCopy())
		st.mu.Unlock()
	}
	return out, nil
}

// shutdown destroys every pod's sandbox (the node is going away).
func (p *provider) shutdown(ctx context.Context) error {
	p.mu.Lock()
	states := make([]*podState, 0, len(p.pods))
	for _, st := range p.pods {
		states = append(states, st)
	}
	p.pods = map[string]*podState{}
	p.mu.Unlock()
	var errs []error
	for _, st := range states {
		errs = append(errs, p.destroy(ctx, st))
	}
	p.wg.Wait()
	return errors.Join(errs...)
}

// backendOf is what the provider needs of the native backend.
var _ interface {
	OpenAgentLog(context.Context, sandbox.ID) (*os.File, error)
} = (*native.Backend)(nil)

func ptr[T any](v T) *T { return &v }
