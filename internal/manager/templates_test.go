package manager

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// mapResolver is a template store stand-in: names to templates.
type mapResolver struct {
	mu sync.Mutex
	m  map[string]sandbox.Template
}

func (r *mapResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[ref]
	if !ok {
		return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "unknown template %q", ref)
	}
	return t, nil
}

func (r *mapResolver) set(ref string, t sandbox.Template) {
	r.mu.Lock()
	r.m[ref] = t
	r.mu.Unlock()
}

// fakeCommitter records what it was asked to store, reading the layer as
// a tar as the store does.
type fakeCommitter struct {
	name, source string
	base         sandbox.Template
	cfg          sandbox.ImageConfig
	files        map[string]string
	err          error
}

func (c *fakeCommitter) PrivateUsage(owner string) template.Usage { return template.Usage{} }
func (c *fakeCommitter) CheckFree(reserve int64) error            { return nil }

func (c *fakeCommitter) CommitWith(ctx context.Context, name string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string, opts template.CommitOptions) (template.Info, error) {
	if c.err != nil {
		return template.Info{}, c.err
	}
	c.name, c.base, c.cfg, c.source, c.files = name, base, cfg, source, map[string]string{}
	tr := tar.NewReader(diff)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return template.Info{}, err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return template.Info{}, err
		}
		c.files[h.Name] = string(body)
	}
	return template.Info{Name: "snap", Tag: "v1", Kind: sandbox.TemplateImage, Digest: "sha256:new", Source: source}, nil
}

func pyTemplate(digest string) sandbox.Template {
	return sandbox.Template{Ref: "py:3", Digest: digest, Kind: sandbox.TemplateImage, Layers: []string{"/store/layers/a"},
		Config: sandbox.ImageConfig{Env: []string{"A=1"}, User: "app"}}
}

// TestResolverAndSnapshot: a request's template name goes through the
// configured resolver; the backend gets the resolved template and image
// roots are writable; Snapshot feeds the backend's layer and the base
// template to the committer, for the owner only, and refuses host.
func TestResolverAndSnapshot(t *testing.T) {
	res := &mapResolver{m: map[string]sandbox.Template{"host": sandbox.HostTemplate(), "py:3": pyTemplate("sha256:one")}}
	com := &fakeCommitter{}
	e := newEnv(t, Config{Resolver: res, Committer: com})
	ctx := context.Background()
	var specs []sandbox.Spec
	var mu sync.Mutex
	e.b.CreateHook = func(ctx context.Context, s sandbox.Spec) error {
		mu.Lock()
		specs = append(specs, s)
		mu.Unlock()
		return nil
	}
	rec, err := e.m.Create(ctx, "alice", CreateRequest{Template: "py:3"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Template != "py:3" || rec.TemplateDigest != "sha256:one" {
		t.Fatalf("record = %+v", rec)
	}
	if len(specs) != 1 || specs[0].Template.Kind != sandbox.TemplateImage || specs[0].Template.Layers[0] != "/store/layers/a" || !specs[0].WritableRoot {
		t.Fatalf("backend spec = %+v", specs)
	}
	if _, err := e.m.Create(ctx, "alice", CreateRequest{Template: "nope"}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("unknown template: %v", err)
	}

	// Bob cannot snapshot Alice's sandbox: it does not exist for him.
	if _, err := e.m.Snapshot(ctx, "bob", rec.ID, "snap:v1"); !sandbox.IsNotFound(err) {
		t.Fatalf("bob snapshot: %v", err)
	}
	for _, bad := range []string{"", "a b", "x\n", string(make([]byte, 300))} {
		if _, err := e.m.Snapshot(ctx, "alice", rec.ID, bad); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("name %q: %v, want invalid", bad, err)
		}
	}
	info, err := e.m.Snapshot(ctx, "alice", rec.ID, "snap:v1")
	if err != nil {
		t.Fatal(err)
	}
	// A tenant's snapshot goes to its own private namespace: it can
	// neither replace a shared template nor be used by other tenants.
	private := template.PrivateName("alice", "snap:v1")
	if info.Name != "snap" || com.name != private || com.base.Ref != "py:3" || com.cfg.User != "app" ||
		com.source != "snapshot of "+string(rec.ID) || com.files["snapshot"] != string(rec.ID) {
		t.Fatalf("commit = %+v, info %+v", com, info)
	}
	if _, err := e.m.Snapshot(ctx, "alice", rec.ID, template.PrivateName("bob", "x")); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("snapshot into bob's namespace: %v, want invalid", err)
	}
	res.set(private, pyTemplate("sha256:snap"))
	if _, err := e.m.Create(ctx, "bob", CreateRequest{Template: private}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("bob created a sandbox from alice's snapshot: %v", err)
	}
	if own, err := e.m.Create(ctx, "alice", CreateRequest{Template: private}); err != nil {
		t.Errorf("alice from her own snapshot: %v", err)
	} else {
		_ = e.m.Delete(ctx, "alice", own.ID)
	}

	// A layer the backend fails to write fails the snapshot.
	e.b.SnapshotHook = func(ctx context.Context, id sandbox.ID, w io.Writer) error {
		w.Write([]byte("partial"))
		return errors.New("disk on fire")
	}
	if _, err := e.m.Snapshot(ctx, "alice", rec.ID, "snap:v2"); err == nil {
		t.Fatal("a failed layer made a template")
	}
	e.b.SnapshotHook = nil
	com.err = sandbox.Errorf(sandbox.ClassConflict, "template snap:v1 exists")
	if _, err := e.m.Snapshot(ctx, "alice", rec.ID, "snap:v1"); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("store refusal: %v, want its class", err)
	}
	com.err = nil

	host, err := e.m.Create(ctx, "alice", CreateRequest{Template: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Snapshot(ctx, "alice", host.ID, "h"); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("host snapshot: %v, want invalid", err)
	}
}

