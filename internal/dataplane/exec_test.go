package dataplane_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind
// (and removes the agent binary it built).
func TestMain(m *testing.M) { testutil.VerifyMain(m) }

type env struct {
	m  *manager.Manager
	dp *dataplane.Service
}

// newEnv returns the data plane over a started manager on the fake
// backend (real agent processes, no isolation).
func newEnv(t *testing.T, cfg dataplane.Config, mcfg ...manager.Config) *env {
	t.Helper()
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	var mc manager.Config
	if len(mcfg) > 0 {
		mc = mcfg[0]
	}
	m := manager.New(mc, b, store.NewMemory())
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	return &env{m: m, dp: dataplane.New(cfg, m, m.Admission())}
}

func (e *env) exec(t *testing.T, ctx context.Context, owner string, id sandbox.ID, req dataplane.ExecRequest) (*dataplane.BufferedExec, error) {
	t.Helper()
	r, err := e.dp.Begin(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer r.End()
	return r.ExecBuffered(ctx, req)
}

func TestExecOutputCapAndTimeout(t *testing.T) {
	e := newEnv(t, dataplane.Config{MaxExecOutput: 1000})
	ctx := context.Background()
	rec, _ := e.m.Create(ctx, "u", manager.CreateRequest{})
	res, err := e.exec(t, ctx, "u", rec.ID, dataplane.ExecRequest{Cmd: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x; echo done >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || !res.Truncated || string(res.Stderr) != "done\n" || res.ExitCode != 0 {
		t.Fatalf("capped exec: %d bytes, truncated %v, stderr %q, exit %d", len(res.Stdout), res.Truncated, res.Stderr, res.ExitCode)
	}
	res, err = e.exec(t, ctx, "u", rec.ID, dataplane.ExecRequest{Cmd: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode == 0 {
		t.Fatalf("timeout not reported: %+v", res.ExecResult)
	}
	if _, err := e.exec(t, ctx, "u", rec.ID, dataplane.ExecRequest{}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("empty cmd: %v", err)
	}
	res, err = e.exec(t, ctx, "u", rec.ID, dataplane.ExecRequest{Cmd: []string{"/bin/sh", "-c", "cat"}})
	if out := string(res.Stdout); err != nil || out != "" {
		t.Fatalf("stdin should be empty by default: %q %v", out, err)
	}
	res, err = e.exec(t, ctx, "u", rec.ID, dataplane.ExecRequest{Cmd: []string{"/bin/sh", "-c", "tr a-z A-Z"}, Stdin: []byte("shout")})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "SHOUT" {
		t.Fatalf("stdin: %q %v", res.Stdout, err)
	}
}

// TestAdmissionOnEveryRequest: a request is admitted before it reaches the
// sandbox, against its user's count, whatever it does; another user's
// requests go on; a sandbox of someone else is not found; End gives the
// slot back, once.
func TestAdmissionOnEveryRequest(t *testing.T) {
	e := newEnv(t, dataplane.Config{}, manager.Config{MaxRequestsPerUser: 2})
	ctx := context.Background()
	alice, err := e.m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := e.m.Create(ctx, "bob", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.dp.Begin(ctx, "bob", alice.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("bob on alice's sandbox: %v", err)
	}
	var held []*dataplane.Request
	for range 2 {
		r, err := e.dp.Begin(ctx, "alice", alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	if _, err := e.dp.Begin(ctx, "alice", alice.ID); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("alice's third request: %v", err)
	}
	if res, err := e.exec(t, ctx, "bob", bob.ID, dataplane.ExecRequest{Cmd: []string{"echo", "bob"}}); err != nil || string(res.Stdout) != "bob\n" {
		t.Fatalf("bob while alice is at her limit: %v", err)
	}
	held[0].End()
	held[0].End() // harmless
	if res, err := e.exec(t, ctx, "alice", alice.ID, dataplane.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("alice after one ended: %v", err)
	}
	held[1].End()
	// Concurrent requests of one user never run more than the limit at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran, refused := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.exec(t, ctx, "alice", alice.ID, dataplane.ExecRequest{Cmd: []string{"sleep", "0.5"}})
			mu.Lock()
			defer mu.Unlock()
			switch sandbox.ClassOf(err) {
			case sandbox.ClassQuota:
				refused++
			default:
				if err != nil {
					t.Errorf("exec: %v", err)
				}
				ran++
			}
		}()
	}
	wg.Wait()
	if ran < 2 || refused == 0 || ran+refused != 8 {
		t.Fatalf("8 concurrent execs with a limit of 2: %d ran, %d refused", ran, refused)
	}
}

// TestExecExecutableNotFound: an exec whose executable does not exist is
// an invalid_argument wrapping ErrExecutableNotFound (the agent says so
// in a header, not only in its message), whether it is looked up in PATH
// or named by a path; another invalid exec is not.
func TestExecExecutableNotFound(t *testing.T) {
	e := newEnv(t, dataplane.Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "u", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"agentbox-no-such-command", "/nonexistent/agentbox-no-such-command"} {
		_, err := e.exec(t, ctx, "u", rec.ID, dataplane.ExecRequest{Cmd: []string{cmd}})
		if !errors.Is(err, dataplane.ErrExecutableNotFound) || sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("exec %s: %v, want invalid_argument wrapping ErrExecutableNotFound", cmd, err)
		}
	}
	_, err = e.exec(t, ctx, "u", rec.ID, dataplane.ExecRequest{Cmd: []string{"/bin/true"}, Cwd: "/nonexistent-dir"})
	if err == nil || errors.Is(err, dataplane.ErrExecutableNotFound) {
		t.Errorf("exec in a missing directory: %v, want an error that is not ErrExecutableNotFound", err)
	}
}
