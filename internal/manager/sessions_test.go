package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// Two managers (replicas) on one Redis share native sessions: a connect
// on b finds a's sandbox and creates only the missing type, concurrent
// connects on a and b create one sandbox per type, a release on b has a
// destroy a's sandboxes (PeerDestroy), and a lost replica's sandbox is
// replaced by a connect and its record dropped by a release.
func TestManagersShareSessions(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var aLive atomic.Bool
	aLive.Store(true)
	nodes := func(context.Context) ([]store.Node, error) {
		out := []store.Node{{ID: "b"}}
		if aLive.Load() {
			out = append(out, store.Node{ID: "a"})
		}
		return out, nil
	}
	var ms []*Manager
	for _, node := range []string{"a", "b"} {
		b := fake.New(testutil.AgentBinary(t), t.TempDir())
		t.Cleanup(func() { b.Close() })
		m := New(Config{NodeID: node, Templates: map[string]string{"base": "host", "filesystem": "host"}}, b, rs)
		m.SetNodes(nodes)
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown(context.Background(), true) })
		ms = append(ms, m)
	}
	a, b := ms[0], ms[1]
	// What the forwarder does: the delete runs on the replica hosting it.
	var peerDeletes atomic.Int32
	for _, m := range ms {
		m.SetPeerDestroy(func(ctx context.Context, id sandbox.ID) error {
			peerDeletes.Add(1)
			for _, o := range ms {
				if o.Hosts(id) {
					return o.Delete(ctx, "alice", id)
				}
			}
			return sandbox.ErrNotFound(id)
		})
	}

	first, err := a.ConnectSession(ctx, "alice", "s1", []string{"base"}, CreateRequest{})
	if err != nil || len(first) != 1 || !a.Hosts(first[0].ID) {
		t.Fatalf("connect on a: %+v %v", first, err)
	}
	both, err := b.ConnectSession(ctx, "alice", "s1", []string{"base", "filesystem"}, CreateRequest{})
	if err != nil || len(both) != 2 || both[0].ID != first[0].ID || !b.Hosts(both[1].ID) {
		t.Fatalf("connect on b: %+v %v (a's base: %s)", both, err, first[0].ID)
	}
	if other, err := b.ConnectSession(ctx, "bob", "s1", nil, CreateRequest{}); err != nil || other[0].ID == first[0].ID {
		t.Fatalf("bob's session s1 got %+v %v", other, err)
	}
	ids, err := b.ReleaseSession(ctx, "alice", "s1")
	want := []sandbox.ID{first[0].ID, both[1].ID}
	slices.Sort(ids)
	slices.Sort(want)
	if err != nil || !slices.Equal(ids, want) || peerDeletes.Load() != 1 {
		t.Fatalf("release on b = %v %v, want %v (peer deletes %d)", ids, err, want, peerDeletes.Load())
	}
	if a.Hosts(first[0].ID) || b.Hosts(both[1].ID) {
		t.Fatal("a session's sandbox runs on after its release")
	}
	if _, err := rs.Get(ctx, first[0].ID); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("record of a's released sandbox: %v", err)
	}
	if _, err := b.ReleaseSession(ctx, "bob", "s1"); err != nil {
		t.Fatal(err)
	}

	// Concurrent connects of one session on both replicas.
	for round := 0; round < 3; round++ {
		key := fmt.Sprintf("race%d", round)
		var wg sync.WaitGroup
		got := make([][]*store.Record, 2)
		errs := make([]error, 2)
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = m.ConnectSession(ctx, "alice", key, []string{"base", "filesystem"}, CreateRequest{})
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("%s: %v %v", key, errs[0], errs[1])
		}
		for i := range got[0] {
			if got[0][i].ID != got[1][i].ID {
				t.Fatalf("%s: type %s is %s on a, %s on b", key, got[0][i].Type, got[0][i].ID, got[1][i].ID)
			}
		}
		if recs, err := a.sessionRecords(ctx, "alice", key); err != nil || len(recs) != 2 {
			t.Fatalf("%s: %d sandboxes (%v), want 2", key, len(recs), err)
		}
		if ids, err := a.ReleaseSession(ctx, "alice", key); err != nil || len(ids) != 2 {
			t.Fatalf("release %s: %v %v", key, ids, err)
		}
	}

	// a is lost: b replaces its sandbox on connect, and drops its record
	// on release.
	onA, err := a.ConnectSession(ctx, "alice", "s2", nil, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	aLive.Store(false)
	onB, err := b.ConnectSession(ctx, "alice", "s2", nil, CreateRequest{})
	if err != nil || onB[0].ID == onA[0].ID || !b.Hosts(onB[0].ID) {
		t.Fatalf("connect on b with a lost: %+v %v (a's %s)", onB, err, onA[0].ID)
	}
	ids, err = b.ReleaseSession(ctx, "alice", "s2")
	if err != nil || len(ids) != 2 {
		t.Fatalf("release on b with a lost: %v %v", ids, err)
	}
	if _, err := rs.Get(ctx, onA[0].ID); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("record of the lost replica's sandbox after the release: %v", err)
	}

	// Redis away: a connect cannot know the session's sandboxes on other
	// replicas, so it is refused (503) and creates nothing.
	before := b.Load().Sandboxes
	srv.Stop()
	if got, err := b.ConnectSession(ctx, "alice", "s3", nil, CreateRequest{}); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("connect with Redis away: %+v %v, want unavailable", got, err)
	}
	if _, err := b.ReleaseSession(ctx, "alice", "s3"); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("release with Redis away: %v, want unavailable", err)
	}
	if n := b.Load().Sandboxes; n != before {
		t.Fatalf("b runs %d sandboxes after a refused connect, had %d", n, before)
	}
	srv.Start()
}

