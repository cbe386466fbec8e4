package manager

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// A create of a built-in template that is not ready keeps the resolver's
// own answer (state, reason), not "unknown template"; the list of valid
// names an unknown template gets says which names cannot be created yet
// (issue 29: "want one of host, base, browser, filesystem, gui" refused
// "gui", a name it listed).
func TestTemplateNotReadyAndNames(t *testing.T) {
	res := &mapResolver{m: map[string]sandbox.Template{"host": sandbox.HostTemplate()}}
	notReady := &sandbox.Error{Class: sandbox.ClassUnavailable, Msg: `template "desktop" is still being built`,
		Err: &sandbox.TemplateNotReady{Template: "desktop", Reason: sandbox.ReasonTemplateBuilding}}
	e := newEnv(t, Config{
		Templates: map[string]string{"base": "host", "filesystem": "host", "browser": "browser", "gui": "desktop"},
		Resolver: resolverFunc(func(ctx context.Context, ref string) (sandbox.Template, error) {
			if ref == "gui" {
				return sandbox.Template{}, notReady
			}
			return res.Resolve(ctx, ref)
		}),
		TemplateNote: func(name string) string {
			return map[string]string{"gui": "building 10s of about 3m0s", "browser": "not built"}[name]
		},
	})
	ctx := context.Background()
	_, err := e.m.Create(ctx, "alice", CreateRequest{Template: "gui"})
	var nr *sandbox.TemplateNotReady
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable || !errors.As(err, &nr) || nr.Reason != sandbox.ReasonTemplateBuilding {
		t.Fatalf("create gui while building: %v", err)
	}
	_, err = e.m.Create(ctx, "alice", CreateRequest{Template: "nope"})
	want := `unknown template "nope" (want one of host, base, filesystem; not ready yet: browser (not built), gui (building 10s of about 3m0s))`
	if sandbox.ClassOf(err) != sandbox.ClassInvalid || !strings.Contains(err.Error(), want) {
		t.Fatalf("unknown template: %v\nwant %s", err, want)
	}
}

type resolverFunc func(ctx context.Context, ref string) (sandbox.Template, error)

func (f resolverFunc) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	return f(ctx, ref)
}
