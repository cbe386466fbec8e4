package e2b

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/autobuild"
)

// TemplateLister lists the template store (the daemon's store implements
// it).
type TemplateLister interface {
	List(ctx context.Context) ([]template.Info, error)
	Get(ctx context.Context, ref string) (template.Info, error)
}

// templateOut is E2B's Template.
type templateOut struct {
	TemplateID    string    `json:"templateID"`
	BuildID       string    `json:"buildID"`
	CPUCount      int       `json:"cpuCount"`
	MemoryMB      int64     `json:"memoryMB"`
	DiskSizeMB    int64     `json:"diskSizeMB"`
	Public        bool      `json:"public"`
	Aliases       []string  `json:"aliases"`
	Names         []string  `json:"names"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	LastSpawnedAt *string   `json:"lastSpawnedAt"`
	SpawnCount    int       `json:"spawnCount"`
	BuildCount    int       `json:"buildCount"`
	EnvdVersion   string    `json:"envdVersion"`
	BuildStatus   string    `json:"buildStatus"`
}

// e2bAliases are the E2B names of agentbox templates, besides their own.
var e2bAliases = map[string][]string{"code-interpreter": {"code-interpreter-v1"}}

func (s *Server) registerTemplates(h func(string, handler)) {
	h("GET /templates", s.listTemplates)
	h("GET /templates/aliases/{alias}", s.templateAlias)
	h("POST /v3/templates", s.requestBuild)
	h("GET /templates/{templateID}/files/{hash}", s.fileUploadLink)
	h("POST /v2/templates/{templateID}/builds/{buildID}", s.startBuild)
	h("GET /templates/{templateID}/builds/{buildID}/status", s.buildStatus)
}

// visibleTemplates lists the templates user may create sandboxes from.
func (s *Server) visibleTemplates(ctx context.Context, user string) ([]template.Info, error) {
	if s.cfg.Templates == nil {
		return nil, nil
	}
	list, err := s.cfg.Templates.List(ctx)
	if err != nil {
		return nil, err
	}
	admin := slices.Contains(s.cfg.TemplateAdmins, user)
	out := list[:0]
	for _, info := range list {
		if admin || template.VisibleTo(refOf(info), user) {
			out = append(out, info)
		}
	}
	return out, nil
}

func refOf(info template.Info) string {
	if info.Tag == "" || info.Tag == "latest" {
		return info.Name
	}
	return info.Name + ":" + info.Tag
}

func (s *Server) templateJSON(info template.Info) templateOut {
	ref := refOf(info)
	names := append([]string{ref}, e2bAliases[ref]...)
	id := ref
	if len(e2bAliases[ref]) > 0 {
		id = e2bAliases[ref][0]
	}
	return templateOut{TemplateID: id, BuildID: info.Digest, CPUCount: int(max(1, info.Resources.CPUs)),
		MemoryMB: info.Resources.MemoryBytes >> 20, DiskSizeMB: info.Resources.DiskBytes >> 20,
		Aliases: names, Names: names, CreatedAt: info.Created, UpdatedAt: info.Created,
		EnvdVersion: EnvdVersion, BuildStatus: "ready", BuildCount: 1}
}

// listTemplates serves GET /templates: the store's templates the caller
// may use, under their E2B names.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, user string) error {
	list, err := s.visibleTemplates(r.Context(), user)
	if err != nil {
		return err
	}
	out := make([]templateOut, 0, len(list))
	for _, info := range list {
		out = append(out, s.templateJSON(info))
	}
	out = append(out, s.pendingBuiltins(list)...)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// pendingBuiltins are the built-in templates the store does not hold yet
// but the daemon is building (or queued to build) or failed to build, as
// E2B lists a template whose build is not done: buildStatus "building",
// "waiting" (queued behind another) or "error". A template that is not
// built and not being built is not listed: there is no build of it, and a
// create names the command that makes it. Built-in templates are public
// names, visible to every tenant.
func (s *Server) pendingBuiltins(stored []template.Info) []templateOut {
	if s.cfg.Builtins == nil {
		return nil
	}
	var out []templateOut
	for _, st := range s.cfg.Builtins() {
		if slices.ContainsFunc(stored, func(info template.Info) bool { return refOf(info) == st.Name }) {
			continue
		}
		var status string
		switch {
		case st.State == autobuild.StateBuilding && strings.HasPrefix(st.Progress, "queued"):
			status = "waiting"
		case st.State == autobuild.StateBuilding:
			status = "building"
		case st.State == autobuild.StateFailed:
			status = "error"
		default:
			continue
		}
		names := append([]string{st.Name}, e2bAliases[st.Name]...)
		id := st.Name
		if len(e2bAliases[st.Name]) > 0 {
			id = e2bAliases[st.Name][0]
		}
		// No build is stored yet: the build's ID names the built-in
		// template, its times are when the build started (or failed).
		out = append(out, templateOut{TemplateID: id, BuildID: "builtin-" + st.Name, CPUCount: 1,
			Aliases: names, Names: names, CreatedAt: st.Since.UTC(), UpdatedAt: st.Since.UTC(),
			EnvdVersion: EnvdVersion, BuildStatus: status})
	}
	return out
}

// templateAlias serves GET /templates/aliases/{alias}: 404 when no
// template the caller may use has that name.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request, user string) error {
	alias := r.PathValue("alias")
	list, err := s.visibleTemplates(r.Context(), user)
	if err != nil {
		return err
	}
	want := mapTemplate(alias)
	for _, info := range list {
		if refOf(info) == want || info.Name == want {
			writeJSON(w, http.StatusOK, map[string]any{"templateID": s.templateJSON(info).TemplateID, "public": false})
			return nil
		}
	}
	// A built-in template still building has its name already, as in
	// the list.
	for _, t := range s.pendingBuiltins(list) {
		if t.Names[0] == want {
			writeJSON(w, http.StatusOK, map[string]any{"templateID": t.TemplateID, "public": false})
			return nil
		}
	}
	return sandbox.Errorf(sandbox.ClassNotFound, "template alias %q not found", alias)
}
