package kube

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"path"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Paths and names inside a sandbox pod.
const (
	agentDir           = "/opt/agentbox"
	agentInSandbox     = agentDir + "/agentbox-agent"
	agentInImage       = "/agentbox-agent" // in Config.AgentImage
	workspaceInSandbox = "/workspace"
	sandboxHome        = "/home/user"
	sandboxUID         = int64(1000)

	agentVolume     = "agentbox-agent"
	workspaceVolume = "workspace"
	homeVolume      = "home"
	tmpVolume       = "tmp"

	containerName = "sandbox"
	// secretToken and secretSpec are the keys of a sandbox's Secret: the
	// agent's access token, and the spec Recover returns (its environment
	// may hold secrets too, so neither goes into labels or annotations).
	secretToken = "access-token"
	secretSpec  = "spec.json"
	secretPool  = "pool"
)

// Limits no request can go below (as native's).
const (
	minMemoryBytes = 16 << 20
	minPIDs        = 8
)

// validate checks what the backend can run, before anything is created.
func (b *Backend) validate(spec sandbox.Spec) error {
	if err := spec.ID.Validate(); err != nil {
		return err
	}
	if len(objectName(spec.ID)) > 63 || strings.HasSuffix(string(spec.ID), "-") {
		return sandbox.Errorf(sandbox.ClassInvalid, "sandbox id %q: the kube backend takes ids of at most 60 characters not ending in '-'", spec.ID)
	}
	if spec.Template.Kind != TemplateKind || imageOf(spec.Template) == "" {
		return sandbox.Errorf(sandbox.ClassInvalid, "template %q (kind %q): the kube backend runs images (kube:IMAGE)", spec.Template.Ref, spec.Template.Kind)
	}
	r := spec.Resources
	switch {
	case r.MemoryBytes < minMemoryBytes:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.memory: at least %d MiB", minMemoryBytes>>20)
	case r.CPUs < 0.01 || r.CPUs > 1024:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.cpus: must be between 0.01 and 1024")
	case r.PIDs < minPIDs:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.pids: at least %d", minPIDs)
	case r.TmpBytes < 1<<20:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.tmp: at least 1 MiB")
	case r.DiskBytes < 1<<20:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.disk: at least 1 MiB (the workspace volume)")
	}
	if spec.AccessToken == "" {
		// The agent listens on the pod IP, reachable from outside the
		// sandbox: never without a token.
		return sandbox.Errorf(sandbox.ClassInvalid, "sandboxes on the kube backend need an access token")
	}
	if spec.Root && !b.cfg.UserNamespaces {
		// Without a pod user namespace root in the pod is root on the node:
		// native's guarantee that a root sandbox is root only in its own
		// user namespace would not hold.
		return sandbox.Errorf(sandbox.ClassInvalid, "root sandboxes on Kubernetes need pod user namespaces (K8S_USER_NAMESPACES=true)")
	}
	if spec.WorkspaceDir != "" || len(spec.Mounts) > 0 {
		// Host directories are the daemon's host's, not the node's.
		return sandbox.Errorf(sandbox.ClassInvalid, "host directories (mount_dir, READONLY_MOUNTS) are not available on the kube backend")
	}
	if _, err := egressRules(spec.Network); err != nil {
		return err
	}
	return nil
}

// imageOf is the image of a kube template: its Ref without "kube:".
func imageOf(t sandbox.Template) string { return strings.TrimPrefix(t.Ref, TemplatePrefix) }

// labels are the labels of every object of a sandbox.
func (b *Backend) labels(id sandbox.ID) map[string]string {
	return map[string]string{LabelSandbox: string(id), LabelInstance: b.cfg.Instance, LabelManagedBy: ManagedBy}
}

