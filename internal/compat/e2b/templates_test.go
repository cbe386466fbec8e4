package e2b

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/autobuild"
)

// storedTemplates is a template store holding the given templates.
type storedTemplates []template.Info

func (s storedTemplates) List(context.Context) ([]template.Info, error) {
	return append([]template.Info(nil), s...), nil
}

func (s storedTemplates) Get(_ context.Context, ref string) (template.Info, error) {
	for _, info := range s {
		if refOf(info) == ref {
			return info, nil
		}
	}
	return template.Info{}, sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", ref)
}

// TestTemplatesListBuildingBuiltins: GET /templates lists the built-in
// templates the daemon is still building (E2B's "building"), queued
// ("waiting") or failed to build ("error") under their E2B names, next to
// the stored ones ("ready"); one not built and not being built is not
// listed, nor is a built-in twice once the store holds it. The alias
// lookup finds a building one too.
func TestTemplatesListBuildingBuiltins(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	states := []autobuild.Status{
		{Name: "base", State: autobuild.StateReady},
		{Name: "code-interpreter", State: autobuild.StateBuilding, Since: since, Progress: "step 3/7: RUN pip install"},
		{Name: "browser", State: autobuild.StateBuilding, Since: since, Progress: "queued after code-interpreter"},
		{Name: "desktop", State: autobuild.StateFailed, Since: since, Error: "apt-get failed"},
		{Name: "gui", State: autobuild.StateNotBuilt, Command: "agentbox template build gui"},
	}
	hs := newTestServerWith(t, Config{
		Templates: storedTemplates{{Name: "base", Tag: "latest", Kind: "layers", Digest: "sha256:abc", Created: since}},
		Builtins:  func() []autobuild.Status { return states },
	})
	r := call(t, hs, "GET", "/templates", "", "X-API-Key", keyAlice)
	if r.status != http.StatusOK {
		t.Fatalf("GET /templates: %d %s", r.status, r.body)
	}
	var list []templateOut
	r.json(t, &list)
	got := map[string]templateOut{}
	for _, tpl := range list {
		if _, dup := got[tpl.TemplateID]; dup {
			t.Errorf("template %s listed twice: %s", tpl.TemplateID, r.body)
		}
		got[tpl.TemplateID] = tpl
	}
	want := map[string]string{"base": "ready", "code-interpreter-v1": "building", "browser": "waiting", "desktop": "error"}
	if len(got) != len(want) {
		t.Errorf("listed %d templates, want %d (%v): %s", len(got), len(want), want, r.body)
	}
	for id, status := range want {
		tpl, ok := got[id]
		if !ok {
			t.Errorf("template %s not listed: %s", id, r.body)
			continue
		}
		if tpl.BuildStatus != status {
			t.Errorf("template %s: buildStatus %q, want %q", id, tpl.BuildStatus, status)
		}
		if tpl.BuildID == "" || len(tpl.Aliases) == 0 || tpl.EnvdVersion == "" || tpl.CPUCount < 1 {
			t.Errorf("template %s lacks E2B's required fields: %+v", id, tpl)
		}
	}
	if ci := got["code-interpreter-v1"]; len(ci.Aliases) < 2 || ci.Aliases[0] != "code-interpreter" || ci.CreatedAt.Sub(since).Abs() > time.Second {
		t.Errorf("building code-interpreter: aliases %v created %v, want its names and the build's start %v", ci.Aliases, ci.CreatedAt, since)
	}

	// Another tenant sees the built-in names too: they are public.
	var bobs []templateOut
	call(t, hs, "GET", "/templates", "", "X-API-Key", keyBob).json(t, &bobs)
	if len(bobs) != len(want) {
		t.Errorf("bob sees %d templates, want %d", len(bobs), len(want))
	}

	r = call(t, hs, "GET", "/templates/aliases/code-interpreter", "", "X-API-Key", keyAlice)
	if r.status != http.StatusOK {
		t.Errorf("alias of a building built-in: %d %s, want 200", r.status, r.body)
	}
	wantError(t, "alias of a built-in neither built nor building", call(t, hs, "GET", "/templates/aliases/gui", "", "X-API-Key", keyAlice), http.StatusNotFound)

	// Once the store holds it, the built-in is listed once, ready.
	states[1].State = autobuild.StateReady
	hs2 := newTestServerWith(t, Config{
		Templates: storedTemplates{{Name: "code-interpreter", Tag: "latest", Kind: "layers", Digest: "sha256:def", Created: since}},
		Builtins:  func() []autobuild.Status { return states },
	})
	var after []templateOut
	call(t, hs2, "GET", "/templates", "", "X-API-Key", keyAlice).json(t, &after)
	n := 0
	for _, tpl := range after {
		if tpl.TemplateID == "code-interpreter-v1" {
			n++
			if tpl.BuildStatus != "ready" || tpl.BuildID != "sha256:def" {
				t.Errorf("built code-interpreter: %+v, want the stored build, ready", tpl)
			}
		}
	}
	if n != 1 {
		t.Errorf("code-interpreter listed %d times once built, want 1", n)
	}
}
