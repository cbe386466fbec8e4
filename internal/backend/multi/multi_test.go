package multi_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/docker/dockertest"
	"github.com/agentbox/agentbox/internal/backend/multi"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

func TestMain(m *testing.M) {
	native.SealSelf()
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// pair is a native and a Docker backend over one state dir behind a
// dispatcher, as the daemon runs them side by side.
type pair struct {
	*multi.Backend
	native *native.Backend
	docker *docker.Backend
}

func newPair(t *testing.T, dir string) backend.Backend {
	t.Helper()
	testutil.RequireRoot(t)
	nb, err := native.New(native.Config{Root: filepath.Join(dir, "n"), AgentPath: testutil.AgentBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	db, err := docker.New(context.Background(), docker.Config{Root: filepath.Join(dir, "d"), AgentPath: testutil.AgentBinary(t)})
	if err != nil {
		nb.Close()
		t.Fatal(err)
	}
	p := &pair{Backend: multi.New(nb, db), native: nb, docker: db}
	t.Cleanup(func() {
		db.Close()
		nb.Close()
	})
	return p
}

func abandon(b backend.Backend) {
	p := b.(*pair)
	p.docker.Abandon()
	p.native.Abandon()
}

// TestConformanceSideBySide runs the conformance suite through one
// dispatcher twice: with the host template (native runs it) and with a
// docker: template (the Docker backend runs it), and checks that each
// sandbox landed where its template says.
func TestConformanceSideBySide(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, err := dockertest.Available(ctx)
	if err != nil {
		if os.Getenv("AGENTBOX_REQUIRE_DOCKER") == "1" {
			t.Fatalf("no Docker engine: %v", err)
		}
		t.Skipf("no Docker engine: %v", err)
	}
	defer api.Close()
	image, err := dockertest.EnsureImage(ctx, api, dockertest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dockerTmpl := sandbox.Template{Ref: "docker:" + image, Kind: sandbox.TemplateDocker}
	for name, tmpl := range map[string]sandbox.Template{"native": sandbox.HostTemplate(), "docker": dockerTmpl} {
		t.Run(name, func(t *testing.T) {
			backendtest.Run(t, backendtest.Harness{
				New:      newPair,
				StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
				Template: tmpl,
				Abandon:  abandon,
			})
		})
	}
	t.Run("Routing", func(t *testing.T) {
		p := newPair(t, testutil.ShortTempDir(t)).(*pair)
		n := backendtest.Create(t, p, sandbox.Spec{Template: sandbox.HostTemplate()})
		d := backendtest.Create(t, p, sandbox.Spec{Template: dockerTmpl})
		if _, err := p.native.Inspect(ctx, n.ID); err != nil {
			t.Errorf("host sandbox not on native: %v", err)
		}
		if _, err := p.docker.Inspect(ctx, d.ID); err != nil {
			t.Errorf("docker: sandbox not on docker: %v", err)
		}
		if _, err := p.native.Inspect(ctx, d.ID); !sandbox.IsNotFound(err) {
			t.Errorf("docker: sandbox known to native: %v", err)
		}
		// Docker sandboxes pause through the engine; native ones do not pause.
		if err := p.Pause(ctx, d.ID); err != nil {
			t.Errorf("pause docker sandbox: %v", err)
		}
		if err := p.Resume(ctx, d.ID); err != nil {
			t.Errorf("resume docker sandbox: %v", err)
		}
		if err := p.UpdateNetwork(ctx, d.ID, sandbox.Network{Mode: sandbox.NetworkNone}); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
			t.Errorf("network update of a docker sandbox: %v, want unavailable", err)
		}
		caps := p.Capabilities()
		if caps.Templates[len(caps.Templates)-1] != sandbox.TemplateDocker || !caps.Pause {
			t.Errorf("capabilities = %+v", caps)
		}
		if p.Name() != "native+docker" {
			t.Errorf("name = %q", p.Name())
		}
	})
}
