package kubenode

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// resolved is sandboxPod as virtual-kubelet hands it to the node: env
// references resolved to values.
func resolved(p *corev1.Pod, token string) *corev1.Pod {
	p = p.DeepCopy()
	p.UID = "0b7c9a4e-2f4f-4c47-9d61-5b0a3c1f0e11"
	p.Namespace = "ns"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: tokenEnv, Value: token}, {Name: "HOME", Value: "/home/user"}}
	return p
}

func TestPlanSandboxPod(t *testing.T) {
	p, err := planPod(resolved(sandboxPod("s", "x"), "tok"), native.DefaultResources, sandbox.Resources{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.agentbox || p.image != "tiny" || len(p.skippedInit) != 1 || p.skippedInit[0] != "agent-install" {
		t.Fatalf("plan %+v", p)
	}
	s := p.spec
	if s.AgentListen != "tcp://0.0.0.0:49983" || s.AccessToken != "tok" || s.Env[tokenEnv] != "" || s.Env["HOME"] != "/home/user" {
		t.Fatalf("agent listen %q token %q env %v", s.AgentListen, s.AccessToken, s.Env)
	}
	if s.Resources.MemoryBytes != 256<<20 || s.Resources.CPUs != 0.5 || s.Resources.TmpBytes != 64<<20 || s.Resources.PIDs != native.DefaultResources.PIDs {
		t.Fatalf("resources %+v", s.Resources)
	}
	if s.WritableRoot || s.Root || s.Network.Mode != sandbox.NetworkEgress || len(s.Network.DenyOut) != 1 {
		t.Fatalf("writable %v root %v network %+v", s.WritableRoot, s.Root, s.Network)
	}
	if s.ID != sandboxID(string(resolved(sandboxPod("s", "x"), "").UID)) || s.ID.Validate() != nil {
		t.Fatalf("id %q", s.ID)
	}
}

func TestPlanRefusals(t *testing.T) {
	tr := true
	cases := map[string]func(p *corev1.Pod){
		"privileged":  func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Privileged = &tr },
		"hostNetwork": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"capability": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		},
		"hostPath": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "h", MountPath: "/host"})
		},
		"emptyDir elsewhere": func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/etc"})
		},
		"two containers": func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) },
		"other init": func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "x", Image: "tiny", Command: []string{"/bin/sh"}})
		},
		"unknown agent flag": func(p *corev1.Pod) {
			p.Spec.Containers[0].Command = append(p.Spec.Containers[0].Command, "--log-level", "debug")
		},
		"agent on a unix socket": func(p *corev1.Pod) {
			p.Spec.Containers[0].Command = []string{"/opt/agentbox/agentbox-agent", "--listen", "unix:///tmp/a.sock"}
		},
		"no token": func(p *corev1.Pod) { p.Spec.Containers[0].Env = nil },
		"bad network": func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationNetwork: `{"mode":"egress","allow":["x"]}`}
		},
		"bad pids": func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationPIDs: "-1"} },
		// What else a pod spec could ask of a node (probes of what the kube
		// backend's tenants or the cluster's users can write).
		"hostPID": func(p *corev1.Pod) { p.Spec.HostPID = true },
		"hostIPC": func(p *corev1.Pod) { p.Spec.HostIPC = true },
		"CAP_ prefixed capability": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"CAP_SYS_ADMIN"}
		},
		"NET_RAW": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		},
		"MKNOD": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"MKNOD"}
		},
		"ALL caps": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"ALL"}
		},
		"unmasked /proc": func(p *corev1.Pod) {
			m := corev1.UnmaskedProcMount
			p.Spec.Containers[0].SecurityContext.ProcMount = &m
		},
		"secret volume": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "other"}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "s", MountPath: "/workspace"})
		},
		"projected volume elsewhere": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "pr", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "pr", MountPath: "/secrets"})
		},
		"claim elsewhere": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "c", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "c", MountPath: "/etc"})
		},
		"emptyDir below a home": func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/home/user/.ssh"})
		},
		"volume device": func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "tmp", DevicePath: "/dev/sda"}}
		},
		"ephemeral container": func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "tiny"}}}
		},
		"envFrom": func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}}}
		},
		"unresolved env reference": func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}})
		},
		"agent flag smuggled as a value": func(p *corev1.Pod) {
			p.Spec.Containers[0].Args = []string{"--workdir=/w", "--seccomp-fd=-1"}
		},
		"memory too big": func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("64Gi")
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			p := resolved(sandboxPod("s", "x"), "tok")
			mutate(p)
			if _, err := planPod(p, native.DefaultResources, sandbox.Resources{MemoryBytes: 8 << 30}); err == nil {
				t.Fatal("planned, want a refusal")
			}
		})
	}
}

