package daytona

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// fakeTemplates holds templates by reference.
type fakeTemplates map[string]template.Info

func (f fakeTemplates) List(context.Context) ([]template.Info, error) {
	var out []template.Info
	for _, i := range f {
		out = append(out, i)
	}
	return out, nil
}

func (f fakeTemplates) Get(_ context.Context, ref string) (template.Info, error) {
	if i, ok := f[ref]; ok {
		return i, nil
	}
	return template.Info{}, sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", ref)
}

func (f fakeTemplates) Delete(_ context.Context, ref string) error {
	delete(f, ref)
	return nil
}

func TestAsRoot(t *testing.T) {
	s := &Server{cfg: Config{Templates: fakeTemplates{
		"base":   {Name: "base", Config: sandbox.ImageConfig{User: "user"}},
		"rooted": {Name: "rooted"},
	}}}
	for _, c := range []struct{ in, want string }{
		{"FROM base\nRUN apt-get update\nENV A=1\n", "FROM base\nUSER root\nRUN apt-get update\nENV A=1\nUSER user\n"},
		{"# a comment\nFROM base\nRUN x\n", "# a comment\nFROM base\nUSER root\nRUN x\nUSER user\n"},
		// Left as they are: a root template, an unknown image, the
		// Dockerfile's own USER, several stages, an ARG.
		{"FROM rooted\nRUN x\n", "FROM rooted\nRUN x\n"},
		{"FROM python:3.12\nRUN x\n", "FROM python:3.12\nRUN x\n"},
		{"FROM base\nUSER user\nRUN x\n", "FROM base\nUSER user\nRUN x\n"},
		{"FROM base AS a\nRUN x\nFROM base\nCOPY --from=a /x /x\n", "FROM base AS a\nRUN x\nFROM base\nCOPY --from=a /x /x\n"},
		{"ARG V=1\nFROM base\n", "ARG V=1\nFROM base\n"},
		{"FROM --platform=linux/amd64 base\n", "FROM --platform=linux/amd64 base\n"},
	} {
		if got := s.asRoot(context.Background(), c.in); got != c.want {
			t.Errorf("asRoot(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDockerfileOf(t *testing.T) {
	if df, err := dockerfileOf("base", []string{"/bin/sh", "-c", "sleep 1"}, nil); err != nil || df != "FROM base\nENTRYPOINT [\"/bin/sh\",\"-c\",\"sleep 1\"]\n" {
		t.Fatalf("image name: %q %v", df, err)
	}
	for _, bad := range []string{"", "base\nRUN evil", "a b"} {
		if _, err := dockerfileOf(bad, nil, nil); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("imageName %q: %v", bad, err)
		}
	}
	if _, err := dockerfileOf("", nil, &buildInfoIn{DockerfileContent: "  "}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("empty Dockerfile: %v", err)
	}
	a := imageTemplate(&buildInfoIn{DockerfileContent: "FROM base\n", ContextHashes: []string{"ab"}})
	b := imageTemplate(&buildInfoIn{DockerfileContent: "FROM base\n", ContextHashes: []string{"ac"}})
	if a == b || !snapshotName().MatchString(a) {
		t.Fatalf("image names %q %q", a, b)
	}
}

// TestSnapshotNamespaces: a tenant's snapshot is its private template,
// found before a shared one of the same name; another tenant's is not
// found at all.
func TestSnapshotNamespaces(t *testing.T) {
	mine := template.PrivateName("alice", "app")
	s := &Server{builds: newBuildRegistry(), cfg: Config{Templates: fakeTemplates{
		"app": {Name: "app", Tag: "latest"},
		mine:  {Name: mine, Tag: "latest"},
	}}}
	ctx := context.Background()
	if got := s.snapshotRef(ctx, "alice", "app"); got != mine {
		t.Fatalf("alice's app: %q", got)
	}
	if got := s.snapshotRef(ctx, "bob", "app"); got != "app" {
		t.Fatalf("bob's app: %q", got)
	}
	o, _, err := s.findSnapshot(ctx, "alice", "app")
	if err != nil || o.General || o.Name != "app" {
		t.Fatalf("alice finds %+v %v", o, err)
	}
	o, _, err = s.findSnapshot(ctx, "bob", "app")
	if err != nil || !o.General {
		t.Fatalf("bob finds %+v %v", o, err)
	}
	if _, _, err := s.findSnapshot(ctx, "bob", mine); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("bob reaches alice's by its full name: %v", err)
	}
}

// TestPendingCreates: a placeholder is its owner's alone, found by its
// own ID and, once made, by the sandbox's.
func TestPendingCreates(t *testing.T) {
	g := newPendingRegistry()
	p := &pendingCreate{id: "pending-1", owner: "alice", created: time.Now()}
	if err := g.add(p); err != nil {
		t.Fatal(err)
	}
	if g.lookup("alice", "pending-1") != p || g.lookup("bob", "pending-1") != nil {
		t.Fatal("lookup by placeholder")
	}
	g.created(p, "sb-1")
	p.finish("sb-1", "")
	if g.lookup("alice", "sb-1") != p || g.lookup("bob", "sb-1") != nil {
		t.Fatal("lookup by sandbox")
	}
	g.remove(p)
	if g.lookup("alice", "pending-1") != nil || g.lookup("alice", "sb-1") != nil {
		t.Fatal("removed placeholder still found")
	}
}

// TestSnapshotAlias: Daytona's default snapshot names (and their image)
// are agentbox's base; every other name, a tenant's own included, is left.
func TestSnapshotAlias(t *testing.T) {
	for in, want := range map[string]string{
		"daytona-small": "base", "daytona-medium": "base", "daytona-large": "base",
		"daytonaio/sandbox": "base", "daytonaio/sandbox:0.4.3": "base",
		"code-interpreter": "code-interpreter", "daytona-gpu": "daytona-gpu", "my-app": "my-app",
		"daytonaio/sandboxes": "daytonaio/sandboxes", "other/daytonaio/sandbox:1": "other/daytonaio/sandbox:1",
	} {
		if got := snapshotAlias(in); got != want {
			t.Errorf("snapshotAlias(%q) = %q, want %q", in, got, want)
		}
	}
}
