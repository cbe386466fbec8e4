package native

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// agentSignals are the signals a sandbox process can send to PID 1. The
// catchable ones used to end the agent (Go exits on HUP, INT and TERM and
// dumps and exits on QUIT, ABRT, TRAP, SYS...), leaving a sandbox that
// answers nothing while the daemon still reported it running; STOP, TSTP,
// TTIN, TTOU, CONT and KILL must stay without effect from inside.
const agentSignals = "HUP INT QUIT ILL TRAP ABRT BUS FPE USR1 SEGV USR2 PIPE ALRM TERM STKFLT XCPU XFSZ VTALRM PROF WINCH SYS STOP TSTP TTIN TTOU CONT KILL"

// TestSecurityAgentSurvivesSignalsFromSandbox sends every catchable signal
// to PID 1 from inside a sandbox, as the sandbox user and as root in a
// root sandbox, and checks that the agent still serves afterwards.
func TestSecurityAgentSurvivesSignalsFromSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	for _, tc := range []struct {
		name string
		root bool
	}{{"user", false}, {"root", true}} {
		t.Run(tc.name, func(t *testing.T) {
			box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Root: tc.root})
			c := backendtest.Client(t, box, "")
			// Every signal twice, one kill per signal so that one refusal
			// does not stop the others; the sleep gives
			// the agent time to act on them.
			script := "for s in " + agentSignals + " " + agentSignals + "; do kill -s $s 1 2>/dev/null && echo sent $s; done; sleep 0.2; id -u"
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := backendtest.ExecErr(ctx, c, agentclientSh(script))
			if err != nil {
				t.Fatalf("exec that signals PID 1: %v (stderr %q)", err, r.Stderr)
			}
			t.Logf("signalling PID 1 as uid %s", strings.TrimSpace(lastLine(r.Stdout)))
			if tc.root && !strings.Contains(r.Stdout, "sent TERM") {
				t.Fatalf("root could not even send SIGTERM to PID 1: %q", r.Stdout)
			}
			after := backendtest.Exec(t, c, "echo alive")
			if after.Stdout != "alive\n" {
				t.Fatalf("agent no longer answers correctly: %+v", after)
			}
			info, err := b.Inspect(ctx, box.ID)
			if err != nil || info.State != sandbox.StateRunning {
				t.Fatalf("sandbox state after signals: %+v, %v", info, err)
			}
		})
	}
}

func agentclientSh(script string) agentclient.StartOptions {
	return agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
