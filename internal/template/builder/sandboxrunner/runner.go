// Package sandboxrunner runs the RUN steps of Dockerfile builds in
// agentbox sandboxes: it is the builder.Runner of the daemon.
//
// Each step gets a fresh sandbox from the stage's layers so far, root
// inside its user namespace, a writable root, egress network unless the
// step says --network=none (and only where the server has networking).
// Secrets are files in a fresh host directory bind-mounted read-only (or
// environment variables of the step's process only); cache mounts are
// host directories kept under the runner's cache directory; bind mounts
// of other stages or images are read-only overlays of their layers. The
// step's layer is the sandbox's snapshot diff without any of those mount
// targets, so none of their content (or their mount points) reaches a
// layer. The sandbox is always destroyed.
package sandboxrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/builder"
)

// Sandboxes creates build sandboxes; *manager.Manager is one.
type Sandboxes interface {
	RunBuildSandbox(ctx context.Context, spec sandbox.Spec, fn func(ctx context.Context, sb manager.BuildSandbox) error) error
	NetworkAvailable() bool
}

// Config configures a Runner.
type Config struct {
	Sandboxes Sandboxes
	// Dir holds the cache mounts (Dir/cache/<hash>, and Dir/cache-rest/<hash>
	// once they are at rest, see restMarker) and each step's
	// temporary files (secrets, bind mount views) under Dir/tmp; it must
	// be the daemon's, not readable by others.
	Dir string
	// Resources of build sandboxes (zero fields: the server's defaults).
	Resources sandbox.Resources
	// IDs says where the sandboxes' host ids lie and which of them own
	// the cache mounts' files between steps. Needed for cache mounts
	// whenever build sandboxes map their ids (see mounts.own).
	IDs    HostIDs
	Logger *slog.Logger
}

// Runner implements builder.Runner.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	caches keyedLocks
}

var _ builder.Runner = (*Runner)(nil)

// New returns a runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Sandboxes == nil || cfg.Dir == "" {
		return nil, errors.New("sandboxrunner: Sandboxes and Dir are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "cache"), filepath.Join(cfg.Dir, "cache-rest"), filepath.Join(cfg.Dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("sandboxrunner: %w", err)
		}
	}
	// Temporary files of steps a crash interrupted.
	if ents, err := os.ReadDir(filepath.Join(cfg.Dir, "tmp")); err == nil {
		for _, e := range ents {
			p := filepath.Join(cfg.Dir, "tmp", e.Name())
			unmountAll(p)
			_ = os.RemoveAll(p)
		}
	}
	r := &Runner{cfg: cfg, log: cfg.Logger.With("component", "build-runner")}
	r.restCaches()
	return r, nil
}

// restCaches gives every cache mount its owners at rest where no marker
// says it has them: caches an earlier version kept in image ids (host
// root's and host accounts' ids, with their set-id bits), and those a
// crash left in a step's range.
func (r *Runner) restCaches() {
	rest, ok := r.cfg.IDs.resting()
	if !ok {
		return
	}
	dir := filepath.Join(r.cfg.Dir, "cache")
	ents, err := os.ReadDir(dir)
	if err != nil {
		r.log.Warn("list build caches", "err", err)
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if data, err := os.ReadFile(restMarker(p)); err == nil && string(data) == restMarkerData(rest) {
			continue
		}
		r.toRest(p, rest)
	}
	// Markers of caches that are gone.
	markers, _ := os.ReadDir(filepath.Join(r.cfg.Dir, "cache-rest"))
	for _, e := range markers {
		if _, err := os.Lstat(filepath.Join(dir, e.Name())); errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(filepath.Join(r.cfg.Dir, "cache-rest", e.Name()))
		}
	}
}

