package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/admission"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/autobuild"
)

// storeOnly resolves host and nothing else (a fresh store).
type storeOnly struct{}

func (storeOnly) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	if ref == sandbox.TemplateHost {
		return sandbox.HostTemplate(), nil
	}
	return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "unknown template %q", ref)
}

// On a fresh store with the default sandbox types, names resolve to what
// their built-in template's state says: base (a type on host) starts from
// host while its template builds; code-interpreter, still building, is 503
// with Retry-After; gui, whose desktop template is not built, is 404 with
// the command that builds it; other names stay unknown.
func TestBuiltinResolver(t *testing.T) {
	cfg, err := config.Load("", nil, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	block := func(ctx context.Context, _ func(string)) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("stopped")
	}
	var targets []autobuild.Target
	for _, n := range config.BuiltinTemplates {
		targets = append(targets, autobuild.Target{Name: n, Command: "make templates", Build: block})
	}
	states := autobuild.New(autobuild.Config{Dir: t.TempDir(), Targets: targets, Exists: func(context.Context, string) bool { return false },
		Enabled: map[string]bool{"base": true, "code-interpreter": true}})
	ctx, cancel := context.WithCancel(context.Background())
	states.Start(ctx)
	defer func() { cancel(); states.Wait() }()

	r := &builtinResolver{types: typeTemplates(cfg), states: states}
	r.next = typeResolver{types: r.types, next: storeOnly{}}

	if tm, err := r.Resolve(ctx, "base"); err != nil || tm.Kind != sandbox.TemplateHost {
		t.Errorf("base while building: %+v %v, want host", tm, err)
	}
	_, err = r.Resolve(ctx, "code-interpreter")
	var nr *sandbox.TemplateNotReady
	var ra *admission.RetryAfterError
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable || !errors.As(err, &nr) || nr.Reason != sandbox.ReasonTemplateBuilding || !errors.As(err, &ra) {
		t.Errorf("code-interpreter while building: %v", err)
	}
	_, err = r.Resolve(ctx, "gui")
	if sandbox.ClassOf(err) != sandbox.ClassNotFound || !errors.As(err, &nr) || nr.Reason != sandbox.ReasonTemplateNotBuilt ||
		!strings.Contains(err.Error(), `"gui" uses template "desktop"`) || !strings.Contains(err.Error(), "make templates") {
		t.Errorf("gui, desktop not built: %v", err)
	}
	if _, err := r.Resolve(ctx, "nope"); !sandbox.IsNotFound(err) || errors.As(err, &nr) {
		t.Errorf("unknown name: %v", err)
	}
	for name, want := range map[string]string{"base": "", "filesystem": "", "gui": "not built", "browser": "not built"} {
		if got := r.note(name); got != want {
			t.Errorf("note(%s) = %q, want %q", name, got, want)
		}
	}
	if got := r.note("code-interpreter"); !strings.HasPrefix(got, "building ") {
		t.Errorf("note(code-interpreter) = %q", got)
	}
}
