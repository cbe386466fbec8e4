package daemon

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/autobuild"
	"github.com/agentbox/agentbox/internal/template/bootstrap"
	"github.com/agentbox/agentbox/internal/template/builder"
	"github.com/agentbox/agentbox/templates"
)

// baseImage is what the built-in templates build FROM, bootstrapped from
// the host's apt as `make templates` does.
const baseImage = "debian:bookworm"

// hostAptSources is the host's deb822 Debian sources, handed to RUN steps
// as the apt-sources secret when it exists (templates/README.md).
const hostAptSources = "/etc/apt/sources.list.d/debian.sources"

// builtinTargets are the built-in templates in build order, each built
// from its embedded context (templates/) as `make templates` builds it.
// First-build estimates are this repository's measurements on 2 cores
// (docs/benchmarks.md).
func builtinTargets(tmplDir string, st *template.Store, bld *builder.Builder, log *slog.Logger) []autobuild.Target {
	const secret = "--secret id=apt-sources,src=" + hostAptSources
	mk := func(name string, deps []string, est time.Duration, stage func(ctx context.Context, dir string, progress func(string)) error) autobuild.Target {
		cmd := "agentbox template build -t " + name + " " + secret + " templates/" + name + " (or make templates)"
		if len(deps) == 0 {
			cmd = "agentbox template bootstrap " + baseImage + " && " + cmd
		}
		return autobuild.Target{Name: name, Deps: deps, Command: cmd, Estimate: est,
			Build: func(ctx context.Context, progress func(string)) error {
				if len(deps) == 0 {
					if err := ensureBaseImage(ctx, tmplDir, st, progress, log); err != nil {
						return err
					}
				}
				return buildEmbedded(ctx, tmplDir, name, bld, stage, progress)
			}}
	}
	return []autobuild.Target{
		mk("base", nil, 3*time.Minute, nil),
		mk("code-interpreter", []string{"base"}, 30*time.Second, nil),
		mk("browser", []string{"base"}, 2*time.Minute, stageBrowser),
		mk("desktop", []string{"browser"}, 3*time.Minute, nil),
	}
}

// ensureBaseImage bootstraps debian:bookworm into the store unless it is
// there (the bootstrap cache in the template directory makes a second
// bootstrap instant).
func ensureBaseImage(ctx context.Context, tmplDir string, st *template.Store, progress func(string), log *slog.Logger) error {
	if _, err := st.Get(ctx, baseImage); err == nil {
		return nil
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return fmt.Errorf("bootstrapping %s needs mmdebstrap (apt-get install mmdebstrap)", baseImage)
	}
	progress("bootstrapping " + baseImage + " from the host's apt")
	var out lastLine
	tarball, err := bootstrap.Bootstrap(ctx, bootstrap.Options{Image: baseImage, CacheDir: filepath.Join(tmplDir, "bootstrap"), Logger: log}, &out)
	if err != nil {
		return fmt.Errorf("bootstrap %s: %w (last output: %s)", baseImage, err, out.String())
	}
	progress("importing " + baseImage)
	if _, err := st.Import(ctx, tarball, baseImage, func(template.Progress) {}); err != nil {
		return fmt.Errorf("import %s: %w", baseImage, err)
	}
	return nil
}

// buildEmbedded writes name's embedded context under the template
// directory and builds it as `agentbox template build -t name` would.
func buildEmbedded(ctx context.Context, tmplDir, name string, bld *builder.Builder, stage func(context.Context, string, func(string)) error, progress func(string)) error {
	dir := filepath.Join(tmplDir, "contexts", name)
	if err := writeContext(name, dir); err != nil {
		return err
	}
	if stage != nil {
		if err := stage(ctx, dir, progress); err != nil {
			return err
		}
	}
	df, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	if err != nil {
		return err
	}
	secrets := map[string][]byte{}
	if b, err := os.ReadFile(hostAptSources); err == nil {
		secrets["apt-sources"] = b
	}
	_, err = bld.Build(ctx, builder.Options{Dockerfile: df, ContextDir: dir, Tags: []string{name}, Secrets: secrets,
		Events: func(e builder.Event) {
			if e.Type == builder.EventStep {
				progress(fmt.Sprintf("step %d/%d: %s", e.Step, e.Steps, truncate(e.Instruction, 80)))
			}
		}})
	return err
}

// writeContext replaces dir with the embedded context of name (files
// 0644: the Dockerfiles chmod what they need).
func writeContext(name, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return fs.WalkDir(templates.FS, name, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, name), "/")
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := templates.FS.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// stageBrowser installs the browser context's pinned npm packages with
// the host's npm, as scripts/stage-browser.sh does: the build itself needs
// no registry access.
func stageBrowser(ctx context.Context, dir string, progress func(string)) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("the browser template's Playwright MCP server is installed with the host's npm, which is not on PATH (apt-get install npm)")
	}
	progress("npm ci (browser-mcp)")
	cmd := exec.CommandContext(ctx, npm, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = filepath.Join(dir, "browser-mcp")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci in the browser context: %w: %s", err, truncate(string(out), 2000))
	}
	return nil
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// lastLine keeps the last line written to it (a bootstrap's output, for
// its error).
type lastLine struct {
	mu   sync.Mutex
	last string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := strings.TrimSpace(string(p)); s != "" {
		lines := strings.Split(s, "\n")
		l.last = lines[len(lines)-1]
	}
	return len(p), nil
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

var _ io.Writer = (*lastLine)(nil)

// newAutoBuild returns the runner that builds the built-in templates
// enabled names (TEMPLATE_AUTO_BUILD) once started, and reports every
// built-in template's state.
func newAutoBuild(enabled []string, tmplDir string, st *template.Store, bld *builder.Builder, log *slog.Logger) *autobuild.Runner {
	on := map[string]bool{}
	for _, n := range enabled {
		on[n] = true
	}
	r := autobuild.New(autobuild.Config{Dir: tmplDir, Targets: builtinTargets(tmplDir, st, bld, log), Enabled: on, Logger: log,
		Exists: func(ctx context.Context, name string) bool {
			_, err := st.Get(ctx, name)
			return err == nil
		}})
	return r
}

// builtinResolver answers a create of a built-in template that is not
// stored (directly, or through a sandbox type mapped to it) with its
// state: building (503, Retry-After), failed or not built (404), each
// with the command that builds it; other names resolve through next.
type builtinResolver struct {
	next   resolver
	types  map[string]string
	states *autobuild.Runner
}

func (r *builtinResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	t, err := r.next.Resolve(ctx, ref)
	if !sandbox.IsNotFound(err) || r.states == nil {
		return t, err
	}
	if s, ok := r.status(ref); ok && s.State != autobuild.StateReady {
		return sandbox.Template{}, autobuild.NotReadyError(s, ref, time.Now())
	}
	return t, err
}

// status is the state of the built-in template ref names (a type's
// template, NAME or NAME:latest).
func (r *builtinResolver) status(ref string) (autobuild.Status, bool) {
	name := ref
	if target, ok := r.types[ref]; ok && target != sandbox.TemplateHost {
		name = target
	}
	name = strings.TrimSuffix(name, ":latest")
	if path.Base(name) != name {
		return autobuild.Status{}, false
	}
	return r.states.Lookup(name)
}

// note is the manager's word on a template or type name in its list of
// valid names: "" when it can be created now.
func (r *builtinResolver) note(name string) string {
	if r.states == nil || r.types[name] == sandbox.TemplateHost {
		return "" // a type that starts from host until its template is built
	}
	s, ok := r.status(name)
	if !ok {
		return ""
	}
	return autobuild.Note(s, time.Now())
}
