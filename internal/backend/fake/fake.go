// Package fake is a scriptable backend for testing the layers above the
// backend contract (manager, pools, API) without kernel isolation.
//
// Each "sandbox" is a real agentbox-agent process on the host, serving on a
// unix socket, so everything above the backend talks to a real agent. There
// is NO isolation: never use it to run untrusted code.
package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Backend is the fake backend. The hook fields may be set before use to
// script failures and delays.
type Backend struct {
	AgentPath string
	Dir       string // sockets and per-sandbox work dirs live here

	// CreateHook, when set, runs at the start of Create; an error fails it.
	CreateHook func(ctx context.Context, spec sandbox.Spec) error
	// DestroyHook, when set, runs at the start of Destroy.
	DestroyHook func(id sandbox.ID) error
	// SnapshotHook, when set, writes SnapshotDiff's layer instead of the
	// scripted one.
	SnapshotHook func(ctx context.Context, id sandbox.ID, w io.Writer) error

	mu     sync.Mutex
	boxes  map[sandbox.ID]*box
	counts map[string]int
	onExit func(sandbox.ID, string)
}

type box struct {
	info sandbox.Info
	cmd  *exec.Cmd
	done chan struct{}
}

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.ExitWatcher = (*Backend)(nil)
)

// OnAgentExit implements backend.ExitWatcher: Crash reports to fn.
func (b *Backend) OnAgentExit(fn func(id sandbox.ID, reason string)) {
	b.mu.Lock()
	b.onExit = fn
	b.mu.Unlock()
}

// New returns a fake backend using the agent binary at agentPath and
// keeping its files in dir.
func New(agentPath, dir string) *Backend {
	return &Backend{AgentPath: agentPath, Dir: dir, boxes: map[sandbox.ID]*box{}, counts: map[string]int{}}
}

// Calls returns how many times a method ("create", "destroy", ...) was called.
func (b *Backend) Calls(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts[method]
}

func (b *Backend) count(method string) {
	b.mu.Lock()
	b.counts[method]++
	b.mu.Unlock()
}

func (b *Backend) Name() string { return "fake" }

func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Templates: []string{sandbox.TemplateHost, sandbox.TemplateDir, sandbox.TemplateImage}, Snapshot: true, Pause: true, Recycle: true}
}

func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	b.count("create")
	if err := spec.ID.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	switch spec.Template.Kind {
	case sandbox.TemplateHost, sandbox.TemplateDir, sandbox.TemplateImage:
	default:
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q has unknown kind %q", spec.Template.Ref, spec.Template.Kind)
	}
	if err := validateResources(spec.Resources); err != nil {
		return sandbox.Info{}, err
	}
	if b.CreateHook != nil {
		if err := b.CreateHook(ctx, spec); err != nil {
			return sandbox.Info{}, err
		}
	}
	b.mu.Lock()
	if _, ok := b.boxes[spec.ID]; ok {
		b.mu.Unlock()
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", spec.ID)
	}
	bx := &box{info: sandbox.Info{ID: spec.ID, Spec: spec, CreatedAt: time.Now().UTC()}}
	b.boxes[spec.ID] = bx
	b.mu.Unlock()
	if err := b.boot(ctx, bx); err != nil {
		b.mu.Lock()
		delete(b.boxes, spec.ID)
		b.mu.Unlock()
		return sandbox.Info{}, err
	}
	return b.info(bx), nil
}

// RootDir is where the processes of sandbox id keep what a sandbox of an
// isolating backend keeps in its root filesystem: the sandbox's own work
// directory, which is also its processes' working directory. SnapshotDiff
// makes its layer of what is there.
func (b *Backend) RootDir(id sandbox.ID) string { return filepath.Join(b.Dir, string(id)) }

// validateResources refuses what the real backends refuse: limits below
// their minimums (16 MiB of memory, 0.01 CPUs, 8 processes) or negative.
// A zero field is the backend's default, as on theirs; the fake enforces
// none of the limits.
func validateResources(r sandbox.Resources) error {
	switch {
	case r.MemoryBytes != 0 && r.MemoryBytes < 16<<20:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.memory: at least 16 MiB")
	case r.CPUs != 0 && (r.CPUs < 0.01 || r.CPUs > 1024):
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.cpus: must be between 0.01 and 1024")
	case r.PIDs != 0 && r.PIDs < 8:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.pids: at least 8")
	case r.DiskBytes < 0 || r.TmpBytes < 0:
		return sandbox.Errorf(sandbox.ClassInvalid, "resources.disk, resources.tmp: must not be negative")
	}
	return nil
}

