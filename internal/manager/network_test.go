package manager

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// egressKinds claims egress for the template kinds it is given (only
// Capabilities and CapabilitiesFor are called by checkEgress).
type egressKinds struct {
	backend.Backend
	egress map[string]bool
}

func (b egressKinds) Capabilities() backend.Capabilities {
	c := backend.Capabilities{}
	for _, ok := range b.egress {
		c.Egress = c.Egress || ok
	}
	return c
}

func (b egressKinds) CapabilitiesFor(kind string) backend.Capabilities {
	return backend.Capabilities{Egress: b.egress[kind]}
}

// TestCheckEgressPerKind: egress is each backend's to give. An
// in-cluster daemon has no host network for its native sandboxes, but its
// kube sandboxes have egress (their NetworkPolicy); a server where no
// backend has it says so; mode none is never refused.
func TestCheckEgressPerKind(t *testing.T) {
	egress := sandbox.Network{Mode: sandbox.NetworkEgress}
	m := &Manager{backend: egressKinds{egress: map[string]bool{"kube": true, sandbox.TemplateImage: false}}}
	if err := m.checkEgress("kube", egress); err != nil {
		t.Errorf("egress for a kube sandbox: %v", err)
	}
	err := m.checkEgress(sandbox.TemplateImage, egress)
	if sandbox.ClassOf(err) != sandbox.ClassInvalid || !strings.Contains(err.Error(), "not available for image sandboxes") {
		t.Errorf("egress for an image sandbox without host networking: %v, want invalid naming the kind", err)
	}
	if !m.NetworkAvailable() || m.EgressAvailable(sandbox.TemplateImage) || !m.EgressAvailable("kube") {
		t.Errorf("NetworkAvailable %v, image %v, kube %v", m.NetworkAvailable(), m.EgressAvailable(sandbox.TemplateImage), m.EgressAvailable("kube"))
	}

	m.backend = egressKinds{egress: map[string]bool{sandbox.TemplateImage: false}}
	err = m.checkEgress(sandbox.TemplateImage, egress)
	if sandbox.ClassOf(err) != sandbox.ClassInvalid || !strings.Contains(err.Error(), "egress networking is not available on this server") {
		t.Errorf("egress where no backend has it: %v", err)
	}
	for _, kind := range []string{sandbox.TemplateImage, "kube"} {
		if err := m.checkEgress(kind, sandbox.Network{Mode: sandbox.NetworkNone}); err != nil {
			t.Errorf("mode none for %s: %v", kind, err)
		}
	}
}
