package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// build is one running build.
type build struct {
	b       *Builder
	opts    Options
	df      *dockerfile
	rep     *reporter
	lex     *shell.Lex
	ctxSrc  *contextSource
	meta    kvList            // meta args with a value
	used    map[string]bool   // build args consumed
	proxies map[string]string // proxy build args given
	done    map[int]*stageState
	active  map[int]bool
	counted map[int]bool // stages in the step count
	step    int
	steps   int
	cached  int
	tmpDir  string
}

// stageState is a stage being built.
type stageState struct {
	idx   int
	name  string
	tmpl  sandbox.Template // the stage's layers so far
	cfg   sandbox.ImageConfig
	key   string // cache key of tmpl
	vars  stageVars
	shell []string
	// cmdSet: CMD was set in this stage (ENTRYPOINT then keeps it).
	cmdSet bool
}

var defaultShell = []string{"/bin/sh", "-c"}

// Build runs a build. Invalid input, a failing RUN command included, is
// sandbox.ClassInvalid ("invalid Dockerfile") with the Dockerfile's line;
// a step that failed for the server's reasons (a build sandbox over
// quota, the store, the backend) keeps its class, the line in its message.
func (b *Builder) Build(ctx context.Context, opts Options) (Result, error) {
	rep := &reporter{out: opts.Output, emit: opts.Events}
	res, err := b.build(ctx, opts, rep)
	if err != nil {
		ev := Event{Type: EventError, Message: err.Error()}
		var le *LineError
		if errors.As(err, &le) {
			ev.Line = le.Line
		}
		err = classify(err, le)
		rep.event(ev)
	}
	return res, err
}

// classify gives a failed build's error its class. A *sandbox.Error in
// the chain decides it (the server's failures are classed at their source,
// see serverFault); otherwise an error at a line is the Dockerfile's.
func classify(err error, le *LineError) error {
	var se *sandbox.Error
	if errors.As(err, &se) && se.Class != sandbox.ClassInvalid {
		if le == nil {
			return err
		}
		return &sandbox.Error{Class: se.Class, Msg: le.where() + ": " + se.Msg, Err: err}
	}
	if le != nil {
		return &sandbox.Error{Class: sandbox.ClassInvalid, Msg: "invalid Dockerfile", Err: err}
	}
	return err
}

// serverFault classes an error of the runner or the store: a failed
// command (*ExitError) and classed errors stay as they are; anything else
// is the server's (internal, or deadline_exceeded), not the Dockerfile's.
func serverFault(err error) error {
	var se *sandbox.Error
	var ee *ExitError
	switch {
	case errors.As(err, &se), errors.As(err, &ee):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return &sandbox.Error{Class: sandbox.ClassTimeout, Msg: "the build ran out of time", Err: err}
	}
	return &sandbox.Error{Class: sandbox.ClassInternal, Msg: "server error", Err: err}
}

