// Package autobuild builds the built-in templates a newcomer's first calls
// need (base, code-interpreter, the agentscope types' defaults) in the
// background when the daemon starts, and says where each one stands:
// ready, building (with its progress, how long, an estimate), failed (with
// the reason) or not built (with the command that builds it).
//
// It knows nothing of how a template is built: each Target brings its own
// Build function (the daemon's: bootstrap, then the Dockerfile builder).
// Targets build one at a time, in order; a target whose dependency did not
// become ready is not tried. Only one process builds into a directory at a
// time (a flock in Dir): a second one waits for it, then finds its results.
package autobuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// State is where a built-in template stands.
type State string

const (
	StateReady    State = "ready"
	StateBuilding State = "building"
	StateFailed   State = "failed"
	StateNotBuilt State = "not_built"
)

// Status is one built-in template's state, as the API, the CLI, the log
// and the start banner show it.
type Status struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Progress is the last thing the build said ("step 3/7: RUN ...",
	// "waiting for another agentbox process building into ...").
	Progress string `json:"progress,omitempty"`
	// Since is when the build started (building) or ended (failed).
	Since time.Time `json:"since,omitzero"`
	// Estimate is how long the whole build is expected to take: the last
	// successful build's time in this directory, else the target's
	// first-build estimate.
	Estimate time.Duration `json:"-"`
	// Error is why the build failed (failed) or stopped (not_built after an
	// interrupted build).
	Error string `json:"error,omitempty"`
	// Command builds the template by hand.
	Command string `json:"command,omitempty"`
}

// Elapsed is how long the build has been running (0 unless building).
func (s Status) Elapsed(now time.Time) time.Duration {
	if s.State != StateBuilding || s.Since.IsZero() {
		return 0
	}
	return now.Sub(s.Since)
}

// Target is one built-in template.
type Target struct {
	Name string
	// Deps must be ready before Name is built (they come earlier in the
	// target list).
	Deps []string
	// Command is what builds it by hand, for messages.
	Command string
	// Estimate is a first build's expected time (no earlier build timed).
	Estimate time.Duration
	// Build makes the template; progress reports what it is doing.
	Build func(ctx context.Context, progress func(string)) error
}

// Config configures a Runner.
type Config struct {
	// Dir holds the build lock and the timings of earlier builds (the
	// template directory: two daemons sharing it share the lock).
	Dir string
	// Targets are every built-in template, in build order.
	Targets []Target
	// Enabled names the targets built at start; the others stay not built.
	Enabled map[string]bool
	// Exists reports whether the template is already stored.
	Exists func(ctx context.Context, name string) bool
	Logger *slog.Logger
	// Poll is how often a runner waiting for another process's lock
	// retries (0 = a second).
	Poll time.Duration
}

// Runner builds the targets and reports their states. Its methods are safe
// for concurrent use.
type Runner struct {
	cfg  Config
	log  *slog.Logger
	mu   sync.Mutex
	st   map[string]*Status
	own  map[string]time.Duration // each target's own build estimate
	done chan struct{}
}

// lockName and timingsName live in Config.Dir.
const (
	lockName    = "autobuild.lock"
	timingsName = "autobuild.json"
)

// New returns a runner; nothing is built before Start.
func New(cfg Config) *Runner {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, st: map[string]*Status{}, own: map[string]time.Duration{}, done: make(chan struct{})}
	timings := r.timings()
	for _, t := range cfg.Targets {
		est := t.Estimate
		if d, ok := timings[t.Name]; ok && d > 0 {
			est = d
		}
		r.st[t.Name] = &Status{Name: t.Name, State: StateNotBuilt, Command: t.Command, Estimate: est}
		r.own[t.Name] = est
	}
	return r
}