// Run implements builder.Runner.
func (r *Runner) Run(ctx context.Context, base sandbox.Template, step builder.RunStep, out io.Writer) (io.ReadCloser, error) {
	if len(step.Args) == 0 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "empty command")
	}
	if base.Kind != sandbox.TemplateImage {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "RUN needs an image base (FROM a template of the store), not a %s template", base.Kind)
	}
	if base.Ref == "scratch" && len(base.Layers) == 0 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "RUN in a stage FROM scratch: there is no program to run")
	}
	tmp, err := os.MkdirTemp(filepath.Join(r.cfg.Dir, "tmp"), "step-")
	if err != nil {
		return nil, fmt.Errorf("step dir: %w", err)
	}
	m := &mounts{tmp: tmp}
	defer m.cleanup()
	if err := r.prepare(m, step); err != nil {
		return nil, err
	}
	unlock := r.caches.lock(m.cacheIDs)
	defer unlock()

	netMode := sandbox.NetworkNone
	if step.Network != "none" && r.cfg.Sandboxes.NetworkAvailable() {
		netMode = sandbox.NetworkEgress
	}
	spec := sandbox.Spec{
		Template: base, Root: true, WritableRoot: true,
		Resources: r.cfg.Resources,
		Mounts:    m.spec,
		Network:   sandbox.Network{Mode: netMode},
	}
	layerFile, err := os.CreateTemp(tmp, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	// The layer outlives tmp: it is unlinked now and read through the fd.
	os.Remove(layerFile.Name())
	var stepIDs *idMap
	err = r.cfg.Sandboxes.RunBuildSandbox(ctx, spec, func(ctx context.Context, sb manager.BuildSandbox) error {
		if step.Started != nil {
			step.Started(string(sb.Info.ID))
		}
		ids, err := readIDMap(sb.Info.Pid)
		if err != nil {
			return err
		}
		stepIDs = &ids
		if err := m.own(r.cfg.IDs, ids); err != nil {
			return err
		}
		pre, err := preState(ctx, sb)
		if err != nil {
			return err
		}
		if err := r.exec(ctx, sb.Agent, step, out); err != nil {
			return err
		}
		return writeLayer(ctx, sb, layerFile, m.targets, pre)
	})
	if stepIDs != nil {
		// After the sandbox is destroyed: nothing of it can change the
		// caches while they are walked.
		r.rest(m, *stepIDs)
	}
	if err != nil {
		layerFile.Close()
		return nil, err
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		layerFile.Close()
		return nil, err
	}
	return layerFile, nil
}

// exec runs the step's command and streams its output to out. A
// cancelled ctx kills it (and the sandbox goes with RunBuildSandbox).
func (r *Runner) exec(ctx context.Context, c *agentclient.Client, step builder.RunStep, out io.Writer) error {
	env := map[string]string{}
	for _, kv := range step.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, s := range step.Secrets {
		if s.Env != "" {
			env[s.Env] = string(s.Data)
		}
	}
	user, err := stepUser(ctx, c, step.User)
	if err != nil {
		return err
	}
	p, err := c.Start(ctx, agentclient.StartOptions{Cmd: step.Args[0], Args: step.Args[1:], Env: env, Cwd: step.WorkingDir, User: user})
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer p.Close()
	finished := false
	defer func() {
		if !finished {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = c.Kill(kctx, p.Pid())
			cancel()
		}
	}()
	for {
		ev, err := p.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		switch ev.Kind {
		case agentclient.EventStdout, agentclient.EventStderr, agentclient.EventPTY:
			if _, err := out.Write(ev.Data); err != nil {
				return err
			}
		case agentclient.EventEnd:
			finished = true
			if !ev.End.Exited || ev.End.ExitCode != 0 {
				status := ev.End.Status
				if status == "" {
					status = fmt.Sprintf("exit code %d", ev.End.ExitCode)
				}
				return &builder.ExitError{Code: ev.End.ExitCode, Status: status}
			}
			return nil
		}
	}
}

// keyedLocks serialises steps that share a cache mount: its files are
// shifted into one sandbox's id range for the step (see mounts.own).
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (k *keyedLocks) lock(keys []string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*sync.Mutex{}
	}
	var held []*sync.Mutex
	for _, key := range keys { // sorted: no lock-order inversion
		l := k.locks[key]
		if l == nil {
			l = &sync.Mutex{}
			k.locks[key] = l
		}
		held = append(held, l)
	}
	k.mu.Unlock()
	for _, l := range held {
		l.Lock()
	}
	return func() {
		for _, l := range held {
			l.Unlock()
		}
	}
}
