package kubenode

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestPlanHostname: a pod's sandbox is named as a kubelet names a pod's
// host: spec.hostname, else the pod's name when it is a DNS label, else
// the sandbox's own id.
func TestPlanHostname(t *testing.T) {
	for _, c := range []struct{ hostname, name, want string }{
		{"box-1", "s", "box-1"},
		{"", "ab-pod", "ab-pod"},
		{"", "a.dotted.name", ""},
		{"", strings.Repeat("x", 70), ""},
	} {
		pod := resolved(sandboxPod(c.name, "x"), "tok")
		pod.Spec.Hostname = c.hostname
		p, err := planPod(pod, native.DefaultResources, sandbox.Resources{})
		if err != nil {
			t.Fatal(err)
		}
		if p.spec.Hostname != c.want {
			t.Errorf("hostname %q, name %q: sandbox host name %q, want %q", c.hostname, c.name, p.spec.Hostname, c.want)
		}
		if want := c.want; want == "" && p.spec.Env["HOSTNAME"] != "" && p.spec.Env["HOSTNAME"] != string(p.spec.ID) {
			t.Errorf("HOSTNAME %q without a host name", p.spec.Env["HOSTNAME"])
		}
	}
}
