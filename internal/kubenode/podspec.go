package kubenode

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Labels, annotations and the taint of the node (docs/kubernetes.md,
// "Pods on an agentbox node"). The kube backend uses the same names.
const (
	// LabelSandbox marks a pod the kube backend made for a sandbox.
	LabelSandbox = "agentbox.dev/sandbox"
	// LabelNode is on every agentbox node, for node selectors.
	LabelNode = "agentbox.dev/node"
	// TaintKey keeps pods that do not tolerate it off agentbox nodes.
	TaintKey = "agentbox.dev/sandbox-node"
	// AnnotationNetwork is the sandbox's egress policy, the native API's
	// network object as JSON; absent means no connections out.
	AnnotationNetwork = "agentbox.dev/network"
	// AnnotationPIDs is the pids limit of the sandbox.
	AnnotationPIDs = "agentbox.dev/pids"

	// tokenEnv carries the agent's access token in a sandbox pod.
	tokenEnv = "AGENTBOX_ACCESS_TOKEN"
	// agentBinary is how a sandbox pod's command names the agent.
	agentBinary = "agentbox-agent"
	// serviceAccountDir is where the ServiceAccount admission plugin
	// mounts a token: never given to a sandbox.
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// rootCapabilities are what a root sandbox has (native's set); a pod may
// add none beyond these.
var rootCapabilities = map[corev1.Capability]bool{
	"CHOWN": true, "DAC_OVERRIDE": true, "FOWNER": true, "FSETID": true, "KILL": true,
	"SETGID": true, "SETUID": true, "SETPCAP": true, "NET_BIND_SERVICE": true,
	"AUDIT_WRITE": true, "SETFCAP": true,
}

// podPlan is what the node runs for one pod.
type podPlan struct {
	id    sandbox.ID
	image string
	// agentbox: a kube backend sandbox pod (the agent is the workload).
	agentbox bool
	// skippedInit are the init containers reported as completed without
	// running (the agent installer).
	skippedInit []string
	container   string
	spec        sandbox.Spec
	// cmd, workdir and env of a generic pod's process (cmd empty: the
	// image's entrypoint and cmd, resolved with the template).
	cmd     []string
	args    []string
	workdir string
	// claim is the PVC mounted at /workspace, if any.
	claim string
}

// sandboxID is the sandbox of a pod: derived from the pod's UID, so a
// restarted node finds it again, and short enough for socket paths.
func sandboxID(uid string) sandbox.ID {
	sum := sha256.Sum256([]byte(uid))
	return sandbox.ID("k" + hex.EncodeToString(sum[:])[:19])
}

// planPod turns a pod into what the node runs, or says plainly why the
// node refuses it. env is the main container's environment with
// references already resolved (virtual-kubelet resolves them).
func planPod(pod *corev1.Pod, defaults, max sandbox.Resources) (*podPlan, error) {
	ps := &pod.Spec
	if len(ps.Containers) != 1 {
		return nil, fmt.Errorf("an agentbox node runs pods of one container, this one has %d", len(ps.Containers))
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		return nil, fmt.Errorf("host namespaces (hostNetwork, hostPID, hostIPC) are not available on an agentbox node")
	}
	if len(ps.EphemeralContainers) > 0 {
		return nil, fmt.Errorf("ephemeral containers are not supported on an agentbox node")
	}
	c := ps.Containers[0]
	p := &podPlan{id: sandboxID(string(pod.UID)), image: strings.TrimSpace(c.Image), container: c.Name}
	if p.image == "" {
		return nil, fmt.Errorf("container %s has no image", c.Name)
	}
	_, labelled := pod.Labels[LabelSandbox]
	p.agentbox = labelled && len(c.Command) > 0 && path.Base(c.Command[0]) == agentBinary
	for _, ic := range ps.InitContainers {
		if p.agentbox && isAgentInstaller(ic) {
			p.skippedInit = append(p.skippedInit, ic.Name)
			continue
		}
		return nil, fmt.Errorf("init container %s: an agentbox node runs no init containers (only the agent installer of a sandbox pod, which it skips)", ic.Name)
	}
	if err := checkSecurity(ps.SecurityContext, c.SecurityContext); err != nil {
		return nil, err
	}

	spec := sandbox.Spec{ID: p.id, Env: map[string]string{}}
	// The pod's host name, as a kubelet gives it: spec.hostname, else
	// the pod's name (when it is a DNS label).
	for _, h := range []string{ps.Hostname, pod.Name} {
		if h != "" && sandbox.ID(h).Validate() == nil && !strings.HasSuffix(h, "-") {
			spec.Hostname = h
			break
		}
	}
	spec.Labels = map[string]string{"k8s.namespace": pod.Namespace, "k8s.pod": pod.Name, "k8s.uid": string(pod.UID)}
	if runAsUser(ps.SecurityContext, c.SecurityContext) == 0 {
		spec.Root = true // inside a user namespace, as native's root sandboxes
	}
	ro := c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem
	spec.WritableRoot = !ro

	var token string
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			// virtual-kubelet resolves references before the node sees the
			// pod; one left means it could not.
			return nil, fmt.Errorf("env %s: unresolved reference", e.Name)
		}
		if e.Name == tokenEnv {
			token = e.Value
			continue
		}
		if !p.agentbox && strings.HasPrefix(e.Name, "AGENTBOX_") {
			continue // the agent's own configuration is not a generic pod's to set
		}
		spec.Env[e.Name] = e.Value
	}
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("envFrom is not supported on an agentbox node")
	}

	res, err := podResources(pod, c, defaults, max)
	if err != nil {
		return nil, err
	}
	spec.Resources = res
	if err := p.planVolumes(pod, c); err != nil {
		return nil, err
	}

	spec.Network, err = podNetwork(pod)
	if err != nil {
		return nil, err
	}

	if p.agentbox {
		listen, workdir, err := agentFlags(c.Command[1:], c.Args)
		if err != nil {
			return nil, err
		}
		if listen != "" {
			if token == "" {
				return nil, fmt.Errorf("the agent listens on %s without an access token (%s)", listen, tokenEnv)
			}
			spec.AgentListen = listen
		}
		spec.AccessToken = token
		p.workdir = workdir
	} else {
		p.cmd, p.args, p.workdir = c.Command, c.Args, c.WorkingDir
		if token != "" {
			spec.AccessToken = token
		}
	}
	p.spec = spec
	return p, nil
}

