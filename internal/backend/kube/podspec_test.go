package kube

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

func testBackend(cfg Config) *Backend {
	if cfg.Namespace == "" {
		cfg.Namespace = "ns"
	}
	if cfg.Instance == "" {
		cfg.Instance = "inst"
	}
	if cfg.AgentImage == "" {
		cfg.AgentImage = "registry.example/agentbox-agent:1"
	}
	cfg.Defaults = cfg.Defaults.WithDefaults(DefaultResources)
	return &Backend{cfg: cfg}
}

func testSpec() sandbox.Spec {
	return sandbox.Spec{ID: "abc123", Template: sandbox.Template{Ref: "kube:python:3.12", Kind: TemplateKind},
		Resources: DefaultResources, AccessToken: "s3cret", Env: map[string]string{"FOO": "bar"},
		Network: sandbox.Network{Mode: sandbox.NetworkNone}, Labels: map[string]string{"owner": "alice"}}
}

// checkLockedDown fails t unless ps is the locked-down pod of a non-root
// sandbox with the given resources.
func checkLockedDown(t *testing.T, ps corev1.PodSpec, res sandbox.Resources) {
	t.Helper()
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("service account token is mounted")
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		t.Error("service links are on")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Error("host namespaces shared")
	}
	if psc := ps.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 1000 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context = %+v", psc)
	}
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 1 {
		t.Fatalf("containers = %d, init = %d", len(ps.Containers), len(ps.InitContainers))
	}
	for _, c := range append(slices.Clone(ps.InitContainers), ps.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Privileged == nil || *sc.Privileged ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
			sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s security context = %+v", c.Name, sc)
		}
		if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
			t.Errorf("container %s has no limits", c.Name)
		}
	}
	c := ps.Containers[0]
	if got := c.Resources.Limits.Memory().Value(); got != res.MemoryBytes {
		t.Errorf("memory limit = %d, want %d", got, res.MemoryBytes)
	}
	if got := c.Resources.Limits.Cpu().MilliValue(); got != int64(res.CPUs*1000) {
		t.Errorf("cpu limit = %dm, want %v", got, res.CPUs)
	}
	if len(c.Command) == 0 || c.Command[0] != agentInSandbox || !slices.Contains(c.Command, "tcp://0.0.0.0:49983") {
		t.Errorf("command = %q, want the agent on tcp :49983", c.Command)
	}
	var agentRO bool
	for _, m := range c.VolumeMounts {
		if m.MountPath == agentDir {
			agentRO = m.ReadOnly
		}
	}
	if !agentRO {
		t.Error("the agent's volume is not mounted read-only")
	}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path", v.Name)
		}
	}
}

func TestPodSpecLockedDown(t *testing.T) {
	b := testBackend(Config{})
	spec := testSpec()
	sb := b.sandboxObject(spec)
	ps := sb.Spec.PodTemplate.Spec
	checkLockedDown(t, ps, spec.Resources)
	if ps.RuntimeClassName != nil || ps.HostUsers != nil {
		t.Errorf("runtime class %v, hostUsers %v without configuration", ps.RuntimeClassName, ps.HostUsers)
	}
	c := ps.Containers[0]
	if c.Image != "python:3.12" || ps.InitContainers[0].Image != b.cfg.AgentImage {
		t.Errorf("images = %s, %s", c.Image, ps.InitContainers[0].Image)
	}
	var token *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == "AGENTBOX_ACCESS_TOKEN" {
			token = &c.Env[i]
		}
		if strings.Contains(e.Value, "s3cret") {
			t.Errorf("the access token is in the pod spec: %s", e.Name)
		}
	}
	if token == nil || token.ValueFrom == nil || token.ValueFrom.SecretKeyRef == nil || token.ValueFrom.SecretKeyRef.Name != secretName(spec.ID) {
		t.Errorf("token env = %+v, want a secretKeyRef", token)
	}
	for _, want := range []string{"FOO", "HOME", "HOSTNAME"} {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == want }) {
			t.Errorf("env %s missing", want)
		}
	}
	for _, l := range []map[string]string{sb.Labels, sb.Spec.PodTemplate.ObjectMeta.Labels, sb.Spec.VolumeClaimTemplates[0].Labels} {
		if l[LabelSandbox] != "abc123" || l[LabelManagedBy] != ManagedBy || l[LabelInstance] != "inst" {
			t.Errorf("labels = %v", l)
		}
	}
	if got := sb.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().Value(); got != spec.Resources.DiskBytes {
		t.Errorf("workspace claim = %d bytes, want %d", got, spec.Resources.DiskBytes)
	}
	ann := sb.Spec.PodTemplate.ObjectMeta.Annotations
	if ann[AnnotationNetwork] != `{"mode":"none"}` || ann[AnnotationPids] != "256" {
		t.Errorf("pod annotations = %v", ann)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
		t.Error("an ephemeral storage limit without a writable root")
	}
	if ps.NodeSelector != nil {
		t.Errorf("node selector %v without configuration", ps.NodeSelector)
	}
	sec, err := b.secretObject(spec)
	if err != nil || string(sec.Data[secretToken]) != "s3cret" || strings.Contains(string(sec.Data[secretSpec]), "s3cret") {
		t.Errorf("secret = %v, %v", sec, err)
	}
}

