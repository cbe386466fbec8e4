package codeinterp

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Config configures a Registry; zero values take the defaults below.
type Config struct {
	Host   Host
	Logger *slog.Logger
	// DefaultTimeout bounds an execution that names no timeout (300s).
	DefaultTimeout time.Duration
	// Grace is how long an interrupted execution may take to stop before
	// the interpreter is killed and restarted (2s).
	Grace time.Duration
	// MaxOutputBytes caps stdout and stderr, each, per execution (1 MiB).
	MaxOutputBytes int64
	// MaxResultBytes caps the results of one execution (16 MiB).
	MaxResultBytes int64
	// StartTimeout bounds an interpreter's start (60s: IPython is slow
	// to import on a cold cache).
	StartTimeout time.Duration
	// MaxContexts caps the contexts of one sandbox (64).
	MaxContexts int
}

// Registry holds a sandbox's code contexts, including one default
// context per language (the one executions without a context id use).
type Registry struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	byID     map[string]*Context
	defaults map[string]*Context // by language
	created  int
}

// NewRegistry returns an empty registry. Contexts start their
// interpreters lazily; nothing runs until the first execution.
func NewRegistry(cfg Config) *Registry {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 300 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 2 * time.Second
	}
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = 1 << 20
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 16 << 20
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.MaxContexts <= 0 {
		cfg.MaxContexts = 64
	}
	return &Registry{cfg: cfg, log: cfg.Logger.With("component", "code"),
		byID: map[string]*Context{}, defaults: map[string]*Context{}}
}

// CreateRequest asks for a new context.
type CreateRequest struct {
	Language string // empty: python
	Cwd      string // empty: the default working directory
	User     string // empty: the agent's user
}

// Create makes a context and starts its interpreter, so that a missing
// interpreter, a bad directory or a failing start are reported here.
func (r *Registry) Create(ctx context.Context, req CreateRequest) (Info, error) {
	lang, err := normalizeLanguage(req.Language)
	if err != nil {
		return Info{}, err
	}
	// The default python context is registered first, so it leads lists.
	_, _ = r.Default(DefaultLanguage)
	c, err := r.newContext(lang, req.User, req.Cwd, false)
	if err != nil {
		return Info{}, err
	}
	if err := c.acquire(ctx); err != nil {
		r.remove(c)
		return Info{}, err
	}
	defer c.release()
	if err := c.startLocked(ctx); err != nil {
		r.remove(c)
		return Info{}, err
	}
	r.log.Info("code context created", "id", c.info.ID, "language", lang.name, "cwd", c.info.Cwd)
	return c.info, nil
}

// newContext registers a context without starting its interpreter.
func (r *Registry) newContext(lang *language, user, cwd string, isDefault bool) (*Context, error) {
	h := r.cfg.Host
	name, dir, err := h.Resolve(user, cwd)
	if err != nil {
		return nil, err
	}
	env, err := h.Env(name)
	if err != nil {
		return nil, err
	}
	if _, err := lang.find(h, env); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if isDefault {
		if c := r.defaults[lang.name]; c != nil {
			return c, nil // created meanwhile
		}
	}
	if len(r.byID) >= r.cfg.MaxContexts {
		return nil, errorf(KindLimit, "this sandbox already has %d code contexts; delete some first", len(r.byID))
	}
	r.created++
	info := Info{ID: newID(), Language: lang.name, Cwd: dir, Default: isDefault, Created: time.Now().UTC().Format(time.RFC3339Nano)}
	c := &Context{info: info, user: name, lang: lang, reg: r,
		order: r.created, turn: make(chan struct{}, 1)}
	r.byID[c.info.ID] = c
	if isDefault {
		r.defaults[lang.name] = c
	}
	return c, nil
}

func (r *Registry) remove(c *Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[c.info.ID] == c {
		delete(r.byID, c.info.ID)
	}
	if r.defaults[c.info.Language] == c {
		delete(r.defaults, c.info.Language)
	}
}

// Get returns the context with id.
func (r *Registry) Get(id string) (*Context, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.byID[id]; c != nil {
		return c, nil
	}
	return nil, errorf(KindNotFound, "context %s not found", id)
}

// Default returns the default context of language (empty: python),
// registering it on first use; its interpreter starts with the first
// execution. It runs as the agent's user in the default directory.
func (r *Registry) Default(language string) (*Context, error) {
	lang, err := normalizeLanguage(language)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	c := r.defaults[lang.name]
	r.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return r.newContext(lang, "", "", true)
}

// Resolve picks the context of an execution: contextID, else the default
// context of language. Naming both is an error.
func (r *Registry) Resolve(contextID, language string) (*Context, error) {
	switch {
	case contextID != "" && language != "":
		return nil, errorf(KindInvalid, "only one of context_id or language can be provided")
	case contextID != "":
		return r.Get(contextID)
	default:
		return r.Default(language)
	}
}

// List describes every context in creation order. The default python
// context is always listed when python3 is installed.
func (r *Registry) List() []Info {
	if _, err := r.Default(DefaultLanguage); err != nil {
		r.log.Debug("no default python context", "err", err)
	}
	r.mu.Lock()
	cs := make([]*Context, 0, len(r.byID))
	for _, c := range r.byID {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].order < cs[j].order })
	out := make([]Info, len(cs))
	for i, c := range cs {
		out[i] = c.info
	}
	return out
}

// Restart replaces the interpreter of context id (see Context.Restart).
func (r *Registry) Restart(ctx context.Context, id string) error {
	c, err := r.Get(id)
	if err != nil {
		return err
	}
	if err := c.Restart(ctx); err != nil {
		return fmt.Errorf("restart context %s: %w", id, err)
	}
	r.log.Info("code context restarted", "id", id)
	return nil
}

// Delete removes context id and kills its interpreter; a running
// execution ends with an error. Deleting a default context is allowed:
// the language gets a new default on next use.
func (r *Registry) Delete(id string) error {
	c, err := r.Get(id)
	if err != nil {
		return err
	}
	r.remove(c)
	c.close(killDeleted)
	r.log.Info("code context deleted", "id", id)
	return nil
}

// Close kills every interpreter (agent shutdown).
func (r *Registry) Close() {
	r.mu.Lock()
	cs := make([]*Context, 0, len(r.byID))
	for _, c := range r.byID {
		cs = append(cs, c)
	}
	r.byID, r.defaults = map[string]*Context{}, map[string]*Context{}
	r.mu.Unlock()
	for _, c := range cs {
		c.close(killClose)
	}
}

// newID returns a random UUID (version 4), the shape of E2B's context ids.
func newID() string {
	h := randomHex(16)
	b := []byte(h)
	b[12] = '4'
	b[16] = "89ab"[int(b[16])%4]
	return fmt.Sprintf("%s-%s-%s-%s-%s", b[0:8], b[8:12], b[12:16], b[16:20], b[20:32])
}
