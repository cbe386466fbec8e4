package manager

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

func recState(t *testing.T, m *Manager, owner string, id sandbox.ID) sandbox.State {
	t.Helper()
	rec, err := m.Get(context.Background(), owner, id)
	if err != nil {
		return ""
	}
	return rec.State
}

// TestPauseKeepsClock: pause stops the clock (the remaining time is kept,
// end_at becomes the paused TTL's deadline), the data plane and timeouts
// are a conflict while paused, other owners get 404, and resume gives the
// remaining time back (or the timeout it is asked for).
func TestPauseKeepsClock(t *testing.T) {
	e := newEnv(t, Config{PausedTTL: 2 * time.Hour})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "alice", CreateRequest{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Pause(ctx, "bob", rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("bob pause: %v", err)
	}
	p, err := e.m.Pause(ctx, "alice", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != sandbox.StatePaused || p.Remaining <= 59*time.Minute || p.Remaining > time.Hour ||
		p.PausedAt.IsZero() || p.EndAt.Sub(p.PausedAt) != 2*time.Hour {
		t.Fatalf("paused record = %+v", p)
	}
	if again, err := e.m.Pause(ctx, "alice", rec.ID); err != nil || again.PausedAt != p.PausedAt {
		t.Fatalf("pause again = %+v, %v", again, err)
	}
	if stored, _ := e.st.Get(ctx, rec.ID); stored.State != sandbox.StatePaused || stored.Remaining != p.Remaining {
		t.Fatalf("stored record = %+v", stored)
	}
	if _, err := execBuffered(t, e.m, ctx, "alice", rec.ID, dataplane.ExecRequest{Cmd: []string{"true"}}); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("exec on paused: %v, want conflict", err)
	}
	if _, err := e.m.SetTimeout(ctx, "alice", rec.ID, time.Minute); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("set timeout on paused: %v, want conflict", err)
	}
	if _, err := e.m.StopSandbox(ctx, "alice", rec.ID); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("stop paused: %v, want conflict", err)
	}
	page, _ := e.m.List(ctx, "alice", ListOptions{States: []sandbox.State{sandbox.StatePaused}})
	if len(page.Records) != 1 || page.Records[0].ID != rec.ID {
		t.Fatalf("list paused = %+v", page.Records)
	}
	if _, err := e.m.Resume(ctx, "bob", rec.ID, 0); !sandbox.IsNotFound(err) {
		t.Fatalf("bob resume: %v", err)
	}
	r, err := e.m.Resume(ctx, "alice", rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(r.EndAt); r.State != sandbox.StateRunning || left > p.Remaining || left < p.Remaining-time.Minute ||
		!r.PausedAt.IsZero() || r.Remaining != 0 {
		t.Fatalf("resumed record = %+v (remaining was %s)", r, p.Remaining)
	}
	if out := execOut(t, e.m, "alice", rec.ID, "echo", "back"); out != "back\n" {
		t.Fatalf("exec after resume = %q", out)
	}
	if _, err := e.m.Resume(ctx, "alice", rec.ID, 0); err != nil {
		t.Fatalf("resume a running sandbox: %v", err)
	}
	if _, err := e.m.Pause(ctx, "alice", rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Resume(ctx, "alice", rec.ID, -time.Second); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("negative timeout: %v", err)
	}
	r, err = e.m.Resume(ctx, "alice", rec.ID, 10*time.Minute)
	if left := time.Until(r.EndAt); err != nil || left > 10*time.Minute || left < 9*time.Minute {
		t.Fatalf("resume with a timeout = %+v, %v", r, err)
	}
}