func TestPlanGenericPod(t *testing.T) {
	p := genericPod("g", []string{"/bin/sh", "-c", "echo hi"})
	p.UID = "u1"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "AGENTBOX_SERVICE", Value: "{}"}}
	p.Annotations = map[string]string{AnnotationNetwork: `{"mode":"egress","allow_out":["1.2.3.0/24"]}`, AnnotationPIDs: "64"}
	plan, err := planPod(p, native.DefaultResources, sandbox.Resources{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.agentbox || strings.Join(plan.cmd, " ") != "/bin/sh -c echo hi" {
		t.Fatalf("plan %+v", plan)
	}
	s := plan.spec
	if s.Env["A"] != "1" || s.Env["AGENTBOX_SERVICE"] != "" || s.AgentListen != "" {
		t.Fatalf("env %v listen %q", s.Env, s.AgentListen)
	}
	if !s.WritableRoot || s.Resources.PIDs != 64 || len(s.Network.AllowOut) != 1 || len(s.Network.DenyOut) != 0 {
		t.Fatalf("writable %v pids %d network %+v", s.WritableRoot, s.Resources.PIDs, s.Network)
	}
	// A pod's label alone does not make the node trust its command as the
	// agent's: the command must be the agent.
	p.Labels = map[string]string{LabelSandbox: "x"}
	if plan, err := planPod(p, native.DefaultResources, sandbox.Resources{}); err != nil || plan.agentbox {
		t.Fatalf("labelled generic pod: agentbox %v, err %v", plan != nil && plan.agentbox, err)
	}
}

// recordingTemplates resolves nothing and remembers what it was asked.
type recordingTemplates struct{ asked []string }

func (r *recordingTemplates) Resolve(_ context.Context, ref string) (sandbox.Template, error) {
	r.asked = append(r.asked, ref)
	return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", ref)
}

// TestSecurityPodImageNotPrivate: a pod's image is a name its author
// chose (a tenant, through the kube backend's kube:IMAGE). As for a
// tenant of the daemon, a user's private snapshot or the operator's
// build cache in the node's template store is not a template it may
// start from: the node refuses such names before it looks them up.
func TestSecurityPodImageNotPrivate(t *testing.T) {
	for _, image := range []string{"build-cache/0123456789abcdef0123456789abcdef", "private/u0123456789abcdef/snap:latest"} {
		pod := genericPod("g", []string{"/bin/true"})
		pod.UID = "u1"
		pod.Spec.Containers[0].Image = image
		plan, err := planPod(pod, native.DefaultResources, sandbox.Resources{})
		if err != nil {
			t.Fatalf("%s: %v", image, err)
		}
		tmpl := &recordingTemplates{}
		p := &provider{cfg: &Config{Templates: tmpl}}
		err = p.createSandbox(context.Background(), &podState{plan: plan, pod: pod})
		if err == nil || len(tmpl.asked) > 0 {
			t.Errorf("image %s: looked up %v (err %v): a pod may start from a private template of the node's store", image, tmpl.asked, err)
		}
	}
}