// Start checks which targets are stored (ready) and builds the enabled
// others in the background until ctx ends. Wait waits for that to end.
func (r *Runner) Start(ctx context.Context) {
	var todo []Target
	var ahead time.Duration // the estimates of the builds queued before
	for _, t := range r.cfg.Targets {
		if r.cfg.Exists(ctx, t.Name) {
			r.set(t.Name, func(s *Status) { s.State = StateReady })
			continue
		}
		if r.cfg.Enabled[t.Name] {
			// Building from now on, as far as a create is concerned: it
			// will be, once the targets before it are done, so its
			// estimate includes theirs.
			r.set(t.Name, func(s *Status) {
				s.State, s.Since, s.Estimate = StateBuilding, time.Now(), ahead+s.Estimate
				s.Progress = "queued"
				if len(todo) > 0 {
					s.Progress = "queued after " + todo[len(todo)-1].Name
				}
				ahead = s.Estimate
			})
			todo = append(todo, t)
		}
	}
	if len(todo) == 0 {
		close(r.done)
		return
	}
	go func() {
		defer close(r.done)
		r.run(ctx, todo)
	}()
}

// Wait returns once the background builds have ended (after Start).
func (r *Runner) Wait() { <-r.done }

func (r *Runner) run(ctx context.Context, todo []Target) {
	unlock, err := r.lock(ctx)
	if err != nil {
		for _, t := range todo {
			r.stop(t.Name, err)
		}
		return
	}
	defer unlock()
	for _, t := range todo {
		if ctx.Err() != nil {
			r.stop(t.Name, ctx.Err())
			continue
		}
		if r.cfg.Exists(ctx, t.Name) {
			// Another process built it while this one waited for the lock.
			r.set(t.Name, func(s *Status) { s.State, s.Progress = StateReady, "" })
			continue
		}
		if dep := r.unready(t.Deps); dep != "" {
			r.fail(t.Name, time.Now(), fmt.Errorf("needs %s, which is not ready", dep))
			continue
		}
		r.build(ctx, t)
	}
}

func (r *Runner) build(ctx context.Context, t Target) {
	start := time.Now()
	est := r.own[t.Name]
	r.set(t.Name, func(s *Status) {
		s.State, s.Since, s.Progress, s.Error, s.Estimate = StateBuilding, start, "starting", "", est
	})
	r.log.Info("building a built-in template in the background (TEMPLATE_AUTO_BUILD)", "template", t.Name, "estimate", est.Round(time.Second).String())
	// A long step (apt-get install) says nothing for minutes: the log
	// says where the build stands every half minute all the same.
	tick := time.NewTicker(30 * time.Second)
	tickDone := make(chan struct{})
	stopTicker := sync.OnceFunc(func() { tick.Stop(); close(tickDone) })
	defer stopTicker()
	go func() {
		for {
			select {
			case <-tickDone:
				return
			case now := <-tick.C:
				s := r.Status(t.Name)
				r.log.Info("built-in template building", "template", t.Name, "progress", s.Progress,
					"elapsed", now.Sub(start).Round(time.Second).String(), "estimate", est.Round(time.Second).String())
			}
		}
	}()
	last := time.Time{}
	err := t.Build(ctx, func(p string) {
		r.set(t.Name, func(s *Status) { s.Progress = p })
		// The log gets the progress at most every few seconds; the API
		// always has the latest.
		if now := time.Now(); now.Sub(last) >= 5*time.Second {
			last = now
			r.log.Info("built-in template building", "template", t.Name, "progress", p, "elapsed", now.Sub(start).Round(time.Second).String())
		}
	})
	stopTicker()
	took := time.Since(start)
	switch {
	case err == nil:
		r.set(t.Name, func(s *Status) { s.State, s.Progress, s.Estimate = StateReady, "", took })
		r.saveTiming(t.Name, took)
		r.log.Info("built-in template ready", "template", t.Name, "took", took.Round(time.Millisecond).String())
	case ctx.Err() != nil:
		r.stop(t.Name, ctx.Err())
	default:
		r.fail(t.Name, time.Now(), err)
	}
}

// unready returns the first of deps that is not ready.
func (r *Runner) unready(deps []string) string {
	for _, d := range deps {
		if s, ok := r.lookup(d); ok && s.State != StateReady {
			return d
		}
	}
	return ""
}

