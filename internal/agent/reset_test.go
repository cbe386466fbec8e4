package agent_test

import (
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestResetRoutesRefuse: the warm reset's routes answer only to the
// host's control token (never to the sandbox's access token), in order
// (renew before kill is refused), not at all without a control token, and
// an agent that is not PID 1 of its sandbox refuses to kill(-1): a process
// it started before is still alive afterwards.
func TestResetRoutesRefuse(t *testing.T) {
	const token, control = "access-token-0123456789", "control-token-0123456789"
	_, c := startAgent(t, agenttest.Options{Token: token, Env: []string{"AGENTBOX_CONTROL_TOKEN=" + control}})
	ctx := testCtx(t)
	for _, wrong := range []string{"", "wrong", token} {
		if err := c.ResetKill(ctx, wrong); sandbox.ClassOf(err) != sandbox.ClassForbidden {
			t.Fatalf("kill with control token %q: %v", wrong, err)
		}
	}
	if err := c.ResetRenew(ctx, control, "next-token-0123456789"); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("renew before kill: %v", err)
	}
	if err := c.ResetRenew(ctx, control, ""); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("renew without a token: %v", err)
	}

	sleeper, err := c.Start(ctx, agentclient.StartOptions{Cmd: "sleep", Args: []string{"300"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := int(sleeper.Pid())
	err = c.ResetKill(ctx, control)
	if err == nil || !strings.Contains(err.Error(), "not PID 1") {
		t.Fatalf("kill by an agent that is not PID 1: %v", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the agent's process is gone after a refused kill: %v", err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)

	// Without a control token there are no reset routes: the path is
	// behind the access token like any unknown one.
	_, c2 := startAgent(t, agenttest.Options{Token: token})
	if err := c2.ResetKill(ctx, ""); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("kill on an agent without a control token: %v", err)
	}
}
