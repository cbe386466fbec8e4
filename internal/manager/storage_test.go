package manager

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/testutil"
)

// storeEnv is a manager on the fake backend with a real template store
// holding one image template, "img", and scripted snapshot layers: each
// sandbox's SnapshotDiff writes what layers[id] says.
type storeEnv struct {
	*env
	st *template.Store

	mu     sync.Mutex
	layers map[sandbox.ID]func(w io.Writer) error
}

func newStoreEnv(t *testing.T, cfg Config) *storeEnv {
	t.Helper()
	testutil.RequireRoot(t) // the store unpacks layers with their owners
	ctx := context.Background()
	var m *Manager
	st, err := template.Open(ctx, t.TempDir(), template.Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		InUse: func(digest string) int {
			if m == nil {
				return 0
			}
			return m.TemplateUsers(digest)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	scratch := sandbox.Template{Kind: sandbox.TemplateImage}
	if _, err := st.Commit(ctx, "img", scratch, bytes.NewReader(fileTar(t, "etc/os", 16, false)), sandbox.ImageConfig{}, "test"); err != nil {
		t.Fatal(err)
	}
	cfg.Resolver, cfg.Committer = st, st
	e := &storeEnv{env: newEnv(t, cfg), st: st, layers: map[sandbox.ID]func(io.Writer) error{}}
	m = e.m
	e.b.SnapshotHook = func(ctx context.Context, id sandbox.ID, w io.Writer) error {
		e.mu.Lock()
		write := e.layers[id]
		e.mu.Unlock()
		if write == nil {
			_, err := w.Write(fileTar(t, "empty", 0, false))
			return err
		}
		return write(w)
	}
	return e
}

// sandboxWithLayer creates a sandbox of img for owner whose snapshots
// write layer.
func (e *storeEnv) sandboxWithLayer(t *testing.T, owner string, layer func(w io.Writer) error) sandbox.ID {
	t.Helper()
	rec, err := e.m.Create(context.Background(), owner, CreateRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	e.setLayer(rec.ID, layer)
	return rec.ID
}

func (e *storeEnv) setLayer(id sandbox.ID, layer func(w io.Writer) error) {
	e.mu.Lock()
	e.layers[id] = layer
	e.mu.Unlock()
}

// fileTar is a layer tar of one file of n bytes, random or zero.
func fileTar(t testing.TB, name string, n int, zero bool) []byte {
	t.Helper()
	body := make([]byte, n)
	if !zero {
		rand.Read(body)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(n), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomLayer writes a new random file of n bytes at every snapshot.
func randomLayer(t testing.TB, n int) func(w io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(fileTar(t, "data", n, false))
		return err
	}
}

func wantClassOf(t *testing.T, err error, c sandbox.Class, what string) {
	t.Helper()
	if got := sandbox.ClassOf(err); err == nil || got != c {
		t.Fatalf("%s: %v (class %s), want %s", what, err, got, c)
	}
}

// TestSecuritySnapshotQuota: a tenant's snapshots are charged to its own
// storage quota and name count: past them a snapshot is refused (or
// stopped while its layer streams) and stores nothing, while another
// tenant snapshots on; deleting frees quota; template admins are exempt.
func TestSecuritySnapshotQuota(t *testing.T) {
	e := newStoreEnv(t, Config{StorageQuota: 10 << 20, MaxPrivateTemplates: 3, TemplateAdmins: []string{"op"}})
	ctx := context.Background()
	alice := e.sandboxWithLayer(t, "alice", randomLayer(t, 4<<20))
	for _, n := range []string{"s1", "s2"} {
		if _, err := e.m.Snapshot(ctx, "alice", alice, n); err != nil {
			t.Fatalf("snapshot %s: %v", n, err)
		}
	}
	before := e.st.PrivateUsage("alice")
	if before.Bytes < 8<<20 || before.Bytes > 9<<20 || len(before.Templates) != 2 {
		t.Fatalf("alice's usage after two 4 MiB snapshots: %+v", before)
	}
	// The third passes the 10 MiB quota while it streams: stopped, nothing stored.
	_, err := e.m.Snapshot(ctx, "alice", alice, "s3")
	wantClassOf(t, err, sandbox.ClassQuota, "a snapshot past the quota")
	if _, err := e.st.Get(ctx, template.PrivateName("alice", "s3")); !sandbox.IsNotFound(err) {
		t.Errorf("the refused snapshot was stored: %v", err)
	}
	if after := e.st.PrivateUsage("alice"); after.Bytes != before.Bytes {
		t.Errorf("alice's usage went from %d to %d with a refused snapshot", before.Bytes, after.Bytes)
	}
	// Another tenant is not affected.
	bob := e.sandboxWithLayer(t, "bob", randomLayer(t, 4<<20))
	if _, err := e.m.Snapshot(ctx, "bob", bob, "b1"); err != nil {
		t.Fatalf("bob's snapshot while alice is at her quota: %v", err)
	}

	// A small one fits; then alice has three names, the most she may.
	e.setLayer(alice, randomLayer(t, 64<<10))
	if _, err := e.m.Snapshot(ctx, "alice", alice, "s3"); err != nil {
		t.Fatalf("a small snapshot within the quota: %v", err)
	}
	calls := e.b.Calls("snapshot")
	_, err = e.m.Snapshot(ctx, "alice", alice, "s4")
	wantClassOf(t, err, sandbox.ClassQuota, "a fourth private template")
	if e.b.Calls("snapshot") != calls {
		t.Error("a snapshot refused for the count froze and read the sandbox first")
	}
	// A name she has is replaced, not added.
	if _, err := e.m.Snapshot(ctx, "alice", alice, "s3"); err != nil {
		t.Errorf("snapshot into a name she has: %v", err)
	}

	// Deleting frees quota and a name.
	if err := e.st.Delete(ctx, template.PrivateName("alice", "s1")); err != nil {
		t.Fatal(err)
	}
	e.setLayer(alice, randomLayer(t, 4<<20))
	if _, err := e.m.Snapshot(ctx, "alice", alice, "s4"); err != nil {
		t.Fatalf("snapshot after deleting one: %v", err)
	}

	// The operator is not charged.
	op := e.sandboxWithLayer(t, "op", randomLayer(t, 4<<20))
	for _, n := range []string{"o1", "o2", "o3", "o4"} {
		if _, err := e.m.Snapshot(ctx, "op", op, n); err != nil {
			t.Fatalf("template admin's snapshot %s: %v", n, err)
		}
	}
}

// TestSecuritySnapshotSizeCap: a tenant's snapshot layer is bounded while
// it streams, sparse files at their full size: a file of a few GiB of
// zeroes (holes cost its sandbox nothing) costs the daemon only about the
// cap's worth of reading before it is stopped with 413.
func TestSecuritySnapshotSizeCap(t *testing.T) {
	e := newStoreEnv(t, Config{SnapshotMaxBytes: 4 << 20})
	ctx := context.Background()
	var written int64
	id := e.sandboxWithLayer(t, "alice", func(w io.Writer) error {
		tw := tar.NewWriter(w)
		const size = 3 << 30
		if err := tw.WriteHeader(&tar.Header{Name: "sparse", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		zero := make([]byte, 1<<20)
		for done := 0; done < size; done += len(zero) {
			n, err := tw.Write(zero)
			written += int64(n)
			if err != nil {
				return err
			}
		}
		return tw.Close()
	})
	_, err := e.m.Snapshot(ctx, "alice", id, "sparse")
	wantClassOf(t, err, sandbox.ClassTooLarge, "a 3 GiB sparse file past a 4 MiB cap")
	if written > 8<<20 {
		t.Errorf("the daemon read %d MiB of the layer before stopping it at a cap of 4 MiB", written>>20)
	}
	if _, err := e.st.Get(ctx, template.PrivateName("alice", "sparse")); !sandbox.IsNotFound(err) {
		t.Errorf("the stopped snapshot was stored: %v", err)
	}
}

// TestSecuritySnapshotAdmission: a snapshot is one of its owner's heavy
// requests: with MAX_REQUESTS_PER_USER=1 a second snapshot of the same
// user is refused with a Retry-After while the first runs; another
// user's goes on.
func TestSecuritySnapshotAdmission(t *testing.T) {
	e := newStoreEnv(t, Config{MaxRequestsPerUser: 1})
	ctx := context.Background()
	started, finish := make(chan struct{}), make(chan struct{})
	slow := e.sandboxWithLayer(t, "alice", func(w io.Writer) error {
		close(started)
		<-finish
		_, err := w.Write(fileTar(t, "a", 1024, false))
		return err
	})
	other := e.sandboxWithLayer(t, "alice", randomLayer(t, 1024))
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Snapshot(ctx, "alice", slow, "first")
		done <- err
	}()
	<-started
	_, err := e.m.Snapshot(ctx, "alice", other, "second")
	wantClassOf(t, err, sandbox.ClassQuota, "a second concurrent snapshot of one user")
	var ra *RetryAfterError
	if !errors.As(err, &ra) {
		t.Errorf("the refusal carries no Retry-After: %v", err)
	}
	bob := e.sandboxWithLayer(t, "bob", randomLayer(t, 1024))
	if _, err := e.m.Snapshot(ctx, "bob", bob, "b"); err != nil {
		t.Errorf("bob's snapshot while alice's runs: %v", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("the first snapshot: %v", err)
	}
	if _, err := e.m.Snapshot(ctx, "alice", other, "second"); err != nil {
		t.Errorf("the second snapshot once the first ended: %v", err)
	}
}

// TestSecuritySnapshotQuotaConcurrent: two snapshots of one user in flight
// share what is left of the quota, they cannot each take all of it: with
// 10 MiB, a 7 MiB one streaming and a 6 MiB one started meanwhile, the
// second is stopped and the first is stored.
func TestSecuritySnapshotQuotaConcurrent(t *testing.T) {
	e := newStoreEnv(t, Config{StorageQuota: 10 << 20, MaxRequestsPerUser: 4})
	ctx := context.Background()
	half, rest := make(chan struct{}), make(chan struct{})
	big := fileTar(t, "a", 7<<20, false)
	first := e.sandboxWithLayer(t, "alice", func(w io.Writer) error {
		// All but the tar's end: the store has read (and charged) it
		// when Write returns, io.Pipe being synchronous.
		if _, err := w.Write(big[:len(big)-1024]); err != nil {
			return err
		}
		close(half)
		<-rest
		_, err := w.Write(big[len(big)-1024:])
		return err
	})
	second := e.sandboxWithLayer(t, "alice", randomLayer(t, 6<<20))
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Snapshot(ctx, "alice", first, "first")
		done <- err
	}()
	<-half
	_, err := e.m.Snapshot(ctx, "alice", second, "second")
	close(rest)
	wantClassOf(t, err, sandbox.ClassQuota, "a snapshot while another holds most of the quota")
	if err := <-done; err != nil {
		t.Fatalf("the first snapshot: %v", err)
	}
	if u := e.st.PrivateUsage("alice"); len(u.Templates) != 1 || u.Bytes > 10<<20 {
		t.Errorf("alice's templates after both: %+v", u)
	}
}
