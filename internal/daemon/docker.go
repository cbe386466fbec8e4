package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/multi"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// withDocker puts the Docker backend beside nb when the configuration asks
// for it (DOCKER_BACKEND, CONTAINER_DEPLOYMENT=docker): docker: templates
// run on it, everything else stays on native.
//
// store is the template store once it is open (nil before): an image the
// engine lacks is loaded from the store's template of that name when there
// is one.
func withDocker(ctx context.Context, cfg *config.Config, dataDir, agent string, nb backend.Backend, store func() *template.Store, log *slog.Logger) (backend.Backend, error) {
	if !cfg.DockerEnabled {
		if entries, _ := os.ReadDir(filepath.Join(dataDir, "docker", "sb")); len(entries) > 0 {
			// Their records are dropped by this run; the next one with the
			// Docker backend removes the containers as orphans.
			log.Warn("Docker sandboxes of an earlier run are left on the engine: start once with DOCKER_BACKEND=true to remove them",
				"count", len(entries))
		}
		return nb, nil
	}
	load := func(ctx context.Context, image string, w io.Writer) error {
		st := store()
		// Only shared templates: a user's private snapshot (or the
		// builder's cache) must not become an engine image anyone can run.
		if st == nil || !template.VisibleTo(image, "") {
			return sandbox.Errorf(sandbox.ClassNotFound, "no template %q", image)
		}
		return st.Export(ctx, image, "docker", w)
	}
	db, err := docker.New(ctx, docker.Config{Root: filepath.Join(dataDir, "docker"), AgentPath: agent, Host: string(cfg.DockerHost),
		Defaults: cfg.Resources, Pull: cfg.TemplateAutoPull, Load: load, GVisorRuntime: string(cfg.DockerGVisorRuntime), Logger: log})
	if err != nil {
		return nil, fmt.Errorf("Docker backend (DOCKER_BACKEND, CONTAINER_DEPLOYMENT=docker): %w", err)
	}
	log.Info("Docker backend enabled", "userns_remap", db.UsernsRemap(), "instance", db.Instance())
	return multi.New(nb, db), nil
}

// dockerResolver resolves "docker:IMAGE" to a template the Docker backend
// runs (any image the engine has, or pulls with TEMPLATE_AUTO_PULL); other
// names go to next, and so do all names without the Docker backend.
type dockerResolver struct {
	enabled bool
	next    resolver
}

func (r dockerResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	image, ok := strings.CutPrefix(ref, docker.ImagePrefix)
	if !ok || !r.enabled {
		// Without the Docker backend "docker:TAG" is what it always was: a
		// tag of a stored template named docker.
		return r.next.Resolve(ctx, ref)
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return sandbox.Template{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q: not a Docker image reference: %v", ref, err)
	}
	return sandbox.Template{Ref: ref, Kind: sandbox.TemplateDocker}, nil
}

// dockerTypeTemplate is the template of a sandbox type under
// CONTAINER_DEPLOYMENT=docker: agentscope's image of the type on the
// engine, unless the operator mapped the type to something native can
// run that is not the host default (a dir: or a stored template).
func dockerTypeTemplate(cfg *config.Config, typ, target string) string {
	if cfg.Deployment != "docker" || strings.HasPrefix(target, docker.ImagePrefix) {
		return target
	}
	if target == "" || target == sandbox.TemplateHost || target == cfg.RuntimeImage(typ) {
		return docker.ImagePrefix + cfg.RuntimeImage(typ)
	}
	return target
}
