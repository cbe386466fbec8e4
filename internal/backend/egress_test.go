package backend

import (
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestRefuseEgressRules(t *testing.T) {
	if err := RefuseEgressRules("docker", sandbox.Spec{}); err != nil {
		t.Fatalf("no rules: %v", err)
	}
	spec := sandbox.Spec{Network: sandbox.Network{Rules: []sandbox.EgressRule{{}}}}
	if err := RefuseEgressRules("docker", spec); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("rules on a backend without the broker: %v, want ClassInvalid", err)
	}
}