// isAgentInstaller reports whether an init container is the kube backend's
// agent installer (agentbox-agent install DEST), which copies the agent
// into the pod: the node brings its own.
func isAgentInstaller(c corev1.Container) bool {
	argv := append(append([]string{}, c.Command...), c.Args...)
	return len(argv) >= 2 && path.Base(argv[0]) == agentBinary && argv[1] == "install"
}

// agentFlags reads the flags of a sandbox pod's agent command that the node
// honours: --listen tcp://HOST:PORT (the pod IP's port) and --workdir.
// Unknown flags are refused rather than silently dropped.
func agentFlags(cmd, args []string) (listen, workdir string, err error) {
	argv := append(append([]string{}, cmd...), args...)
	for i := 0; i < len(argv); i++ {
		name, val, hasVal := strings.Cut(argv[i], "=")
		switch name {
		case "--listen", "-listen", "--workdir", "-workdir":
		default:
			return "", "", fmt.Errorf("agent flag %q is not supported on an agentbox node", argv[i])
		}
		if !hasVal {
			if i+1 >= len(argv) {
				return "", "", fmt.Errorf("agent flag %s needs a value", name)
			}
			i++
			val = argv[i]
		}
		switch strings.TrimLeft(name, "-") {
		case "listen":
			if !strings.HasPrefix(val, "tcp://") {
				return "", "", fmt.Errorf("agent --listen %q: an agentbox node serves the agent on tcp://HOST:PORT", val)
			}
			listen = val
		case "workdir":
			workdir = val
		}
	}
	return listen, workdir, nil
}

func checkSecurity(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) error {
	if c == nil {
		return nil
	}
	if c.Privileged != nil && *c.Privileged {
		return fmt.Errorf("privileged containers are not available on an agentbox node")
	}
	if c.Capabilities != nil {
		for _, capName := range c.Capabilities.Add {
			if !rootCapabilities[corev1.Capability(strings.TrimPrefix(string(capName), "CAP_"))] {
				return fmt.Errorf("capability %s is not available on an agentbox node", capName)
			}
		}
	}
	if c.ProcMount != nil && *c.ProcMount == corev1.UnmaskedProcMount {
		return fmt.Errorf("an unmasked /proc is not available on an agentbox node")
	}
	return nil
}

// runAsUser is the container's uid, the pod's, or -1 when neither says.
func runAsUser(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) int64 {
	if c != nil && c.RunAsUser != nil {
		return *c.RunAsUser
	}
	if pod != nil && pod.RunAsUser != nil {
		return *pod.RunAsUser
	}
	return -1
}