func (b *Builder) build(ctx context.Context, opts Options, rep *reporter) (Result, error) {
	df, err := parseDockerfile(opts.DockerfileName, opts.Dockerfile)
	if err != nil {
		return Result{}, err
	}
	tmp, err := os.MkdirTemp("", "agentbox-build-")
	if err != nil {
		return Result{}, fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(tmp)
	bd := &build{
		b: b, opts: opts, df: df, rep: rep, lex: shell.NewLex(df.escape),
		used: map[string]bool{}, proxies: map[string]string{},
		done: map[int]*stageState{}, active: map[int]bool{}, counted: map[int]bool{}, tmpDir: tmp,
	}
	for _, w := range df.warnings {
		rep.warn("%s", w)
	}
	if err := bd.resolveMetaArgs(); err != nil {
		return Result{}, err
	}
	target, err := df.target(opts.Target)
	if err != nil {
		return Result{}, err
	}
	needed := bd.neededStages(target)
	for _, i := range needed {
		bd.counted[i] = true
		bd.steps += 1 + len(df.stages[i].Commands)
	}
	for _, i := range needed {
		if _, err := bd.stage(ctx, i); err != nil {
			return Result{}, err
		}
	}
	bd.warnUnusedArgs()
	return bd.finish(ctx, bd.done[target])
}

// resolveMetaArgs evaluates the ARGs before the first FROM.
func (bd *build) resolveMetaArgs() error {
	for k, v := range bd.opts.BuildArgs {
		if slices.Contains(proxyArgs, k) {
			bd.proxies[k] = v
			bd.used[k] = true
		}
	}
	for k, v := range platformArgs() {
		bd.meta = bd.meta.set(k, v)
	}
	for i := range bd.df.metaArgs {
		c := &bd.df.metaArgs[i]
		env := shell.EnvsFromSlice(bd.meta)
		if err := c.Expand(bd.expander(env)); err != nil {
			return bd.df.errAt(c.Location(), "ARG: %v", err)
		}
		for _, kv := range c.Args {
			if v, ok := bd.opts.BuildArgs[kv.Key]; ok {
				bd.used[kv.Key] = true
				bd.meta = bd.meta.set(kv.Key, v)
			} else if kv.Value != nil {
				bd.meta = bd.meta.set(kv.Key, *kv.Value)
			}
		}
	}
	return nil
}

func (bd *build) expander(env shell.EnvGetter) instructions.SingleWordExpander {
	return func(word string) (string, error) {
		s, _, err := bd.lex.ProcessWord(word, env)
		return s, err
	}
}

// baseName expands a stage's FROM with the meta args.
func (bd *build) baseName(i int) (string, error) {
	st := &bd.df.stages[i]
	name, _, err := bd.lex.ProcessWord(st.BaseName, shell.EnvsFromSlice(bd.meta))
	if err != nil {
		return "", bd.df.errAt(st.Location, "FROM %s: %v", st.BaseName, err)
	}
	if name == "" {
		return "", bd.df.errAt(st.Location, "FROM %s: expands to an empty name", st.BaseName)
	}
	return name, nil
}

// neededStages lists the stages the target depends on, in order; like
// BuildKit, the others are skipped. References it cannot see statically
// are built when reached.
func (bd *build) neededStages(target int) []int {
	need := map[int]bool{}
	var visit func(i int)
	visit = func(i int) {
		if need[i] {
			return
		}
		need[i] = true
		ref := func(name string) {
			if j, ok := bd.df.stageIndex(name, i); ok {
				visit(j)
			}
		}
		if name, err := bd.baseName(i); err == nil {
			ref(name)
		}
		for _, c := range bd.df.stages[i].Commands {
			switch c := c.(type) {
			case *instructions.CopyCommand:
				if c.From != "" {
					ref(c.From)
				}
			case *instructions.RunCommand:
				for _, m := range instructions.GetMounts(c) {
					if m.From != "" {
						ref(m.From)
					}
				}
			}
		}
	}
	visit(target)
	out := make([]int, 0, len(need))
	for i := range need {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// stage builds stage i (once).
func (bd *build) stage(ctx context.Context, i int) (*stageState, error) {
	if st := bd.done[i]; st != nil {
		return st, nil
	}
	if bd.active[i] {
		return nil, bd.df.errAt(bd.df.stages[i].Location, "stage %d refers to itself", i)
	}
	bd.active[i] = true
	defer delete(bd.active, i)
	def := &bd.df.stages[i]
	if !bd.counted[i] {
		bd.counted[i] = true
		bd.steps += 1 + len(def.Commands) // reached through a dynamic reference
	}
	st, err := bd.from(ctx, i)
	if err != nil {
		return nil, err
	}
	for _, c := range def.Commands {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := bd.command(ctx, st, c); err != nil {
			var le *LineError
			if !errors.As(err, &le) {
				err = bd.df.errAt(c.Location(), "%s: %w", strings.ToUpper(c.Name()), err)
			}
			return nil, err
		}
	}
	bd.done[i] = st
	return st, nil
}

// from starts stage i from its base: an earlier stage, scratch, a stored
// template, or a registry image pulled into the store.
func (bd *build) from(ctx context.Context, i int) (*stageState, error) {
	def := &bd.df.stages[i]
	start := time.Now()
	bd.begin(def.SourceCode, def.Name, lineOf(def.Location))
	name, err := bd.baseName(i)
	if err != nil {
		return nil, err
	}
	st := &stageState{idx: i, name: def.Name, shell: defaultShell}
	st.vars.env = &st.cfg.Env
	if j, ok := bd.df.stageIndex(name, i); ok {
		base, err := bd.stage(ctx, j)
		if err != nil {
			return nil, err
		}
		st.tmpl, st.cfg, st.key = base.tmpl, cloneConfig(base.cfg), base.key
		st.shell = slices.Clone(base.shell)
	} else if strings.EqualFold(name, "scratch") {
		st.tmpl = sandbox.Template{Ref: "scratch", Kind: sandbox.TemplateImage}
		st.key = chainKey("", "scratch")
	} else {
		t, err := bd.image(ctx, name)
		if err != nil {
			return nil, bd.df.errAt(def.Location, "FROM %s: %w", name, err)
		}
		st.tmpl, st.cfg = t, cloneConfig(t.Config)
		st.key = chainKey("", "from", t.Kind, t.Ref, t.Digest, t.Dir)
	}
	st.vars.env = &st.cfg.Env
	bd.result(st.key, start)
	return st, nil
}

// image resolves a template or pulls a registry image.
func (bd *build) image(ctx context.Context, ref string) (sandbox.Template, error) {
	t, err := bd.b.store.Resolve(ctx, ref)
	if err == nil || !sandbox.IsNotFound(err) {
		return t, err
	}
	if bd.rep.out != nil {
		fmt.Fprintf(bd.rep.out, "Pulling %s\n", ref)
	}
	if _, err := bd.b.store.Pull(ctx, ref, "", bd.opts.Pull, nil); err != nil {
		return sandbox.Template{}, fmt.Errorf("not a template, and pulling it failed: %w", err)
	}
	return bd.b.store.Resolve(ctx, ref)
}

func cloneConfig(c sandbox.ImageConfig) sandbox.ImageConfig {
	out := c
	out.Env = slices.Clone(c.Env)
	out.Entrypoint = slices.Clone(c.Entrypoint)
	out.Cmd = slices.Clone(c.Cmd)
	out.Ports = slices.Clone(c.Ports)
	if c.Labels != nil {
		out.Labels = make(map[string]string, len(c.Labels))
		for k, v := range c.Labels {
			out.Labels[k] = v
		}
	}
	if c.Healthcheck != nil {
		h := *c.Healthcheck
		h.Test = slices.Clone(h.Test)
		out.Healthcheck = &h
	}
	return out
}

// begin announces a step.
func (bd *build) begin(text, stage string, line int) {
	bd.step++
	if bd.step > bd.steps {
		bd.steps = bd.step
	}
	bd.rep.event(Event{Type: EventStep, Step: bd.step, Steps: bd.steps, Stage: stage, Instruction: strings.TrimSpace(text), Line: line})
}

// result announces a step's result.
func (bd *build) result(id string, start time.Time) {
	bd.rep.event(Event{Type: EventResult, Step: bd.step, ID: short(id), DurationMS: time.Since(start).Milliseconds()})
}

// stateKey is the cache key of a stage's state: its layers plus its
// config, shell and build args, so that a config-only step before a RUN
// or COPY changes that step's key, as in Docker.
func (st *stageState) stateKey(extra ...string) string {
	cfg, _ := json.Marshal(st.cfg)
	return chainKey(st.key, append([]string{string(cfg), strings.Join(st.shell, "\x00"), st.vars.cacheArgs()}, extra...)...)
}

func (bd *build) warnUnusedArgs() {
	var unused []string
	for k := range bd.opts.BuildArgs {
		if !bd.used[k] {
			unused = append(unused, k)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		bd.rep.warn("One or more build-args %v were not consumed", unused)
	}
}

// finish names the result: one commit of the final stage per tag (no
// new layer), or an intermediate name when untagged.
func (bd *build) finish(ctx context.Context, st *stageState) (Result, error) {
	names := bd.opts.Tags
	if len(names) == 0 {
		names = []string{CacheName(st.stateKey("final"))}
	}
	res := Result{Cached: bd.cached, Steps: bd.step}
	for _, n := range names {
		info, err := bd.b.store.Commit(ctx, n, st.tmpl, nil, st.cfg, "build")
		if err != nil {
			return Result{}, fmt.Errorf("naming the result %s: %w", n, err)
		}
		res.Info, res.Digest = info, info.Digest
	}
	res.Tags = bd.opts.Tags
	bd.rep.event(Event{Type: EventDone, Digest: res.Digest, Tags: res.Tags})
	return res, nil
}

// absPath resolves a path against the stage's working directory.
func (st *stageState) absPath(p string) string {
	if path.IsAbs(p) {
		return p
	}
	wd := st.cfg.WorkingDir
	if wd == "" {
		wd = "/"
	}
	out := path.Join(wd, p)
	if strings.HasSuffix(p, "/") || p == "." {
		out += "/"
	}
	return out
}

// layer runs a layer-producing step: a cache hit reuses its template,
// otherwise produce writes the layer and it is committed.
func (bd *build) layer(ctx context.Context, st *stageState, key string, produce func() (io.ReadCloser, error)) error {
	start := time.Now()
	if !bd.opts.NoCache {
		if e, ok := bd.b.cache.get(key); ok {
			t, err := bd.b.store.Resolve(ctx, e.Name)
			if err == nil && t.Digest == e.Digest {
				bd.rep.event(Event{Type: EventCached, Step: bd.step})
				bd.cached++
				st.tmpl, st.key = t, key
				_ = bd.b.cache.put(key, cacheEntry{Name: e.Name, Digest: e.Digest, Used: time.Now()})
				bd.result(e.Digest, start)
				return nil
			}
		}
	}
	diff, err := produce()
	if err != nil {
		return err
	}
	defer diff.Close()
	name := CacheName(key)
	info, err := bd.b.store.Commit(ctx, name, st.tmpl, diff, st.cfg, "build")
	if err != nil {
		return fmt.Errorf("committing the step's layer: %w", serverFault(err))
	}
	t, err := bd.b.store.Resolve(ctx, name)
	if err != nil {
		return fmt.Errorf("resolving the step's layer: %w", serverFault(err))
	}
	if err := bd.b.cache.put(key, cacheEntry{Name: name, Digest: info.Digest, Used: time.Now()}); err != nil {
		bd.b.log.Warn("build cache index", "err", err)
	}
	st.tmpl, st.key = t, key
	bd.result(info.Digest, start)
	return nil
}