func seccompProfile(s string) (*corev1.SeccompProfile, error) {
	switch {
	case s == "" || s == "RuntimeDefault":
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, nil
	case strings.HasPrefix(s, "Localhost/"):
		p := strings.TrimPrefix(s, "Localhost/")
		if p == "" || path.IsAbs(p) || path.Clean(p) != p || strings.HasPrefix(p, "..") {
			return nil, fmt.Errorf("kube: seccomp profile %q: want Localhost/<path relative to the kubelet's seccomp dir>", s)
		}
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &p}, nil
	}
	return nil, fmt.Errorf("kube: seccomp profile %q: want RuntimeDefault or Localhost/<path> (Unconfined is never used)", s)
}

// sandboxObject is the Sandbox of spec: its pod template runs the
// template's image with the agent as PID 1, locked down.
func (b *Backend) sandboxObject(spec sandbox.Spec) *sbv1.Sandbox {
	noService := false // the daemon dials the pod IP: no headless Service
	return &sbv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(spec.ID), Namespace: b.cfg.Namespace, Labels: b.labels(spec.ID)},
		Spec: sbv1.SandboxSpec{
			SandboxBlueprint: sbv1.SandboxBlueprint{
				PodTemplate: sbv1.PodTemplate{
					ObjectMeta: sbv1.PodMetadata{Labels: b.podLabels(spec.ID), Annotations: podAnnotations(spec)},
					Spec:       b.podSpec(spec, secretName(spec.ID)),
				},
				VolumeClaimTemplates: []sbv1.PersistentVolumeClaimTemplate{b.workspaceTemplate(spec)},
				Service:              &noService,
			},
			OperatingMode: sbv1.SandboxOperatingModeRunning,
		},
	}
}

// Pod annotations an agentbox node reads (docs/kubernetes.md, "Pods on an
// agentbox node"): the egress policy as the native API's network object,
// which the node enforces with native's filter (domain names included),
// and the pids limit, which a pod spec cannot express.
const (
	AnnotationNetwork = "agentbox.dev/network"
	AnnotationPids    = "agentbox.dev/pids"
)

func podAnnotations(spec sandbox.Spec) map[string]string {
	n := spec.Network
	if n.Mode == "" {
		n.Mode = sandbox.NetworkNone
	}
	data, _ := json.Marshal(n) // plain strings: cannot fail
	return map[string]string{AnnotationNetwork: string(data), AnnotationPids: strconv.FormatInt(spec.Resources.PIDs, 10)}
}

func (b *Backend) podLabels(id sandbox.ID) map[string]string {
	l := b.labels(id)
	l[LabelRole] = RoleSbx
	return l
}

func (b *Backend) workspaceTemplate(spec sandbox.Spec) sbv1.PersistentVolumeClaimTemplate {
	t := sbv1.PersistentVolumeClaimTemplate{
		EmbeddedObjectMetadata: sbv1.EmbeddedObjectMetadata{Name: workspaceVolume, Labels: b.labels(spec.ID)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(spec.Resources.DiskBytes, resource.BinarySI),
			}},
		},
	}
	if b.cfg.StorageClass != "" {
		sc := b.cfg.StorageClass
		t.Spec.StorageClassName = &sc
	}
	return t
}