// podResources are the sandbox's limits: the container's limits (requests
// when no limit is given), the pids annotation, the /tmp emptyDir's size;
// zero fields take the node's defaults, and nothing exceeds its maximums.
func podResources(pod *corev1.Pod, c corev1.Container, defaults, max sandbox.Resources) (sandbox.Resources, error) {
	get := func(name corev1.ResourceName) *resource.Quantity {
		if q, ok := c.Resources.Limits[name]; ok {
			return &q
		}
		if q, ok := c.Resources.Requests[name]; ok {
			return &q
		}
		return nil
	}
	var r sandbox.Resources
	if q := get(corev1.ResourceMemory); q != nil {
		r.MemoryBytes = q.Value()
	}
	if q := get(corev1.ResourceCPU); q != nil {
		r.CPUs = float64(q.MilliValue()) / 1000
	}
	if q := get(corev1.ResourceEphemeralStorage); q != nil {
		r.DiskBytes = q.Value()
	}
	if v, ok := pod.Annotations[AnnotationPIDs]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return r, fmt.Errorf("annotation %s=%q: want a positive number", AnnotationPIDs, v)
		}
		r.PIDs = n
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/tmp" {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
				r.TmpBytes = v.EmptyDir.SizeLimit.Value()
			}
		}
	}
	if r.MemoryBytes < 0 || r.CPUs < 0 || r.DiskBytes < 0 || r.TmpBytes < 0 {
		return r, fmt.Errorf("negative resource limits")
	}
	r = r.WithDefaults(defaults)
	over := func(name string, v, m int64) error {
		if m > 0 && v > m {
			return fmt.Errorf("%s limit %d is above this node's maximum %d", name, v, m)
		}
		return nil
	}
	for _, e := range []error{
		over("memory", r.MemoryBytes, max.MemoryBytes),
		over("pids", r.PIDs, max.PIDs),
		over("ephemeral-storage", r.DiskBytes, max.DiskBytes),
		over("/tmp", r.TmpBytes, max.TmpBytes),
	} {
		if e != nil {
			return r, e
		}
	}
	if max.CPUs > 0 && r.CPUs > max.CPUs {
		return r, fmt.Errorf("cpu limit %g is above this node's maximum %g", r.CPUs, max.CPUs)
	}
	return r, nil
}

// planVolumes accepts the volumes a sandbox has anyway: emptyDirs at
// /workspace, /tmp, the home directory or the agent's directory (the
// sandbox's own disk and tmpfs), a PVC at /workspace (kept on the node),
// and the ServiceAccount token, which is never mounted.
func (p *podPlan) planVolumes(pod *corev1.Pod, c corev1.Container) error {
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	if len(c.VolumeDevices) > 0 {
		return fmt.Errorf("volume devices are not available on an agentbox node")
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return fmt.Errorf("volume mount %s: no such volume", m.Name)
		}
		switch {
		case m.MountPath == serviceAccountDir && v.Projected != nil:
			// A ServiceAccount token: sandboxes get none.
		case v.EmptyDir != nil && emptyDirPath(m.MountPath):
		case v.PersistentVolumeClaim != nil && m.MountPath == "/workspace":
			p.claim = v.PersistentVolumeClaim.ClaimName
		default:
			return fmt.Errorf("volume %s at %s: an agentbox node provides emptyDirs at /workspace, /tmp, /home/* or /opt/agentbox and a persistentVolumeClaim at /workspace only", m.Name, m.MountPath)
		}
	}
	return nil
}

func emptyDirPath(p string) bool {
	switch {
	case p == "/workspace", p == "/tmp", p == "/root", p == "/opt/agentbox":
		return true
	case strings.HasPrefix(p, "/home/") && !strings.Contains(p[len("/home/"):], "/"):
		return true
	}
	return false
}

// podNetwork is the egress policy of the annotation; without one the
// sandbox may open no connection. Either way it has an address of its own
// (the pod IP), so the mode is always egress underneath.
func podNetwork(pod *corev1.Pod) (sandbox.Network, error) {
	deny := sandbox.Network{Mode: sandbox.NetworkEgress, DenyOut: []string{"0.0.0.0/0"}}
	raw, ok := pod.Annotations[AnnotationNetwork]
	if !ok {
		return deny, nil
	}
	var n sandbox.Network
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return n, fmt.Errorf("annotation %s: %v", AnnotationNetwork, err)
	}
	switch n.Mode {
	case "", sandbox.NetworkNone:
		if len(n.AllowOut)+len(n.DenyOut) > 0 {
			return n, fmt.Errorf("annotation %s: allow_out and deny_out need mode egress", AnnotationNetwork)
		}
		return deny, nil
	case sandbox.NetworkEgress:
		return n, nil
	}
	return n, fmt.Errorf("annotation %s: mode must be none or egress, not %q", AnnotationNetwork, n.Mode)
}