// TestSnapshotWithoutStore: no committer, no snapshots.
func TestSnapshotWithoutStore(t *testing.T) {
	e := newEnv(t, Config{})
	rec, err := e.m.Create(context.Background(), "alice", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Snapshot(context.Background(), "alice", rec.ID, "x"); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("snapshot without a store: %v", err)
	}
}

// TestPoolFollowsTemplate: pools are per template name; when the name
// moves to new content, pooled sandboxes of the old digest are not handed
// out.
func TestPoolFollowsTemplate(t *testing.T) {
	res := &mapResolver{m: map[string]sandbox.Template{"py:3": pyTemplate("sha256:one")}}
	e := newEnv(t, Config{Resolver: res, PoolTypes: []string{"py:3"}, PoolSize: 1, Templates: map[string]string{}})
	ctx := context.Background()
	waitFor(t, 10*time.Second, "pool fill", func() bool { return e.m.PoolLevels()["py:3"] == 1 })
	rec, err := e.m.Create(ctx, "alice", CreateRequest{Template: "py:3"})
	if err != nil || !rec.FromPool || rec.TemplateDigest != "sha256:one" {
		t.Fatalf("pooled create = %+v %v", rec, err)
	}
	waitFor(t, 10*time.Second, "pool refill", func() bool { return e.m.PoolLevels()["py:3"] == 1 })
	res.set("py:3", pyTemplate("sha256:two"))
	rec, err = e.m.Create(ctx, "alice", CreateRequest{Template: "py:3"})
	// The pool may refill with the new content while the create discards
	// the stale sandbox, and hand that one out: fine, so long as it is the
	// new content.
	if err != nil || rec.TemplateDigest != "sha256:two" {
		t.Fatalf("create after the template moved = %+v %v", rec, err)
	}
	// The stale pooled sandbox is gone: the only one of the old content
	// left is the one alice took before the move.
	e.m.mu.Lock()
	var stale []sandbox.ID
	for id, en := range e.m.entries {
		if en.rec.TemplateDigest == "sha256:one" && !en.destroying {
			stale = append(stale, id)
		}
	}
	e.m.mu.Unlock()
	if len(stale) != 1 {
		t.Fatalf("sandboxes of the old content after the move: %v, want only the one taken before it", stale)
	}
}
