package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind
// (and removes the agent binary it built).
func TestMain(m *testing.M) { testutil.VerifyMain(m) }

type env struct {
	m  *Manager
	b  *fake.Backend
	st store.Store
}

// newEnv returns a started manager over the fake backend (real agent
// processes, no isolation) and an in-memory store.
func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	st := store.NewMemory()
	m := New(cfg, b, st)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	return &env{m: m, b: b, st: st}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execBuffered runs a command through the data plane over m, as the
// front ends do.
func execBuffered(t *testing.T, m *Manager, ctx context.Context, owner string, id sandbox.ID, req dataplane.ExecRequest) (*dataplane.BufferedExec, error) {
	t.Helper()
	dp := dataplane.New(dataplane.Config{}, m, m.Admission())
	r, err := dp.Begin(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer r.End()
	return r.ExecBuffered(ctx, req)
}

func execOut(t *testing.T, m *Manager, owner string, id sandbox.ID, cmd ...string) string {
	t.Helper()
	res, err := execBuffered(t, m, context.Background(), owner, id, dataplane.ExecRequest{Cmd: cmd})
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	return string(res.Stdout)
}

func TestOwnershipAndLifecycle(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "alice", CreateRequest{Metadata: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Owner != "alice" || rec.AccessToken == "" || rec.Template != "host" || rec.Type != "base" {
		t.Fatalf("record = %+v", rec)
	}
	if got, err := e.m.Get(ctx, "alice", rec.ID); err != nil || got.Metadata["app"] != "x" {
		t.Fatalf("get = %+v %v", got, err)
	}
	// Bob cannot see, use or delete it: it does not exist for him.
	if _, err := e.m.Get(ctx, "bob", rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("bob get: %v", err)
	}
	if _, err := execBuffered(t, e.m, ctx, "bob", rec.ID, dataplane.ExecRequest{Cmd: []string{"true"}}); !sandbox.IsNotFound(err) {
		t.Fatalf("bob exec: %v", err)
	}
	if err := e.m.Delete(ctx, "bob", rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("bob delete: %v", err)
	}
	page, _ := e.m.List(ctx, "bob", ListOptions{})
	if len(page.Records) != 0 {
		t.Fatalf("bob lists %d sandboxes", len(page.Records))
	}
	if out := execOut(t, e.m, "alice", rec.ID, "echo", "hi"); out != "hi\n" {
		t.Fatalf("exec = %q", out)
	}
	if err := e.m.Delete(ctx, "alice", rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(ctx, "alice", rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := e.st.Get(ctx, rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("record kept after delete: %v", err)
	}
}

func TestValidation(t *testing.T) {
	e := newEnv(t, Config{MaxTimeout: time.Hour, MaxResources: sandbox.Resources{MemoryBytes: 1 << 30}})
	ctx := context.Background()
	cases := []struct {
		req   CreateRequest
		field string
	}{
		{CreateRequest{Timeout: 2 * time.Hour}, "timeout"},
		{CreateRequest{Template: "nope"}, "template"},
		{CreateRequest{Type: "nope"}, "type"},
		{CreateRequest{Resources: sandbox.Resources{MemoryBytes: 2 << 30}}, "resources.memory"},
		{CreateRequest{Env: map[string]string{"A=B": "x"}}, "env"},
		{CreateRequest{Env: map[string]string{"AGENTBOX_ACCESS_TOKEN": "x"}}, "env"},
		{CreateRequest{Network: sandbox.Network{Mode: "wide-open"}}, "network.mode"},
	}
	for _, c := range cases {
		_, err := e.m.Create(ctx, "u", c.req)
		var fe *FieldError
		if sandbox.ClassOf(err) != sandbox.ClassInvalid || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: err = %v, want invalid field %s", c.req, err, c.field)
		}
	}
	if n := e.b.Calls("create"); n != 0 {
		t.Fatalf("invalid requests reached the backend %d times", n)
	}
}

// TestSecurityCreateRequestLimits: a request cannot name a host directory
// as its template, nor bring more env and metadata than its share of the
// shared state storage.
func TestSecurityCreateRequestLimits(t *testing.T) {
	e := newEnv(t, Config{MaxTimeout: time.Hour, Templates: map[string]string{"base": "host", "custom": "host"}})
	ctx := context.Background()
	big := func(n, size int) map[string]string {
		m := map[string]string{}
		for i := 0; i < n; i++ {
			m[fmt.Sprintf("K%d", i)] = strings.Repeat("x", size)
		}
		return m
	}
	cases := []struct {
		req   CreateRequest
		field string
	}{
		{CreateRequest{Template: "dir:/"}, "template"},
		{CreateRequest{Template: "dir:/srv/rootfs"}, "template"},
		{CreateRequest{Template: "dir:/run"}, "template"},
		{CreateRequest{Type: "dir:/run"}, "type"},
		{CreateRequest{Env: big(3, 100<<10)}, "env"},
		{CreateRequest{Env: big(2, 100<<10), Metadata: big(20, 4000)}, "env"},
	}
	for _, c := range cases {
		_, err := e.m.Create(ctx, "u", c.req)
		var fe *FieldError
		if sandbox.ClassOf(err) != sandbox.ClassInvalid || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%.80v: err = %v, want invalid field %s", c.req, err, c.field)
		}
	}
	if n := e.b.Calls("create"); n != 0 {
		t.Fatalf("invalid requests reached the backend %d times", n)
	}
	rec, err := e.m.Create(ctx, "u", CreateRequest{Template: "custom", Env: big(2, 100<<10)})
	if err != nil {
		t.Fatalf("registered template with an env under the cap: %v", err)
	}
	if rec.Template != "host" || rec.Type != "custom" {
		t.Errorf("template %q type %q, want the registered one", rec.Template, rec.Type)
	}
}

func TestTimeoutsExpire(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "u", CreateRequest{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := e.m.Create(ctx, "u", CreateRequest{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.SetTimeout(ctx, "u", keep.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "expiry", func() bool {
		_, err := e.m.Get(ctx, "u", rec.ID)
		return sandbox.IsNotFound(err)
	})
	if _, err := e.m.Get(ctx, "u", keep.ID); err != nil {
		t.Fatalf("extended sandbox expired: %v", err)
	}
	// Refresh never shortens.
	before, _ := e.m.Get(ctx, "u", keep.ID)
	after, err := e.m.Refresh(ctx, "u", keep.ID, time.Second)
	if err != nil || !after.EndAt.Equal(before.EndAt) {
		t.Fatalf("refresh shortened the end: %v -> %v (%v)", before.EndAt, after.EndAt, err)
	}
	// SetTimeout may shorten.
	if _, err := e.m.SetTimeout(ctx, "u", keep.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "shortened expiry", func() bool {
		_, err := e.m.Get(ctx, "u", keep.ID)
		return sandbox.IsNotFound(err)
	})
}

func TestQuotas(t *testing.T) {
	e := newEnv(t, Config{MaxPerUser: 2, MaxInstances: 3})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := e.m.Create(ctx, "alice", CreateRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.m.Create(ctx, "alice", CreateRequest{}); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("third sandbox for alice: %v, want quota", err)
	}
	bob, err := e.m.Create(ctx, "bob", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Create(ctx, "carol", CreateRequest{}); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("over the global cap: %v, want quota", err)
	}
	if err := e.m.Delete(ctx, "bob", bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Create(ctx, "carol", CreateRequest{}); err != nil {
		t.Fatalf("after a delete frees a slot: %v", err)
	}
}

func TestPoolHitPersonalisesAndRefills(t *testing.T) {
	e := newEnv(t, Config{PoolTypes: []string{"base"}, PoolSize: 2})
	ctx := context.Background()
	waitFor(t, 30*time.Second, "pool fill", func() bool { return e.m.PoolLevels()["host"] == 2 })
	rec, err := e.m.Create(ctx, "alice", CreateRequest{Env: map[string]string{"GREETING": "from-pool"},
		Metadata: map[string]string{"k": "v"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.FromPool || rec.Owner != "alice" || rec.Metadata["k"] != "v" {
		t.Fatalf("pool hit record = %+v", rec)
	}
	if time.Until(rec.EndAt) < 50*time.Second {
		t.Fatalf("end time not set from the request: %v", rec.EndAt)
	}
	if out := execOut(t, e.m, "alice", rec.ID, "/bin/sh", "-c", "echo $GREETING"); out != "from-pool\n" {
		t.Fatalf("env not applied to pooled sandbox: %q", out)
	}
	waitFor(t, 30*time.Second, "pool refill", func() bool { return e.m.PoolLevels()["host"] == 2 })
	// Pooled sandboxes are nobody's: not listed, not reachable.
	page, _ := e.m.List(ctx, "", ListOptions{})
	if len(page.Records) != 0 {
		t.Fatalf("pooled sandboxes visible: %d", len(page.Records))
	}
	// A request the pool cannot serve (custom resources) is a cold create.
	cold, err := e.m.Create(ctx, "alice", CreateRequest{Resources: sandbox.Resources{PIDs: 100}})
	if err != nil || cold.FromPool {
		t.Fatalf("custom resources: %+v %v", cold, err)
	}
}

func TestSessions(t *testing.T) {
	e := newEnv(t, Config{Templates: map[string]string{"base": "host", "filesystem": "host"}})
	ctx := context.Background()
	key := SessionKey("s1", "u1")
	if key != "s1_u1" || SessionKey("s1", "") != "s1" {
		t.Fatalf("session keys: %q", key)
	}
	first, err := e.m.ConnectSession(ctx, "alice", key, []string{"base", "filesystem"}, CreateRequest{})
	if err != nil || len(first) != 2 || first[0].Type != "base" || first[1].Type != "filesystem" {
		t.Fatalf("connect = %+v %v", first, err)
	}
	again, err := e.m.ConnectSession(ctx, "alice", key, []string{"filesystem"}, CreateRequest{})
	if err != nil || len(again) != 1 || again[0].ID != first[1].ID {
		t.Fatalf("reconnect = %+v %v", again, err)
	}
	if keys := e.m.SessionKeys("alice"); len(keys) != 1 || keys[0] != key {
		t.Fatalf("session keys = %v", keys)
	}
	if keys := e.m.SessionKeys("bob"); len(keys) != 0 {
		t.Fatalf("bob sees session keys %v", keys)
	}
	ids, err := e.m.ReleaseSession(ctx, "alice", key)
	if err != nil || len(ids) != 2 {
		t.Fatalf("release = %v %v", ids, err)
	}
	if len(e.m.SessionSandboxes("alice", key)) != 0 {
		t.Fatal("sandboxes left after release")
	}
}

func TestHeartbeatRecyclesIdleSessions(t *testing.T) {
	e := newEnv(t, Config{HeartbeatTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	recs, err := e.m.ConnectSession(ctx, "u", "idle", nil, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.m.Create(ctx, "u", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "heartbeat expiry", func() bool {
		_, err := e.m.Get(ctx, "u", recs[0].ID)
		return sandbox.IsNotFound(err)
	})
	if _, err := e.m.Get(ctx, "u", plain.ID); err != nil {
		t.Fatalf("sandbox outside a session was recycled: %v", err)
	}
}

func TestRestartReconciles(t *testing.T) {
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	st := store.NewMemory()
	ctx := context.Background()
	m1 := New(Config{}, b, st)
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	kept, _ := m1.Create(ctx, "u", CreateRequest{Timeout: time.Hour})
	dead, _ := m1.Create(ctx, "u", CreateRequest{Timeout: time.Hour})
	expiring, _ := m1.Create(ctx, "u", CreateRequest{Timeout: 200 * time.Millisecond})
	if err := m1.Shutdown(ctx, false); err != nil {
		t.Fatal(err)
	}
	// While "down": an agent dies, a deadline passes, and a sandbox exists
	// that has no record (crash between backend create and store write).
	if err := b.Crash(dead.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	orphan := sandbox.NewID()
	if _, err := b.Create(ctx, sandbox.Spec{ID: orphan, Template: sandbox.HostTemplate()}); err != nil {
		t.Fatal(err)
	}

	m2 := New(Config{}, b, st)
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Shutdown(ctx, true)
	if out := execOut(t, m2, "u", kept.ID, "echo", "back"); out != "back\n" {
		t.Fatalf("reattached sandbox exec = %q", out)
	}
	for _, id := range []sandbox.ID{dead.ID, expiring.ID, orphan} {
		if _, err := b.Inspect(ctx, id); !sandbox.IsNotFound(err) {
			t.Errorf("sandbox %s should have been destroyed: %v", id, err)
		}
		if _, err := st.Get(ctx, id); !sandbox.IsNotFound(err) {
			t.Errorf("record %s should be gone: %v", id, err)
		}
	}
}

func TestStopStartKeepsFiles(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "u", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, e.m, "u", rec.ID, "/bin/sh", "-c", "echo kept > note")
	st, err := e.m.StopSandbox(ctx, "u", rec.ID)
	if err != nil || st.State != sandbox.StateStopped {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if _, err := execBuffered(t, e.m, ctx, "u", rec.ID, dataplane.ExecRequest{Cmd: []string{"true"}}); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("exec in a stopped sandbox: %v", err)
	}
	if _, err := e.m.StopSandbox(ctx, "bob", rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("bob stops alice's sandbox: %v", err)
	}
	st, err = e.m.StartSandbox(ctx, "u", rec.ID)
	if err != nil || st.State != sandbox.StateRunning {
		t.Fatalf("start: %+v %v", st, err)
	}
	if out := execOut(t, e.m, "u", rec.ID, "cat", "note"); out != "kept\n" {
		t.Fatalf("file after restart: %q", out)
	}
}

// TestSecurityAgentExitIsFollowed: when a sandbox's agent dies behind the
// manager's back (OOM killer, crash), the sandbox is reported stopped with
// the reason in its log, its dead agent is not used, and it can be started
// again; a pooled one is replaced.
func TestSecurityAgentExitIsFollowed(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "u", CreateRequest{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.Crash(rec.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sandbox to be reported stopped", func() bool {
		got, err := e.m.Get(ctx, "u", rec.ID)
		return err == nil && got.State == sandbox.StateStopped
	})
	logs, err := e.m.Logs(ctx, "u", rec.ID, 0)
	if err != nil || len(logs) == 0 || logs[len(logs)-1].Level != "error" ||
		!strings.Contains(logs[len(logs)-1].Message, "agent exited") {
		t.Fatalf("log of the dead agent's sandbox: %+v %v", logs, err)
	}
	if _, err := e.m.Agent(ctx, "u", rec.ID); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("agent of a stopped sandbox: %v", err)
	}
	if stored, err := e.st.Get(ctx, rec.ID); err != nil || stored.State != sandbox.StateStopped {
		t.Fatalf("stored record: %+v %v", stored, err)
	}
	if _, err := e.m.StartSandbox(ctx, "u", rec.ID); err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, e.m, "u", rec.ID, "echo", "back"); out != "back\n" {
		t.Fatalf("exec after restart = %q", out)
	}
}

func TestSecurityPooledAgentExitIsReplaced(t *testing.T) {
	e := newEnv(t, Config{PoolTypes: []string{"base"}, PoolSize: 1})
	ctx := context.Background()
	var pooled sandbox.ID
	waitFor(t, 30*time.Second, "the pool to fill", func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		for id, en := range e.m.entries {
			if en.rec.Pool != "" && !en.creating {
				pooled = id
				return true
			}
		}
		return false
	})
	if err := e.b.Crash(pooled); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the dead pooled sandbox to be destroyed", func() bool {
		_, err := e.b.Inspect(ctx, pooled)
		return sandbox.IsNotFound(err)
	})
	rec, err := e.m.Create(ctx, "u", CreateRequest{Type: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == pooled {
		t.Fatal("the dead pooled sandbox was handed out")
	}
	if out := execOut(t, e.m, "u", rec.ID, "echo", "ok"); out != "ok\n" {
		t.Fatalf("exec = %q", out)
	}
}
