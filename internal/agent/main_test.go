package agent_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// The integration tests below run the real agent binary as a subprocess:
// the agent's reaper waits for every child of its process, so it must not
// share a process with code using exec.Cmd.Wait (like this test binary).

func TestMain(m *testing.M) {
	code := m.Run()
	agenttest.Cleanup()
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startAgent(t *testing.T, opts agenttest.Options) (*agenttest.Agent, *agentclient.Client) {
	t.Helper()
	a := agenttest.Start(t, opts)
	return a, a.Client(t, opts.Token)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (switching users, chown); run the tests as root")
	}
}