// podSpec is the pod of a sandbox. secret names the Secret holding the
// agent's access token.
func (b *Backend) podSpec(spec sandbox.Spec, secret string) corev1.PodSpec {
	res := spec.Resources
	f, t := false, true
	uid, home, uname := sandboxUID, sandboxHome, "user"
	if spec.Root {
		uid, home, uname = 0, "/root", "root"
	}
	seccomp, _ := seccompProfile(b.cfg.SeccompProfile) // checked by New
	env := map[string]string{
		"HOME": home, "USER": uname, "LOGNAME": uname, "SHELL": "/bin/sh",
		"LANG": "C.UTF-8", "TERM": "xterm-256color", "HOSTNAME": string(spec.ID),
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	if spec.Service != nil {
		// Read and scrubbed by the agent before anything else runs.
		if data, err := json.Marshal(spec.Service); err == nil {
			env["AGENTBOX_SERVICE"] = string(data)
		}
	}
	delete(env, "AGENTBOX_ACCESS_TOKEN") // only ever from the Secret
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	envVars := make([]corev1.EnvVar, 0, len(keys)+1)
	for _, k := range keys {
		envVars = append(envVars, corev1.EnvVar{Name: k, Value: env[k]})
	}
	envVars = append(envVars, corev1.EnvVar{Name: "AGENTBOX_ACCESS_TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: secretToken},
	}})

	limits := corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(res.MemoryBytes, resource.BinarySI),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(res.CPUs*1000), resource.DecimalSI),
	}
	if spec.WritableRoot {
		// A writable root layer is node disk the workspace claim does not
		// bound. Only then: a request for ephemeral storage keeps a pod
		// off nodes that do not advertise it.
		limits[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(res.DiskBytes, resource.BinarySI)
	}
	gid := uid
	secCtx := &corev1.SecurityContext{
		RunAsUser:                &uid,
		RunAsGroup:               &gid,
		RunAsNonRoot:             &t,
		ReadOnlyRootFilesystem:   &t,
		AllowPrivilegeEscalation: &f,
		Privileged:               &f,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           seccomp,
	}
	if spec.Root {
		secCtx.RunAsNonRoot = &f
		// Root keeps what native's root sandboxes have, inside the pod's
		// user namespace (validate requires one).
		secCtx.Capabilities.Add = rootCapabilities
	}
	if spec.WritableRoot {
		secCtx.ReadOnlyRootFilesystem = &f
	}
	tmpSize := resource.NewQuantity(res.TmpBytes, resource.BinarySI)
	agentSize := resource.NewQuantity(64<<20, resource.BinarySI)
	grace := int64(1) // the agent, PID 1, ignores SIGTERM: stop is a kill
	ps := corev1.PodSpec{
		AutomountServiceAccountToken:  &f,
		EnableServiceLinks:            &f,
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: &grace,
		Hostname:                      string(spec.ID),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser:      &uid,
			RunAsGroup:     &gid,
			FSGroup:        &gid,
			RunAsNonRoot:   secCtx.RunAsNonRoot,
			SeccompProfile: seccomp,
		},
		// Only pods of the sandbox role go to a node tainted for
		// sandboxes (an agentbox node); elsewhere the toleration is moot.
		Tolerations: []corev1.Toleration{{Key: TaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		InitContainers: []corev1.Container{{
			Name:            "agent-install",
			Image:           b.cfg.AgentImage,
			ImagePullPolicy: b.cfg.ImagePullPolicy,
			Command:         []string{agentInImage, "install", agentDir + "/agentbox-agent"},
			SecurityContext: secCtx.DeepCopy(),
			Resources:       corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(64<<20, resource.BinarySI), corev1.ResourceCPU: resource.MustParse("100m")}},
			VolumeMounts:    []corev1.VolumeMount{{Name: agentVolume, MountPath: agentDir}},
		}},
		Containers: []corev1.Container{{
			Name:            containerName,
			Image:           imageOf(spec.Template),
			ImagePullPolicy: b.cfg.ImagePullPolicy,
			Command:         []string{agentInSandbox, "--listen", "tcp://0.0.0.0:" + strconv.Itoa(AgentPort), "--workdir", workspaceInSandbox},
			Args:            []string{},
			WorkingDir:      "/",
			Env:             envVars,
			Ports:           []corev1.ContainerPort{{Name: "agent", ContainerPort: AgentPort, Protocol: corev1.ProtocolTCP}},
			Resources:       corev1.ResourceRequirements{Limits: limits, Requests: limits.DeepCopy()},
			SecurityContext: secCtx,
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(AgentPort)}},
				PeriodSeconds: 1, FailureThreshold: 3,
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: agentVolume, MountPath: agentDir, ReadOnly: true},
				{Name: workspaceVolume, MountPath: workspaceInSandbox},
				{Name: homeVolume, MountPath: home},
				{Name: tmpVolume, MountPath: "/tmp"},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: agentVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: agentSize}}},
			{Name: homeVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: tmpSize}}},
			{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpSize}}},
			// workspace: the controller adds the PVC of volumeClaimTemplates.
		},
	}
	if len(b.cfg.NodeSelector) > 0 {
		ps.NodeSelector = maps.Clone(b.cfg.NodeSelector)
	}
	if rc := b.cfg.RuntimeClass; spec.Isolation == sandbox.IsolationGVisor {
		// CheckIsolation refused it unless the class is set.
		rc = b.cfg.GVisorRuntimeClass
		ps.RuntimeClassName = &rc
	} else if rc != "" {
		ps.RuntimeClassName = &rc
	}
	if b.cfg.UserNamespaces {
		ps.HostUsers = &f
	}
	return ps
}