// Concurrent connects of one session on one store (bbolt, a lone daemon)
// create one sandbox per type: every caller gets the same set.
func TestSessionConcurrentConnectsOneStore(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	m := New(Config{Templates: map[string]string{"base": "host", "filesystem": "host"}}, b, st)
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	const callers = 8
	got := make([][]*store.Record, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = m.ConnectSession(ctx, "alice", "k", []string{"base", "filesystem"}, CreateRequest{})
		}()
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || len(got[i]) != 2 {
			t.Fatalf("caller %d: %v %v", i, got[i], errs[i])
		}
		for j := range got[i] {
			if got[i][j].ID != got[0][j].ID {
				t.Fatalf("caller %d got %s for %s, caller 0 %s", i, got[i][j].ID, got[i][j].Type, got[0][j].ID)
			}
		}
	}
	if n := len(m.SessionSandboxes("alice", "k")); n != 2 {
		t.Fatalf("%d sandboxes in the session, want 2", n)
	}
	if ids, err := m.ReleaseSession(ctx, "alice", "k"); err != nil || len(ids) != 2 {
		t.Fatalf("release: %v %v", ids, err)
	}
}

// A held session makes the next caller wait, within its context; the
// caller gets it once the holder is done. A holder whose lease was lost
// (it stalled past its time to live and another took the session) cannot
// create in it: the fence refuses before anything boots.
func TestSessionHoldAndFence(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	held, done := make(chan struct{}), make(chan struct{})
	go func() {
		_ = e.m.WithSession(ctx, "alice", "k", func(ctx context.Context, s *Session) error {
			close(held)
			<-done
			return nil
		})
	}()
	<-held
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := e.m.ConnectSession(wctx, "alice", "k", nil, CreateRequest{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect while held: %v, want the caller's deadline", err)
	}
	if _, err := e.m.ConnectSession(ctx, "alice", "other", nil, CreateRequest{}); err != nil {
		t.Fatalf("another session waited for a held one: %v", err)
	}
	close(done)
	recs, err := e.m.ConnectSession(ctx, "alice", "k", nil, CreateRequest{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("connect after the hold: %v %v", recs, err)
	}

	ls := e.st.(store.Leases)
	before := e.m.Load().Sandboxes
	err = e.m.WithSession(ctx, "alice", "stolen", func(ctx context.Context, s *Session) error {
		name := sessionLeaseName("alice", "stolen")
		if ok, err := ls.ReleaseLease(ctx, name, s.lease.Token()); err != nil || !ok {
			t.Fatalf("drop the lease: %v %v", ok, err)
		}
		if ok, err := ls.TryLease(ctx, name, "next holder", time.Minute); err != nil || !ok {
			t.Fatalf("take the lease: %v %v", ok, err)
		}
		_, err := s.Create(ctx, CreateRequest{NoPool: true})
		return err
	})
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("create in a session whose lease was lost: %v, want unavailable", err)
	}
	if n := e.m.Load().Sandboxes; n != before {
		t.Fatalf("%d sandboxes after a fenced create, had %d", n, before)
	}
	if ok, err := ls.RenewLease(ctx, sessionLeaseName("alice", "stolen"), "next holder", time.Minute); err != nil || !ok {
		t.Fatalf("the next holder's lease after the fenced one's release: %v %v", ok, err)
	}
	if err := e.m.WithSession(ctx, "alice", "", func(context.Context, *Session) error { return nil }); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("empty session key: %v", err)
	}
}

// A sandbox can continue in a kept workspace of DEFAULT_MOUNT_DIR (a
// restored session), by name only: nothing else on the host.
func TestKeptWorkspace(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, Config{DefaultMountDir: dir})
	ctx := context.Background()
	first, err := e.m.Create(ctx, "alice", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first.WorkspaceDir != filepath.Join(dir, string(first.ID)) {
		t.Fatalf("workspace %q", first.WorkspaceDir)
	}
	if err := e.m.Delete(ctx, "alice", first.ID); err != nil {
		t.Fatal(err)
	}
	next, err := e.m.Create(ctx, "alice", CreateRequest{Workspace: string(first.ID)})
	if err != nil || next.WorkspaceDir != first.WorkspaceDir {
		t.Fatalf("continue in %s: %+v %v", first.ID, next, err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../etc", "/etc", "missing", "link", "."} {
		if _, err := e.m.Create(ctx, "alice", CreateRequest{Workspace: name}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("workspace %q: %v, want invalid", name, err)
		}
	}
	plain := newEnv(t, Config{})
	if _, err := plain.m.Create(ctx, "alice", CreateRequest{Workspace: string(first.ID)}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("a kept workspace without DEFAULT_MOUNT_DIR: %v, want invalid", err)
	}
}