func TestPodSpecOptions(t *testing.T) {
	b := testBackend(Config{RuntimeClass: "gvisor", UserNamespaces: true, SeccompProfile: "Localhost/agentbox.json", StorageClass: "fast",
		NodeSelector: map[string]string{"agentbox.dev/node": "true"}})
	spec := testSpec()
	spec.Network = sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"example.org", "1.2.3.0/24"}}
	spec.Root = true
	spec.WritableRoot = true
	if err := b.validate(spec); err != nil {
		t.Fatal(err)
	}
	sb := b.sandboxObject(spec)
	ps := sb.Spec.PodTemplate.Spec
	if ps.RuntimeClassName == nil || *ps.RuntimeClassName != "gvisor" || ps.HostUsers == nil || *ps.HostUsers {
		t.Errorf("runtime class %v, hostUsers %v", ps.RuntimeClassName, ps.HostUsers)
	}
	sc := ps.Containers[0].SecurityContext
	if *sc.RunAsUser != 0 || *sc.RunAsNonRoot || *sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Add) == 0 ||
		sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || *sc.SeccompProfile.LocalhostProfile != "agentbox.json" {
		t.Errorf("root security context = %+v", sc)
	}
	if slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") {
		t.Error("root gets SYS_ADMIN")
	}
	if got := ps.Containers[0].Resources.Limits.StorageEphemeral().Value(); got != spec.Resources.DiskBytes {
		t.Errorf("writable root: ephemeral storage limit = %d, want the disk size", got)
	}
	if ps.NodeSelector["agentbox.dev/node"] != "true" {
		t.Errorf("node selector = %v", ps.NodeSelector)
	}
	if got := sb.Spec.PodTemplate.ObjectMeta.Annotations[AnnotationNetwork]; got != `{"mode":"egress","allow_out":["example.org","1.2.3.0/24"]}` {
		t.Errorf("network annotation = %s", got)
	}
	if sc := sb.Spec.VolumeClaimTemplates[0].Spec.StorageClassName; sc == nil || *sc != "fast" {
		t.Errorf("storage class = %v", sc)
	}
}

func TestValidate(t *testing.T) {
	b := testBackend(Config{})
	bad := map[string]func(*sandbox.Spec){
		"root without userns": func(s *sandbox.Spec) { s.Root = true },
		"docker template": func(s *sandbox.Spec) {
			s.Template = sandbox.Template{Ref: "docker:alpine", Kind: sandbox.TemplateDocker}
		},
		"host mount":      func(s *sandbox.Spec) { s.Mounts = []sandbox.Mount{{Source: "/etc", Target: "/x"}} },
		"workspace dir":   func(s *sandbox.Spec) { s.WorkspaceDir = "/srv" },
		"tiny memory":     func(s *sandbox.Spec) { s.Resources.MemoryBytes = 1024 },
		"no access token": func(s *sandbox.Spec) { s.AccessToken = "" },
		"bad domain": func(s *sandbox.Spec) {
			s.Network = sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"exa mple.org"}}
		},
		"ipv6 allow": func(s *sandbox.Spec) {
			s.Network = sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"2001:db8::/32"}}
		},
		"allow without egress":  func(s *sandbox.Spec) { s.Network.AllowOut = []string{"1.1.1.1"} },
		"long id":               func(s *sandbox.Spec) { s.ID = sandbox.ID(strings.Repeat("a", 61)) },
		"id ending in a dash":   func(s *sandbox.Spec) { s.ID = "abc-" },
		"unknown network mode":  func(s *sandbox.Spec) { s.Network.Mode = "bridge" },
		"empty kube image":      func(s *sandbox.Spec) { s.Template.Ref = "kube:" },
		"negative cpus":         func(s *sandbox.Spec) { s.Resources.CPUs = -1 },
		"workspace under 1 MiB": func(s *sandbox.Spec) { s.Resources.DiskBytes = 10 },
		"tmp under 1 MiB":       func(s *sandbox.Spec) { s.Resources.TmpBytes = 10 },
		"too few pids":          func(s *sandbox.Spec) { s.Resources.PIDs = 1 },
		"path traversal id":     func(s *sandbox.Spec) { s.ID = "../x" },
		"egress with a bad cidr": func(s *sandbox.Spec) {
			s.Network = sandbox.Network{Mode: sandbox.NetworkEgress, DenyOut: []string{"1.2.3.4/99"}}
		},
	}
	for name, mutate := range bad {
		spec := testSpec()
		mutate(&spec)
		if err := b.validate(spec); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%s: err = %v, want invalid", name, err)
		}
	}
	if err := b.validate(testSpec()); err != nil {
		t.Errorf("valid spec: %v", err)
	}
}