func (b *Backend) boot(ctx context.Context, bx *box) error {
	id := bx.info.ID
	work := b.RootDir(id)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	sock := filepath.Join(b.Dir, string(id)+".sock")
	_ = os.Remove(sock)
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(b.AgentPath, "--listen", "unix://"+sock, "--ready-fd", "3", "--workdir", work)
	env := os.Environ()
	for k, v := range bx.info.Spec.Env {
		env = append(env, k+"="+v)
	}
	if tok := bx.info.Spec.AccessToken; tok != "" {
		env = append(env, "AGENTBOX_ACCESS_TOKEN="+tok)
	}
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start fake agent: %w", err)
	}
	w.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 1)
		_, err := r.Read(buf)
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			killTree(cmd.Process.Pid)
			<-done
			return fmt.Errorf("fake agent not ready: %w", err)
		}
	case <-ctx.Done():
		killTree(cmd.Process.Pid)
		<-done
		return ctx.Err()
	}
	b.mu.Lock()
	bx.cmd, bx.done = cmd, done
	bx.info.Agent = sandbox.Endpoint{Network: "unix", Address: sock}
	bx.info.State = sandbox.StateRunning
	bx.info.Pid = cmd.Process.Pid
	b.mu.Unlock()
	return nil
}

func (b *Backend) info(bx *box) sandbox.Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := bx.info
	in.Spec.AccessToken = ""
	return in
}

func (b *Backend) get(id sandbox.ID) (*box, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bx, ok := b.boxes[id]
	if !ok {
		return nil, sandbox.ErrNotFound(id)
	}
	return bx, nil
}

func (b *Backend) kill(bx *box) {
	b.mu.Lock()
	cmd, done := bx.cmd, bx.done
	bx.cmd = nil
	bx.info.State = sandbox.StateStopped
	bx.info.Pid = 0
	b.mu.Unlock()
	if cmd != nil {
		killTree(cmd.Process.Pid)
		<-done
	}
}

func (b *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	b.count("stop")
	bx, err := b.get(id)
	if err != nil {
		return err
	}
	b.kill(bx)
	return nil
}

func (b *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	b.count("start")
	bx, err := b.get(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	if b.info(bx).State == sandbox.StateRunning {
		return b.info(bx), nil
	}
	if err := b.boot(ctx, bx); err != nil {
		return sandbox.Info{}, err
	}
	return b.info(bx), nil
}

func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	b.count("destroy")
	if b.DestroyHook != nil {
		if err := b.DestroyHook(id); err != nil {
			return err
		}
	}
	b.mu.Lock()
	bx, ok := b.boxes[id]
	delete(b.boxes, id)
	b.mu.Unlock()
	if !ok {
		return nil
	}
	b.kill(bx)
	_ = os.RemoveAll(b.RootDir(id))
	_ = os.Remove(filepath.Join(b.Dir, string(id)+".sock"))
	return nil
}

func (b *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.get(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info(bx), nil
}

// Recover returns the sandboxes this backend instance runs: the fake keeps
// no state on disk, so a "restarted" fake is the same instance.
func (b *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) {
	b.count("recover")
	b.mu.Lock()
	ids := make([]*box, 0, len(b.boxes))
	for _, bx := range b.boxes {
		ids = append(ids, bx)
	}
	b.mu.Unlock()
	out := make([]sandbox.Info, 0, len(ids))
	for _, bx := range ids {
		out = append(out, b.info(bx))
	}
	return out, nil
}

// Crash kills a sandbox's agent behind the backend's back, as an OOM kill
// or a bug would; Inspect then reports it stopped, and the ExitWatcher
// hears of it.
func (b *Backend) Crash(id sandbox.ID) error {
	bx, err := b.get(id)
	if err != nil {
		return err
	}
	b.kill(bx)
	b.mu.Lock()
	fn := b.onExit
	b.mu.Unlock()
	if fn != nil {
		go fn(id, "agent exited: signal: killed")
	}
	return nil
}

// Close destroys every sandbox.
func (b *Backend) Close() error {
	b.mu.Lock()
	ids := make([]sandbox.ID, 0, len(b.boxes))
	for id := range b.boxes {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, b.Destroy(context.Background(), id))
	}
	return errors.Join(errs...)
}
