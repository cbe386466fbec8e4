package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

func TestTypeTemplates(t *testing.T) {
	cfg, err := config.Load("", nil, map[string]string{
		"SANDBOX_TEMPLATES":    `{"base":"host","fs":"dir:/srv/rootfs","py":"python:3.12"}`,
		"DEFAULT_SANDBOX_TYPE": "base,browser", "RUNTIME_SANDBOX_REGISTRY": "mirror.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := typeTemplates(cfg)
	want := map[string]string{"base": "host", "fs": "fs", "py": "python:3.12",
		"browser": "mirror.example/agentscope/runtime-sandbox-browser:latest"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("type %s: %q, want %q", k, got[k], v)
		}
	}
}

// fakePuller stores a template once pulled; pulls block on gate.
type fakePuller struct {
	mu     sync.Mutex
	have   map[string]bool
	pulls  atomic.Int32
	gate   chan struct{}
	failed bool
}

func (f *fakePuller) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.have[ref] {
		return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "unknown template %q", ref)
	}
	return sandbox.Template{Ref: ref, Kind: sandbox.TemplateImage, Digest: "sha256:1"}, nil
}

func (f *fakePuller) Pull(ctx context.Context, ref, name string, opts template.PullOptions, progress func(template.Progress)) (template.Info, error) {
	f.pulls.Add(1)
	<-f.gate
	if f.failed {
		return template.Info{}, sandbox.Errorf(sandbox.ClassNotFound, "manifest unknown")
	}
	f.mu.Lock()
	f.have[ref] = true
	f.mu.Unlock()
	return template.Info{Name: ref}, nil
}

// Concurrent creates naming one missing image wait for a single pull,
// then all resolve it; plain names and disabled auto-pull never pull.
func TestAutoPull(t *testing.T) {
	fp := &fakePuller{have: map[string]bool{}, gate: make(chan struct{})}
	a := newAutoPull(fp, true, httpapi.NewTemplateGate(1), slog.Default())
	const n = 8
	errs := make(chan error, n)
	var started sync.WaitGroup
	for range n {
		started.Add(1)
		go func() {
			started.Done()
			tpl, err := a.Resolve(context.Background(), "registry.example/app:1")
			if err == nil && tpl.Digest != "sha256:1" {
				err = errors.New("wrong template")
			}
			errs <- err
		}()
	}
	started.Wait()
	close(fp.gate)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if p := fp.pulls.Load(); p < 1 || p > n {
		t.Fatalf("%d pulls", p)
	}
	before := fp.pulls.Load()
	if _, err := a.Resolve(context.Background(), "registry.example/app:1"); err != nil || fp.pulls.Load() != before {
		t.Fatalf("a stored template was pulled again: %v", err)
	}
	// A plain name is a template or type name: never pulled.
	if _, err := a.Resolve(context.Background(), "bsae"); !sandbox.IsNotFound(err) || fp.pulls.Load() != before {
		t.Fatalf("plain name: %v, %d pulls", err, fp.pulls.Load())
	}
	// A failed pull is the create's error.
	fp.failed = true
	if _, err := a.Resolve(context.Background(), "registry.example/missing:1"); !sandbox.IsNotFound(err) {
		t.Fatalf("failed pull: %v", err)
	}
	// Disabled: not found, no pull.
	off := newAutoPull(fp, false, httpapi.NewTemplateGate(1), slog.Default())
	before = fp.pulls.Load()
	if _, err := off.Resolve(context.Background(), "registry.example/other:1"); !sandbox.IsNotFound(err) || fp.pulls.Load() != before {
		t.Fatalf("auto-pull off: %v", err)
	}
	// A waiter that gives up gets its context's error.
	fp.gate = make(chan struct{})
	fp.failed = false
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Resolve(ctx, "registry.example/slow:1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	close(fp.gate)
}

// A type resolves to its mapped template (pulled on first use when
// allowed); any other name goes to the store as it is.
func TestTypeResolver(t *testing.T) {
	fp := &fakePuller{have: map[string]bool{"py:1": true}, gate: make(chan struct{})}
	close(fp.gate)
	r := typeResolver{types: map[string]string{"base": "py:1", "browser": "agentscope/runtime-sandbox-browser:latest"},
		next: newAutoPull(fp, true, httpapi.NewTemplateGate(1), slog.Default())}
	for ref, want := range map[string]string{"base": "py:1", "py:1": "py:1", "browser": "agentscope/runtime-sandbox-browser:latest"} {
		tpl, err := r.Resolve(context.Background(), ref)
		if err != nil || tpl.Ref != want {
			t.Errorf("%s: %+v %v", ref, tpl, err)
		}
	}
	if _, err := r.Resolve(context.Background(), "gui"); !sandbox.IsNotFound(err) {
		t.Errorf("unknown type: %v", err)
	}

	// A type whose default is the host template starts from a stored
	// template of its own name once there is one.
	fp.have["host"] = true
	r.types = map[string]string{"base": "host", "filesystem": "host"}
	if tpl, err := r.Resolve(context.Background(), "base"); err != nil || tpl.Ref != "host" {
		t.Errorf("base before a base template exists: %+v %v", tpl, err)
	}
	fp.have["base"] = true
	if tpl, err := r.Resolve(context.Background(), "base"); err != nil || tpl.Ref != "base" {
		t.Errorf("base once built: %+v %v", tpl, err)
	}
	if tpl, err := r.Resolve(context.Background(), "filesystem"); err != nil || tpl.Ref != "host" {
		t.Errorf("filesystem: %+v %v", tpl, err)
	}
}