func TestEgressRules(t *testing.T) {
	rules, err := egressRules(sandbox.Network{Mode: sandbox.NetworkNone})
	if err != nil || len(rules) != 0 {
		t.Fatalf("none: %v, %v", rules, err)
	}
	rules, err = egressRules(sandbox.Network{Mode: sandbox.NetworkEgress, DenyOut: []string{"8.8.8.8", "2001:db8::1"}})
	if err != nil || len(rules) != 1 || len(rules[0].To) != 1 {
		t.Fatalf("open egress: %+v, %v", rules, err)
	}
	ip := rules[0].To[0].IPBlock
	if ip.CIDR != "0.0.0.0/0" || !slices.Contains(ip.Except, "10.0.0.0/8") || !slices.Contains(ip.Except, "169.254.0.0/16") || !slices.Contains(ip.Except, "8.8.8.8/32") {
		t.Errorf("open egress block = %+v", ip)
	}
	rules, err = egressRules(sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"93.184.0.0/16", "10.0.0.0/8", "1.1.1.1"}, DenyOut: []string{"93.184.1.0/24"}})
	if err != nil || len(rules) != 1 {
		t.Fatalf("allow list: %+v, %v", rules, err)
	}
	var cidrs []string
	for _, p := range rules[0].To {
		cidrs = append(cidrs, p.IPBlock.CIDR)
		if p.IPBlock.CIDR == "93.184.0.0/16" && !slices.Equal(p.IPBlock.Except, []string{"93.184.1.0/24"}) {
			t.Errorf("except of 93.184.0.0/16 = %v", p.IPBlock.Except)
		}
	}
	if !slices.Equal(cidrs, []string{"93.184.0.0/16", "1.1.1.1/32"}) {
		t.Errorf("allowed = %v (a blocked range must be dropped)", cidrs)
	}
	// Hosts a NetworkPolicy cannot name, and ranges that are blocked
	// anyway, allow nothing there (fail closed).
	for _, allow := range [][]string{{"example.org"}, {"10.1.0.0/16"}, {"*.example.org", "192.168.1.1"}} {
		rules, err := egressRules(sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: allow})
		if err != nil || len(rules) != 0 {
			t.Errorf("allow %v: rules %+v, %v; want none", allow, rules, err)
		}
	}
	np := testBackend(Config{}).networkPolicy(testSpec(), nil)
	if len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Egress) != 0 || np.Spec.PodSelector.MatchLabels[LabelSandbox] != "abc123" ||
		np.Spec.Ingress[0].From[0].PodSelector.MatchLabels[LabelRole] != RoleDaemon {
		t.Errorf("network policy = %+v", np.Spec)
	}
}

func TestSeccompProfileSetting(t *testing.T) {
	for _, bad := range []string{"Unconfined", "Localhost//etc/x", "Localhost/../x", "Localhost/", "localhost"} {
		if _, err := seccompProfile(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestPodSpecGVisorClass: a sandbox at isolation gvisor gets the gVisor
// RuntimeClass (K8S_GVISOR_RUNTIME_CLASS), others the default one; the
// backend claims the level only with the class set, and refuses it
// without.
func TestPodSpecGVisorClass(t *testing.T) {
	b := testBackend(Config{RuntimeClass: "runc-hardened", GVisorRuntimeClass: "gvisor"})
	spec := testSpec()
	spec.Isolation = sandbox.IsolationGVisor
	if ps := b.sandboxObject(spec).Spec.PodTemplate.Spec; ps.RuntimeClassName == nil || *ps.RuntimeClassName != "gvisor" {
		t.Errorf("gvisor sandbox: runtime class %v", ps.RuntimeClassName)
	}
	spec.Isolation = ""
	if ps := b.sandboxObject(spec).Spec.PodTemplate.Spec; ps.RuntimeClassName == nil || *ps.RuntimeClassName != "runc-hardened" {
		t.Errorf("container sandbox: runtime class %v", ps.RuntimeClassName)
	}
	if got := backend.Isolations(b.Capabilities()); !slices.Contains(got, sandbox.IsolationGVisor) {
		t.Errorf("levels with a gVisor class: %v", got)
	}
	plain := testBackend(Config{})
	spec.Isolation = sandbox.IsolationGVisor
	if err := backend.CheckIsolation(plain.Capabilities(), spec); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("gvisor without a class: %v, want class %s", err, sandbox.ClassInvalid)
	}
}
