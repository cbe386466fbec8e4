package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// templateDir is where the template store lives with the build step cache
// and the bootstrap cache: TEMPLATE_DIR, by default <data dir>/templates.
// They go together: the step cache names templates of the store, and a
// directory kept across data dirs (a CI cache, a test cache) keeps
// everything an unchanged rebuild needs.
func templateDir(cfg *config.Config, dataDir string) string {
	if cfg.TemplateDir != "" {
		return string(cfg.TemplateDir)
	}
	return filepath.Join(dataDir, "templates")
}

// openTemplateStore opens the template store at dir and registers the
// operator's SANDBOX_TEMPLATES directories, each as a template named
// after its type. inUse counts the live sandboxes of a template digest.
func openTemplateStore(ctx context.Context, cfg *config.Config, dir string, inUse func(string) int, log *slog.Logger) (*template.Store, error) {
	st, err := template.Open(ctx, dir, template.Options{
		Logger: log, InUse: inUse,
		Auth:    template.RegistryAuth{Inline: string(cfg.RegistryAuth)},
		Mirrors: cfg.RegistryMirrors,
	})
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	for _, typ := range sortedKeys(cfg.Templates) {
		if dir, ok := strings.CutPrefix(cfg.Templates[typ], "dir:"); ok {
			if err := st.RegisterDir(typ, dir); err != nil {
				st.Close()
				return nil, fmt.Errorf("setting SANDBOX_TEMPLATES: template %q: %w", typ, err)
			}
		}
	}
	return st, nil
}

// typeTemplates maps every configured sandbox type (SANDBOX_TEMPLATES and
// DEFAULT_SANDBOX_TYPE) to the template name the manager resolves: a dir
// entry to the template registered under the type's name, a type without
// an entry to agentscope's image name for it.
func typeTemplates(cfg *config.Config) map[string]string {
	out := make(map[string]string, len(cfg.Templates)+len(cfg.DefaultTypes))
	for typ, t := range cfg.Templates {
		if strings.HasPrefix(t, "dir:") {
			t = typ
		}
		out[typ] = kubeTypeTemplate(cfg, typ, dockerTypeTemplate(cfg, typ, t))
	}
	for _, typ := range cfg.DefaultTypes {
		if _, ok := out[typ]; !ok {
			out[typ] = kubeTypeTemplate(cfg, typ, dockerTypeTemplate(cfg, typ, cfg.TypeTemplate(typ)))
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// typeResolver maps sandbox type names to their templates (typeTemplates)
// before resolving through next; other names go to next as they are.
type typeResolver struct {
	types map[string]string
	next  resolver
}

func (r typeResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	target, ok := r.types[ref]
	if !ok {
		return r.next.Resolve(ctx, ref)
	}
	if target == sandbox.TemplateHost && ref != sandbox.TemplateHost {
		// "host" is the zero-set-up default of a type (base, filesystem):
		// once the operator built or pulled a template of the type's own
		// name (make templates builds "base"), the type starts from it.
		if t, err := r.next.Resolve(ctx, ref); err == nil || !sandbox.IsNotFound(err) {
			return t, err
		}
	}
	return r.next.Resolve(ctx, target)
}

// resolver is what the manager resolves template names with.
type resolver interface {
	Resolve(ctx context.Context, ref string) (sandbox.Template, error)
}

// puller is the part of the store auto-pull needs.
type puller interface {
	resolver
	Pull(ctx context.Context, ref, name string, opts template.PullOptions, progress func(template.Progress)) (template.Info, error)
}

// autoPull resolves through the store and, when TEMPLATE_AUTO_PULL is on,
// pulls an image reference that is not a template yet, then resolves it:
// the create waits. Pulls share the API's bound on template operations,
// and concurrent creates naming the same image wait for one pull.
type autoPull struct {
	store   puller
	enabled bool
	acquire func(context.Context) (func(), error)
	log     *slog.Logger

	mu       sync.Mutex
	inflight map[string]*pullCall
}

type pullCall struct {
	done chan struct{}
	err  error
}

func newAutoPull(st puller, enabled bool, acquire func(context.Context) (func(), error), log *slog.Logger) *autoPull {
	return &autoPull{store: st, enabled: enabled, acquire: acquire, log: log, inflight: map[string]*pullCall{}}
}

// Resolve returns the template ref names, pulling it first if allowed.
func (a *autoPull) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	t, err := a.store.Resolve(ctx, ref)
	if err == nil || !a.enabled || !sandbox.IsNotFound(err) || !looksLikeImage(ref) {
		return t, err
	}
	if err := a.pull(ctx, ref); err != nil {
		return sandbox.Template{}, err
	}
	return a.store.Resolve(ctx, ref)
}

// pull pulls ref once however many callers ask at the same time.
func (a *autoPull) pull(ctx context.Context, ref string) error {
	a.mu.Lock()
	c, ok := a.inflight[ref]
	if !ok {
		c = &pullCall{done: make(chan struct{})}
		a.inflight[ref] = c
		// The pull outlives any one waiter: it is shared.
		go a.run(context.WithoutCancel(ctx), ref, c)
	}
	a.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *autoPull) run(ctx context.Context, ref string, c *pullCall) {
	defer func() {
		a.mu.Lock()
		delete(a.inflight, ref)
		a.mu.Unlock()
		close(c.done)
	}()
	release, err := a.acquire(ctx)
	if err != nil {
		c.err = err
		return
	}
	defer release()
	a.log.Info("pulling a template on first use (TEMPLATE_AUTO_PULL)", "image", ref)
	info, err := a.store.Pull(ctx, ref, "", template.PullOptions{}, func(template.Progress) {})
	if err != nil {
		c.err = fmt.Errorf("pull %s (TEMPLATE_AUTO_PULL): %w", ref, err)
		a.log.Warn("automatic template pull failed", "image", ref, "err", err)
		return
	}
	a.log.Info("template pulled", "image", ref, "digest", info.Digest)
}

// looksLikeImage reports whether ref may be an image reference: a plain
// name ("base") is a template or type name, never pulled on its own; an
// image has a registry or namespace ("/"), a tag (":") or a digest ("@").
func looksLikeImage(ref string) bool {
	return strings.ContainsAny(ref, "/:@") && !strings.HasPrefix(ref, "dir:")
}