// TaintKey is the taint of nodes that only run sandbox pods (agentbox
// nodes); sandbox pods tolerate it.
const TaintKey = "agentbox.dev/sandbox-node"

// rootCapabilities are a root sandbox's capabilities (as native's).
var rootCapabilities = []corev1.Capability{
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
	"SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE",
	"AUDIT_WRITE", "SETFCAP",
}

// egressRules turns a sandbox's egress policy (checked as native checks
// it) into NetworkPolicy egress rules: none allows nothing; egress allows
// the public internet (or the allowed CIDRs) minus the blocked ranges and
// the denied CIDRs. A NetworkPolicy cannot name hosts: domain names in
// allow_out are left out of it, so where only the NetworkPolicy acts
// those hosts stay unreachable (fail closed); an agentbox node enforces
// them from the pod's network annotation with native's DNS-aware filter.
func egressRules(n sandbox.Network) ([]networkingv1.NetworkPolicyEgressRule, error) {
	if n.Mode == "" {
		n.Mode = sandbox.NetworkNone
	}
	if err := netpolicy.Validate(n); err != nil {
		return nil, err
	}
	if n.Mode == sandbox.NetworkNone {
		return nil, nil
	}
	cidrs := func(entries []string) []netip.Prefix {
		var out []netip.Prefix
		for _, e := range entries {
			e = strings.TrimSpace(e)
			p, err := netip.ParsePrefix(e)
			if err != nil {
				a, aerr := netip.ParseAddr(e)
				if aerr != nil {
					continue // a domain name
				}
				a = a.Unmap()
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if p.Addr().Is4() {
				out = append(out, p.Masked())
			}
		}
		return out
	}
	allow, deny := cidrs(n.AllowOut), cidrs(n.DenyOut)
	if len(n.AllowOut) == 0 {
		allow = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	}
	var peers []networkingv1.NetworkPolicyPeer
	for _, a := range allow {
		var except []string
		covered := false
		for _, d := range append(netpolicy.PrivateRanges(), deny...) {
			switch {
			case d.Bits() <= a.Bits() && d.Contains(a.Addr()):
				covered = true // all of a is blocked
			case d.Bits() > a.Bits() && a.Contains(d.Addr()):
				except = append(except, d.String())
			}
		}
		if covered {
			continue
		}
		sort.Strings(except)
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: a.String(), Except: except}})
	}
	if len(peers) == 0 {
		return nil, nil
	}
	return []networkingv1.NetworkPolicyEgressRule{{To: peers}}, nil
}

// networkPolicy is the sandbox's NetworkPolicy: ingress only from the
// daemon's pods (the agent and preview ports), egress as egressRules.
// A sandbox with network none reaches nothing, not even cluster DNS.
func (b *Backend) networkPolicy(spec sandbox.Spec, rules []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(spec.ID), Namespace: b.cfg.Namespace, Labels: b.labels(spec.ID)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: string(spec.ID), LabelInstance: b.cfg.Instance}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelRole: RoleDaemon}}}},
			}},
			Egress: rules,
		},
	}
}

// secretObject holds the agent's token and the spec Recover returns.
func (b *Backend) secretObject(spec sandbox.Spec) (*corev1.Secret, error) {
	token := spec.AccessToken
	spec.AccessToken = ""
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("kube: encode spec: %w", err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName(spec.ID), Namespace: b.cfg.Namespace, Labels: b.labels(spec.ID)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{secretToken: []byte(token), secretSpec: data},
	}, nil
}
