package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// escapeScript starts, in every way a process can leave its process
// group or its parent, a sleep whose argument is the unique tag, then
// waits: setsid in the background, a double fork (the middle process
// exits at once, so the sleep is re-parented), a double fork into a new
// session, and nohup.
func escapeScript(tag string) string {
	return fmt.Sprintf(`setsid sh -c 'sleep %[1]s' &
( (sleep %[1]s &) & )
( setsid sh -c 'sleep %[1]s &' & )
nohup sleep %[1]s >/dev/null 2>&1 &
sleep 0.3
echo started
exec sleep 1000`, tag)
}

// uniqueSleep returns an argument for sleep that no other process uses.
func uniqueSleep() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%d.%d", 5000+binary.BigEndian.Uint16(b[:2]), binary.BigEndian.Uint16(b[2:]))
}

// sleepers returns the pids of processes running `sleep tag`.
func sleepers(tag string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		if args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"); len(args) == 2 &&
			filepath.Base(args[0]) == "sleep" && args[1] == tag {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

// waitNoSleepers waits (bounded) until no `sleep tag` is left.
func waitNoSleepers(t *testing.T, tag string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := sleepers(tag)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the ended command still run: sleep %s as pids %v", tag, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSecurityExecTimeoutEndsWholeTree: when an exec's timeout passes,
// every process it started ends, also those that called setsid or were
// re-parented by a double fork.
func TestSecurityExecTimeoutEndsWholeTree(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		requireRoot(t)
		_, c := startAgent(t, agenttest.Options{PIDNamespace: true, GoShim: goShim})
		tag := uniqueSleep()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out bytes.Buffer
		res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", escapeScript(tag)}, Timeout: time.Second}, nil, &out, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out.String() != "started\n" || res.Exited {
			t.Fatalf("exec: %+v output %q", res, out.String())
		}
		waitNoSleepers(t, tag)
	})
}

// TestSecurityKillEndsWholeTree: SIGKILL through the process API ends
// every process the command started, detached or not.
func TestSecurityKillEndsWholeTree(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		requireRoot(t)
		_, c := startAgent(t, agenttest.Options{PIDNamespace: true, GoShim: goShim})
		tag := uniqueSleep()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := c.Start(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", escapeScript(tag)}})
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for !bytes.Contains(out, []byte("started\n")) {
			ev, err := p.Next()
			if err != nil {
				t.Fatalf("before the kill: %v", err)
			}
			out = append(out, ev.Data...)
		}
		for i := 0; len(sleepers(tag)) < 4 && i < 250; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		if n := len(sleepers(tag)); n != 4 {
			t.Fatalf("%d detached sleeps running, want 4", n)
		}
		if err := c.Kill(ctx, p.Pid()); err != nil {
			t.Fatal(err)
		}
		waitNoSleepers(t, tag)
	})
}

// TestSecurityBackgroundProcessesOutliveTheirCommand keeps E2B's
// semantics: what a command leaves running in the background when it
// exits on its own keeps running (and can still be found), and a process
// started without a timeout runs until it is killed.
func TestSecurityBackgroundProcessesOutliveTheirCommand(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		requireRoot(t)
		_, c := startAgent(t, agenttest.Options{PIDNamespace: true, GoShim: goShim})
		tag := uniqueSleep()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		script := fmt.Sprintf("sleep %[1]s >/dev/null 2>&1 & setsid sleep %[1]s >/dev/null 2>&1 & (sleep %[1]s >/dev/null 2>&1 &); exit 0", tag)
		res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}, Timeout: 30 * time.Second}, nil, nil, nil)
		if err != nil || !res.Exited || res.ExitCode != 0 {
			t.Fatalf("command: %+v %v", res, err)
		}
		// A forked sleep may not have reached exec yet: wait for it (bounded).
		for i := 0; len(sleepers(tag)) < 3 && i < 250; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		if n := len(sleepers(tag)); n != 3 {
			t.Fatalf("%d background sleeps survived their command, want 3", n)
		}
		// They are ordinary processes of the sandbox: a later command can end them.
		if _, err := c.Run(ctx, sh("pkill -f 'sleep "+tag+"'"), nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		waitNoSleepers(t, tag)
	})
}

// TestSecurityKilledShimEndsItsCommand: a command that kills its own
// supervisor (the shim is its parent) to escape a later kill is ended
// with it, not left unsupervised.
func TestSecurityKilledShimEndsItsCommand(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		requireRoot(t)
		_, c := startAgent(t, agenttest.Options{PIDNamespace: true, GoShim: goShim})
		tag := uniqueSleep()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The command waits for a line on stdin, which the client sends only
		// once the start was reported: killing the shim before it reported the
		// process is another case (the start fails).
		script := fmt.Sprintf("sleep %s & read go; kill -9 $PPID; wait", tag)
		res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}}, strings.NewReader("go\n"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Exited {
			t.Fatalf("the command survived its shim: %+v", res)
		}
		waitNoSleepers(t, tag)
	})
}

// forEachShim runs test as a subtest with each exec shim: agentbox-shim
// and the agent's own fallback.
func forEachShim(t *testing.T, test func(t *testing.T, goShim bool)) {
	for _, sh := range agenttest.Shims {
		t.Run(sh.Name, func(t *testing.T) { test(t, sh.Go) })
	}
}