func (r *Runner) fail(name string, at time.Time, err error) {
	r.set(name, func(s *Status) { s.State, s.Since, s.Progress, s.Error = StateFailed, at, "", err.Error() })
	r.log.Error("built-in template build failed", "template", name, "err", err, "build_by_hand", r.Status(name).Command)
}

// stop marks an interrupted build: not built, the next start builds again
// (finished steps are in the builder's cache).
func (r *Runner) stop(name string, err error) {
	r.set(name, func(s *Status) {
		s.State, s.Since, s.Progress, s.Error = StateNotBuilt, time.Time{}, "", "interrupted: "+err.Error()
	})
}

func (r *Runner) set(name string, f func(*Status)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.st[name]; ok {
		f(s)
	}
}

func (r *Runner) lookup(name string) (Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.st[name]
	if !ok {
		return Status{}, false
	}
	return *s, true
}

// Status returns the state of the built-in template name ("" State when
// name is not one).
func (r *Runner) Status(name string) Status {
	s, _ := r.lookup(name)
	return s
}

// Lookup returns the state of name and whether it is a built-in template.
// Outside a build it follows the store: a template built or pulled by hand
// is ready, one deleted by hand is not built.
func (r *Runner) Lookup(name string) (Status, bool) {
	s, ok := r.lookup(name)
	if !ok || s.State == StateBuilding {
		return s, ok
	}
	exists := r.cfg.Exists(context.Background(), name)
	switch {
	case exists && s.State != StateReady:
		r.set(name, func(s *Status) {
			if s.State != StateBuilding {
				s.State, s.Progress, s.Error, s.Since = StateReady, "", "", time.Time{}
			}
		})
	case !exists && s.State == StateReady:
		r.set(name, func(s *Status) {
			if s.State == StateReady {
				s.State = StateNotBuilt
			}
		})
	}
	s, _ = r.lookup(name)
	return s, true
}

// Statuses returns every built-in template's state, in build order: what
// the start banner, `template ls` and the console show.
func (r *Runner) Statuses() []Status {
	out := make([]Status, 0, len(r.cfg.Targets))
	for _, t := range r.cfg.Targets {
		s, _ := r.Lookup(t.Name)
		out = append(out, s)
	}
	return out
}

// lock takes the directory's build lock, waiting (and saying so in every
// queued target's progress) while another process holds it.
func (r *Runner) lock(ctx context.Context) (func(), error) {
	if err := os.MkdirAll(r.cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("autobuild: %w", err)
	}
	path := filepath.Join(r.cfg.Dir, lockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("autobuild lock: %w", err)
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("autobuild lock: %w", err)
		}
		if !said {
			said = true
			msg := "waiting for another agentbox process building templates into " + r.cfg.Dir
			r.log.Info(msg)
			r.mu.Lock()
			for _, s := range r.st {
				if s.State == StateBuilding {
					s.Progress = msg
				}
			}
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(r.cfg.Poll):
		}
	}
}

// timings are the last successful build times, by template, kept in Dir
// so the next start's estimate is this machine's.
func (r *Runner) timings() map[string]time.Duration {
	out := map[string]time.Duration{}
	b, err := os.ReadFile(filepath.Join(r.cfg.Dir, timingsName))
	if err != nil {
		return out
	}
	var ms map[string]int64
	if json.Unmarshal(b, &ms) != nil {
		return out
	}
	for k, v := range ms {
		out[k] = time.Duration(v) * time.Millisecond
	}
	return out
}

func (r *Runner) saveTiming(name string, took time.Duration) {
	t := r.timings()
	t[name] = took
	ms := make(map[string]int64, len(t))
	for k, v := range t {
		// At least 1: a stored 0 reads as "never timed" (a build of
		// stored layers can take under a millisecond).
		ms[k] = max(v.Milliseconds(), 1)
	}
	b, _ := json.Marshal(ms)
	tmp := filepath.Join(r.cfg.Dir, timingsName+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err == nil {
		err = os.Rename(tmp, filepath.Join(r.cfg.Dir, timingsName))
		if err != nil {
			r.log.Debug("autobuild: save timings", "err", err)
		}
	}
}
