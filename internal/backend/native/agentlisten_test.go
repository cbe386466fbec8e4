package native

import (
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestValidateAgentListen: the agent's second listener (an agentbox
// Kubernetes node's pod IP) is TCP on an IP literal, and never without a
// token.
func TestValidateAgentListen(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		ok          bool
	}{
		{"", "", true},
		{"tcp://0.0.0.0:49983", "t", true},
		{"tcp://0.0.0.0:49983", "", false},
		{"unix:///tmp/a.sock", "t", false},
		{"tcp://localhost:49983", "t", false},
		{"tcp://0.0.0.0:0", "t", false},
		{"tcp://0.0.0.0:70000", "t", false},
		{"tcp://0.0.0.0", "t", false},
	} {
		err := validateAgentListen(sandbox.Spec{AgentListen: c.addr, AccessToken: c.token})
		if (err == nil) != c.ok {
			t.Errorf("AgentListen %q token %q: err %v, want ok=%v", c.addr, c.token, err, c.ok)
		}
	}
}
