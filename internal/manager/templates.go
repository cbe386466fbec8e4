package manager

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// TemplateResolver turns the template name of a request into the resolved
// template backends receive. The template store implements it.
type TemplateResolver interface {
	// Resolve returns the template named ref ("name", "name:tag"). An
	// unknown name is sandbox.ClassNotFound.
	Resolve(ctx context.Context, ref string) (sandbox.Template, error)
}

// TemplateCommitter stores a new template made of base's layers plus the
// layer tar read from diff (snapshots), and says what users' private
// templates hold. The template store implements it.
type TemplateCommitter interface {
	CommitWith(ctx context.Context, name string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string, opts template.CommitOptions) (template.Info, error)
	// PrivateUsage returns what owner's private templates hold.
	PrivateUsage(owner string) template.Usage
	// CheckFree refuses (sandbox.ClassNoSpace) when the store's
	// filesystem has reserve bytes free or less.
	CheckFree(reserve int64) error
}

// builtinResolver serves "host" and the operator's SANDBOX_TEMPLATES map
// (sandbox type -> "host" or "dir:/path"): what a manager without a
// template store knows.
type builtinResolver struct{ templates map[string]string }

func (r builtinResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	if target, ok := r.templates[ref]; ok {
		return ConfiguredTemplate(ref, target)
	}
	if ref == sandbox.TemplateHost {
		return sandbox.HostTemplate(), nil
	}
	return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "unknown template %q", ref)
}

// ConfiguredTemplate resolves an operator's template setting: "host", or
// "dir:/path" (a root filesystem directory, named name). The backend
// validates the directory.
func ConfiguredTemplate(name, target string) (sandbox.Template, error) {
	switch {
	case target == sandbox.TemplateHost:
		return sandbox.HostTemplate(), nil
	case strings.HasPrefix(target, "dir:"):
		return sandbox.Template{Ref: name, Kind: sandbox.TemplateDir, Dir: strings.TrimPrefix(target, "dir:")}, nil
	}
	return sandbox.Template{}, fmt.Errorf("template %q: unknown template %q (want \"host\" or \"dir:/path\")", name, target)
}

// isTemplateAdmin reports whether owner may change shared templates.
func (m *Manager) isTemplateAdmin(owner string) bool {
	return slices.Contains(m.cfg.TemplateAdmins, owner)
}

// templateVisible reports whether owner may create sandboxes from the
// template named ref: shared ones, and private ones of its own.
func (m *Manager) templateVisible(ref, owner string) bool {
	return template.VisibleTo(ref, owner) || m.isTemplateAdmin(owner)
}