// TestPausedDoesNotExpire: a sandbox paused before its timeout outlives
// it, and runs out its remaining time only once resumed.
func TestPausedDoesNotExpire(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "u", CreateRequest{Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Pause(ctx, "u", rec.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond) // twice its timeout
	if st := recState(t, e.m, "u", rec.ID); st != sandbox.StatePaused {
		t.Fatalf("state after its timeout passed while paused = %q", st)
	}
	if _, err := e.m.Resume(ctx, "u", rec.ID, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "expiry after resume", func() bool { return recState(t, e.m, "u", rec.ID) == "" })
}

// TestAutoPause: at its timeout an auto-pause sandbox is paused, not
// destroyed, and resumes with the default timeout; a plain one is
// destroyed; a sandbox paused for the paused TTL is destroyed.
func TestAutoPause(t *testing.T) {
	e := newEnv(t, Config{DefaultTimeout: time.Hour, PausedTTL: time.Hour})
	ctx := context.Background()
	auto, err := e.m.Create(ctx, "u", CreateRequest{Timeout: 300 * time.Millisecond, AutoPause: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.m.Create(ctx, "u", CreateRequest{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !auto.AutoPause || plain.AutoPause {
		t.Fatalf("auto_pause recorded as %v and %v", auto.AutoPause, plain.AutoPause)
	}
	waitFor(t, 10*time.Second, "auto-pause", func() bool { return recState(t, e.m, "u", auto.ID) == sandbox.StatePaused })
	waitFor(t, 10*time.Second, "plain expiry", func() bool { return recState(t, e.m, "u", plain.ID) == "" })
	r, err := e.m.Resume(ctx, "u", auto.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(r.EndAt); left < 59*time.Minute {
		t.Fatalf("resumed after auto-pause with %s left, want the default timeout", left)
	}
	if out := execOut(t, e.m, "u", auto.ID, "echo", "ok"); out != "ok\n" {
		t.Fatalf("exec after auto-pause and resume = %q", out)
	}

	short := newEnv(t, Config{PausedTTL: 300 * time.Millisecond})
	rec, err := short.m.Create(ctx, "u", CreateRequest{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.m.Pause(ctx, "u", rec.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "paused TTL", func() bool { return recState(t, short.m, "u", rec.ID) == "" })
	if _, err := short.b.Inspect(ctx, rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("backend still has the sandbox after its paused TTL: %v", err)
	}
}

// TestPausedSessionNotRecycled: the idle-session heartbeat leaves a
// paused session sandbox alone.
func TestPausedSessionNotRecycled(t *testing.T) {
	e := newEnv(t, Config{HeartbeatTimeout: time.Second})
	ctx := context.Background()
	recs, err := e.m.ConnectSession(ctx, "u", "s", nil, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Paused before anything else: a create on a loaded host can take
	// longer than the heartbeat timeout, which would recycle it first.
	if _, err := e.m.Pause(ctx, "u", recs[0].ID); err != nil {
		t.Fatal(err)
	}
	idle, err := e.m.ConnectSession(ctx, "u", "idle", nil, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Once the unpaused idle session is recycled, the paused one was idle
	// for longer and must still be there.
	waitFor(t, 10*time.Second, "idle session recycled", func() bool { return recState(t, e.m, "u", idle[0].ID) == "" })
	time.Sleep(2 * time.Second) // past another sweep
	if st := recState(t, e.m, "u", recs[0].ID); st != sandbox.StatePaused {
		t.Fatalf("paused session sandbox state = %q", st)
	}
}

// TestPauseAcrossRestart: a restarted manager keeps a paused sandbox
// paused with its remaining time, and resumes it.
func TestPauseAcrossRestart(t *testing.T) {
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	st := store.NewMemory()
	ctx := context.Background()
	m1 := New(Config{}, b, st)
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := m1.Create(ctx, "u", CreateRequest{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m1.Pause(ctx, "u", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Shutdown(ctx, false); err != nil {
		t.Fatal(err)
	}
	m2 := New(Config{}, b, st)
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Shutdown(ctx, true)
	got, err := m2.Get(ctx, "u", rec.ID)
	if err != nil || got.State != sandbox.StatePaused || got.Remaining != p.Remaining {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	if _, err := m2.Resume(ctx, "u", rec.ID, 0); err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, m2, "u", rec.ID, "echo", "back"); out != "back\n" {
		t.Fatalf("exec after restart and resume = %q", out)
	}
}

// TestPauseConcurrent: pauses, resumes, gets and a delete racing each
// other leave a consistent end: the sandbox gone from the manager, the
// backend and the store.
func TestPauseConcurrent(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "u", CreateRequest{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				switch (g + i) % 3 {
				case 0:
					_, _ = e.m.Pause(ctx, "u", rec.ID)
				case 1:
					_, _ = e.m.Resume(ctx, "u", rec.ID, 0)
				default:
					if r, err := e.m.Get(ctx, "u", rec.ID); err == nil && r.State == sandbox.StatePaused && r.Remaining <= 0 {
						t.Errorf("paused record without its remaining time: %+v", r)
					}
				}
			}
		}(g)
	}
	time.Sleep(20 * time.Millisecond)
	if err := e.m.Delete(ctx, "u", rec.ID); err != nil {
		t.Errorf("delete during pauses: %v", err)
	}
	wg.Wait()
	if _, err := e.m.Get(ctx, "u", rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := e.b.Inspect(ctx, rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("backend after delete: %v", err)
	}
	if _, err := e.st.Get(ctx, rec.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("a record outlived the delete: %v", err)
	}
}

// TestPausePool: a pooled sandbox belongs to nobody and cannot be
// paused; one handed out and paused leaves the pool, which keeps handing
// out running sandboxes; auto-pause asked of a pooled create is kept.
func TestPausePool(t *testing.T) {
	e := newEnv(t, Config{PoolTypes: []string{"base"}, PoolSize: 1})
	ctx := context.Background()
	waitFor(t, 30*time.Second, "pool fill", func() bool { return e.m.PoolLevels()["host"] == 1 })
	e.m.mu.Lock()
	var pooled sandbox.ID
	for id, en := range e.m.entries {
		if en.rec.Pool != "" {
			pooled = id
		}
	}
	e.m.mu.Unlock()
	if _, err := e.m.Pause(ctx, "", pooled); !sandbox.IsNotFound(err) {
		t.Fatalf("pause of a pooled sandbox: %v", err)
	}
	first, err := e.m.Create(ctx, "u", CreateRequest{AutoPause: true})
	if err != nil || !first.FromPool || !first.AutoPause {
		t.Fatalf("pool hit = %+v, %v", first, err)
	}
	if _, err := e.m.Pause(ctx, "u", first.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "pool refill", func() bool { return e.m.PoolLevels()["host"] == 1 })
	second, err := e.m.Create(ctx, "u", CreateRequest{})
	if err != nil || !second.FromPool || second.ID == first.ID || second.State != sandbox.StateRunning {
		t.Fatalf("second pool hit = %+v, %v", second, err)
	}
	if out := execOut(t, e.m, "u", second.ID, "echo", "fresh"); out != "fresh\n" {
		t.Fatalf("exec in the second pooled sandbox = %q", out)
	}
}
