// Package backendtest is the conformance suite every backend must pass. It
// drives a real backend through its lifecycle and checks, through the real
// in-sandbox agent, that what the contract promises actually happens.
package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Harness tells the suite how to make the backend under test.
type Harness struct {
	// New returns a backend keeping its state in stateDir. The suite calls it
	// a second time with the same dir to check that a restarted daemon
	// recovers its sandboxes. Backends must be cleaned up by the harness
	// (t.Cleanup) — the suite destroys every sandbox it creates.
	New func(t *testing.T, stateDir string) backend.Backend
	// StateDir returns a fresh state directory.
	StateDir func(t *testing.T) string
	// Template is the template every sandbox of the suite uses.
	Template sandbox.Template
	// Abandon makes a backend forget its sandboxes without touching them, as
	// if its process had died, so a second backend can recover them.
	Abandon func(b backend.Backend)
	// AccessToken, when set, is the token the suite's clients send: for
	// backends whose agents are reachable from outside the host and so
	// refuse sandboxes without a token, New returns a backend that gives
	// every sandbox this one.
	AccessToken string
	// Unisolated: the backend runs each sandbox's agent on the host as the
	// test's own user (the fake backend). The checks of what isolation
	// gives a sandbox (its user, home, working directory path, hostname)
	// are skipped, and files a check puts in the root filesystem go under
	// RootDir.
	Unisolated bool
	// RootDir returns the directory standing for the root filesystem of
	// sandbox id of an unisolated backend b (fake.Backend.RootDir).
	RootDir func(b backend.Backend, id sandbox.ID) string
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, h) })
	t.Run("InvalidSpecs", func(t *testing.T) { testInvalid(t, h) })
	t.Run("StopStartKeepsFiles", func(t *testing.T) { testStopStart(t, h) })
	t.Run("EnvAndUser", func(t *testing.T) { testEnvAndUser(t, h) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("Recover", func(t *testing.T) { testRecover(t, h) })
	t.Run("Pause", func(t *testing.T) { testPause(t, h) })
	t.Run("Snapshot", func(t *testing.T) { testSnapshot(t, h) })
	t.Run("Recycle", func(t *testing.T) { testRecycle(t, h) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Create creates a sandbox and registers its destruction with t.Cleanup.
func Create(t *testing.T, b backend.Backend, spec sandbox.Spec) sandbox.Info {
	t.Helper()
	if spec.ID == "" {
		spec.ID = sandbox.NewID()
	}
	info, err := b.Create(ctxT(t), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Destroy(context.Background(), info.ID); err != nil {
			t.Errorf("destroy %s: %v", info.ID, err)
		}
	})
	return info
}

// Client returns an agent client for a sandbox, closed at cleanup.
func Client(t *testing.T, info sandbox.Info, token string) *agentclient.Client {
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address, Pid: info.Agent.Pid}, token)
	t.Cleanup(func() { c.Close() })
	return c
}

// Result is the outcome of Exec.
type Result struct {
	Stdout, Stderr string
	Exit           agentclient.ExitResult
}

// Exec runs a shell command in the sandbox and returns its output.
func Exec(t *testing.T, c *agentclient.Client, script string) Result {
	t.Helper()
	r, err := ExecErr(ctxT(t), c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return r
}

// ExecErr runs a process and returns its output and any transport error.
func ExecErr(ctx context.Context, c *agentclient.Client, opts agentclient.StartOptions) (Result, error) {
	var out, errb bytes.Buffer
	res, err := c.Run(ctx, opts, nil, &out, &errb)
	return Result{Stdout: out.String(), Stderr: errb.String(), Exit: res}, err
}

func testLifecycle(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	ctx := ctxT(t)
	if kinds := b.Capabilities().Templates; !slices.Contains(kinds, h.Template.Kind) {
		t.Errorf("Capabilities().Templates = %q lacks %q, the kind of the template under test", kinds, h.Template.Kind)
	}
	info := Create(t, b, sandbox.Spec{Template: h.Template})
	if info.State != sandbox.StateRunning {
		t.Fatalf("state after create = %q, want running", info.State)
	}
	c := Client(t, info, h.AccessToken)
	if err := c.Health(ctx); err != nil {
		t.Fatalf("agent health: %v", err)
	}
	r := Exec(t, c, "echo hello; echo oops >&2; exit 3")
	if r.Stdout != "hello\n" || r.Stderr != "oops\n" || r.Exit.ExitCode != 3 {
		t.Fatalf("exec = %+v, want stdout hello, stderr oops, exit 3", r)
	}
	got, err := b.Inspect(ctx, info.ID)
	if err != nil || got.ID != info.ID || got.State != sandbox.StateRunning {
		t.Fatalf("inspect = %+v, %v", got, err)
	}
	if got.Spec.AccessToken != "" {
		t.Fatal("inspect leaks the access token")
	}
	if err := b.Destroy(ctx, info.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if _, err := b.Inspect(ctx, info.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("inspect after destroy: %v, want not found", err)
	}
	if err := b.Destroy(ctx, info.ID); err != nil {
		t.Fatalf("second destroy must succeed: %v", err)
	}
	if err := c.Health(ctx); err == nil {
		t.Fatal("agent still answers after destroy")
	}
	if _, err := b.Inspect(ctx, "no-such-sandbox"); !sandbox.IsNotFound(err) {
		t.Fatalf("inspect unknown: %v, want not found", err)
	}
	if err := b.Stop(ctx, "no-such-sandbox"); !sandbox.IsNotFound(err) {
		t.Fatalf("stop unknown: %v, want not found", err)
	}
}

func testInvalid(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	ctx := ctxT(t)
	cases := map[string]sandbox.Spec{
		"bad id":        {ID: "../escape", Template: h.Template},
		"bad template":  {ID: sandbox.NewID(), Template: sandbox.Template{Ref: "no-such-template", Kind: "no-such-kind"}},
		"tiny memory":   {ID: sandbox.NewID(), Template: h.Template, Resources: sandbox.Resources{MemoryBytes: 1024}},
		"negative cpus": {ID: sandbox.NewID(), Template: h.Template, Resources: sandbox.Resources{CPUs: -1}},
	}
	for name, spec := range cases {
		_, err := b.Create(ctx, spec)
		if sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%s: err = %v, want invalid_argument", name, err)
			_ = b.Destroy(ctx, spec.ID)
		}
	}
	info := Create(t, b, sandbox.Spec{Template: h.Template})
	if _, err := b.Create(ctx, sandbox.Spec{ID: info.ID, Template: h.Template}); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("duplicate id: err = %v, want conflict", err)
	}
	// The failed duplicate must not have harmed the original.
	if r := Exec(t, Client(t, info, h.AccessToken), "echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("original sandbox after duplicate create: %+v", r)
	}
}

func testStopStart(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	ctx := ctxT(t)
	info := Create(t, b, sandbox.Spec{Template: h.Template})
	c := Client(t, info, h.AccessToken)
	// Relative paths are in the sandbox's working directory: /workspace
	// (EnvAndUser), or the fake's own directory.
	Exec(t, c, "echo kept > note")
	if err := b.Stop(ctx, info.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := b.Stop(ctx, info.ID); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	got, err := b.Inspect(ctx, info.ID)
	if err != nil || got.State != sandbox.StateStopped {
		t.Fatalf("inspect stopped = %+v, %v", got, err)
	}
	if err := c.Health(ctx); err == nil {
		t.Fatal("agent answers while stopped")
	}
	info, err = b.Start(ctx, info.ID)
	if err != nil || info.State != sandbox.StateRunning {
		t.Fatalf("start = %+v, %v", info, err)
	}
	c = Client(t, info, h.AccessToken)
	if r := Exec(t, c, "cat note"); r.Stdout != "kept\n" {
		t.Fatalf("file after restart = %q", r.Stdout)
	}
}

func testEnvAndUser(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	info := Create(t, b, sandbox.Spec{Template: h.Template, Env: map[string]string{"GREETING": "hi there"}})
	c := Client(t, info, h.AccessToken)
	script, want := `echo "$GREETING"; id -u; echo "$HOME"; pwd`, "hi there\n1000\n/home/user\n/workspace\n"
	if h.Unisolated {
		// The test's own user and home, and a directory of the backend's.
		script, want = `echo "$GREETING"`, "hi there\n"
		t.Log("unisolated backend: the sandbox's user, home and working directory are not checked")
	}
	r := Exec(t, c, script)
	if r.Stdout != want {
		t.Fatalf("env/user = %q, want %q", r.Stdout, want)
	}
}

func testConcurrent(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			id := sandbox.NewID()
			info, err := b.Create(ctx, sandbox.Spec{ID: id, Template: h.Template})
			if err != nil {
				errs <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			defer func() { _ = b.Destroy(context.Background(), id) }()
			c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address, Pid: info.Agent.Pid}, h.AccessToken)
			defer c.Close()
			r, err := ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "echo $((6*7)) > n; cat n; hostname"}})
			if err != nil || !strings.HasPrefix(r.Stdout, "42\n") || (!h.Unisolated && !strings.Contains(r.Stdout, string(id))) {
				errs <- fmt.Errorf("sandbox %d: %+v %w", i, r, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testRecover(t *testing.T, h Harness) {
	dir := h.StateDir(t)
	b1 := h.New(t, dir)
	ctx := ctxT(t)
	running, err := b1.Create(ctx, sandbox.Spec{ID: sandbox.NewID(), Template: h.Template, Labels: map[string]string{"owner": "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := b1.Create(ctx, sandbox.Spec{ID: sandbox.NewID(), Template: h.Template})
	if err != nil {
		t.Fatal(err)
	}
	Exec(t, Client(t, running, h.AccessToken), "echo before > f")
	if err := b1.Stop(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	// A second backend over the same state is what a restarted daemon sees.
	h.Abandon(b1)
	b2 := h.New(t, dir)
	t.Cleanup(func() {
		_ = b2.Destroy(context.Background(), running.ID)
		_ = b2.Destroy(context.Background(), stopped.ID)
	})
	infos, err := b2.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	byID := map[sandbox.ID]sandbox.Info{}
	for _, in := range infos {
		byID[in.ID] = in
	}
	r, ok := byID[running.ID]
	if !ok || r.State != sandbox.StateRunning || r.Spec.Labels["owner"] != "alice" {
		t.Fatalf("running sandbox after recover = %+v (found %v)", r, ok)
	}
	if s, ok := byID[stopped.ID]; !ok || s.State != sandbox.StateStopped {
		t.Fatalf("stopped sandbox after recover = %+v (found %v)", s, ok)
	}
	if out := Exec(t, Client(t, r, h.AccessToken), "cat f"); out.Stdout != "before\n" {
		t.Fatalf("recovered sandbox lost its file: %q", out.Stdout)
	}
	// The recovered backend owns them now: destroy through it.
	for _, id := range []sandbox.ID{running.ID, stopped.ID} {
		if err := b2.Destroy(ctx, id); err != nil {
			t.Fatalf("destroy recovered %s: %v", id, err)
		}
	}
	if _, err := b2.Inspect(ctx, running.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("inspect after destroy: %v", err)
	}
}
