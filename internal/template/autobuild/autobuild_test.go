package autobuild

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/admission"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// stored is a fake store: the names built so far.
type stored struct {
	mu    sync.Mutex
	names map[string]bool
}

func (s *stored) exists(_ context.Context, n string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[n]
}

func (s *stored) add(n string) { s.mu.Lock(); s.names[n] = true; s.mu.Unlock() }

// waitState polls r until name is in state want (bounded: 10 s).
func waitState(t *testing.T, r *Runner, name string, want State) Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, _ := r.Lookup(name)
		if s.State == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: state %q (%+v), want %q", name, s.State, s, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A target builds in the background: building (with the progress its
// build reports) until it ends, then ready; the next runner's estimate is
// the time it took; a dependent target waits for it.
func TestBuildingThenReady(t *testing.T) {
	dir := t.TempDir()
	st := &stored{names: map[string]bool{}}
	release := make(chan struct{})
	var order []string
	var mu sync.Mutex
	build := func(name string, wait bool) func(context.Context, func(string)) error {
		return func(ctx context.Context, progress func(string)) error {
			progress("step 1/2: RUN apt-get install")
			if wait {
				<-release
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			st.add(name)
			return nil
		}
	}
	targets := []Target{
		{Name: "base", Command: "make templates", Estimate: time.Hour, Build: build("base", true)},
		{Name: "code-interpreter", Deps: []string{"base"}, Estimate: time.Minute, Build: build("code-interpreter", false)},
		{Name: "browser", Build: build("browser", false)},
	}
	r := New(Config{Dir: dir, Targets: targets, Enabled: map[string]bool{"base": true, "code-interpreter": true}, Exists: st.exists})
	r.Start(context.Background())
	s := waitState(t, r, "base", StateBuilding)
	for s.Progress != "step 1/2: RUN apt-get install" {
		time.Sleep(5 * time.Millisecond)
		s, _ = r.Lookup("base")
	}
	if s.Since.IsZero() || s.Estimate != time.Hour || s.Command != "make templates" {
		t.Errorf("building status %+v", s)
	}
	// Queued behind base: its estimate includes base's.
	if ci, _ := r.Lookup("code-interpreter"); ci.State != StateBuilding || ci.Progress != "queued after base" || ci.Estimate != time.Hour+time.Minute {
		t.Errorf("code-interpreter before base is done: %+v", ci)
	}
	if b, _ := r.Lookup("browser"); b.State != StateNotBuilt {
		t.Errorf("browser (not enabled): %+v", b)
	}
	close(release)
	r.Wait()
	waitState(t, r, "base", StateReady)
	waitState(t, r, "code-interpreter", StateReady)
	if strings.Join(order, ",") != "base,code-interpreter" {
		t.Errorf("build order %v", order)
	}
	// The next start estimates from this machine's build, and builds
	// nothing that is stored.
	r2 := New(Config{Dir: dir, Targets: targets, Enabled: map[string]bool{"base": true, "code-interpreter": true}, Exists: st.exists})
	if s, _ := r2.Lookup("base"); s.Estimate == time.Hour || s.Estimate <= 0 {
		t.Errorf("estimate after a build: %v", s.Estimate)
	}
	r2.Start(context.Background())
	r2.Wait()
	if len(order) != 2 {
		t.Errorf("a second start rebuilt stored templates: %v", order)
	}
	if got := r2.Statuses(); len(got) != 3 || got[0].State != StateReady || got[2].State != StateNotBuilt {
		t.Errorf("statuses %+v", got)
	}
}

// A failed build is failed with its reason; what depends on it is not
// tried; a template stored by hand afterwards is ready.
func TestFailed(t *testing.T) {
	st := &stored{names: map[string]bool{}}
	var ciBuilt atomic.Bool
	r := New(Config{Dir: t.TempDir(), Exists: st.exists, Enabled: map[string]bool{"base": true, "code-interpreter": true}, Targets: []Target{
		{Name: "base", Build: func(context.Context, func(string)) error {
			return errors.New("apt-get: could not resolve deb.debian.org")
		}},
		{Name: "code-interpreter", Deps: []string{"base"}, Build: func(context.Context, func(string)) error { ciBuilt.Store(true); return nil }},
	}})
	r.Start(context.Background())
	r.Wait()
	s := waitState(t, r, "base", StateFailed)
	if !strings.Contains(s.Error, "could not resolve") || s.Since.IsZero() {
		t.Errorf("failed status %+v", s)
	}
	ci := waitState(t, r, "code-interpreter", StateFailed)
	if ciBuilt.Load() || !strings.Contains(ci.Error, "needs base") {
		t.Errorf("dependent of a failed build: built %v, %+v", ciBuilt.Load(), ci)
	}
	st.add("base") // make templates, by hand
	waitState(t, r, "base", StateReady)
}

// A daemon stopped in the middle of a build leaves the template not built
// (not failed); the next start builds it again.
func TestRestartMidBuild(t *testing.T) {
	dir := t.TempDir()
	st := &stored{names: map[string]bool{}}
	started := make(chan struct{})
	r := New(Config{Dir: dir, Exists: st.exists, Enabled: map[string]bool{"base": true}, Targets: []Target{
		{Name: "base", Build: func(ctx context.Context, _ func(string)) error { close(started); <-ctx.Done(); return ctx.Err() }},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	<-started
	cancel()
	r.Wait()
	s := waitState(t, r, "base", StateNotBuilt)
	if !strings.Contains(s.Error, "interrupted") {
		t.Errorf("interrupted build: %+v", s)
	}
	r2 := New(Config{Dir: dir, Exists: st.exists, Enabled: map[string]bool{"base": true}, Targets: []Target{
		{Name: "base", Build: func(context.Context, func(string)) error { st.add("base"); return nil }},
	}})
	r2.Start(context.Background())
	r2.Wait()
	waitState(t, r2, "base", StateReady)
}

// Two processes building into one directory: the second waits for the
// first's lock (saying so), then finds the template built and builds
// nothing.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// Another open file description: flock treats it as another process.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	st := &stored{names: map[string]bool{}}
	var built atomic.Int32
	r := New(Config{Dir: dir, Exists: st.exists, Enabled: map[string]bool{"base": true}, Poll: 10 * time.Millisecond, Targets: []Target{
		{Name: "base", Build: func(context.Context, func(string)) error { built.Add(1); st.add("base"); return nil }},
	}})
	r.Start(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for s, _ := r.Lookup("base"); !strings.Contains(s.Progress, "waiting for another agentbox process"); s, _ = r.Lookup("base") {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the other process: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if built.Load() != 0 {
		t.Fatal("built while another process held the lock")
	}
	st.add("base") // the other process's build
	f.Close()
	r.Wait()
	waitState(t, r, "base", StateReady)
	if built.Load() != 0 {
		t.Errorf("built again what the other process built")
	}
}

// The create answers: building is 503-class with Retry-After and the
// stable reason, failed and not built are not found; each names the
// template, its state and the command that builds it.
func TestNotReadyError(t *testing.T) {
	now := time.Now()
	building := Status{Name: "desktop", State: StateBuilding, Since: now.Add(-90 * time.Second), Estimate: 4 * time.Minute, Progress: "step 3/9: RUN apt-get", Command: "make templates"}
	err := NotReadyError(building, "gui", now)
	var nr *sandbox.TemplateNotReady
	var ra *admission.RetryAfterError
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable || !errors.As(err, &nr) || nr.Reason != sandbox.ReasonTemplateBuilding || !errors.As(err, &ra) || ra.After != 60*time.Second {
		t.Errorf("building: %v (%+v %+v)", err, nr, ra)
	}
	for _, want := range []string{`"gui" uses template "desktop"`, "building for 1m30s of about 4m0s", "step 3/9"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("building message %q lacks %q", err, want)
		}
	}
	failed := Status{Name: "base", State: StateFailed, Since: now, Error: "apt-get failed", Command: "make templates"}
	err = NotReadyError(failed, "base", now)
	if sandbox.ClassOf(err) != sandbox.ClassNotFound || !errors.As(err, &nr) || nr.Reason != sandbox.ReasonTemplateNotBuilt ||
		!strings.Contains(err.Error(), "failed to build") || !strings.Contains(err.Error(), "apt-get failed") || !strings.Contains(err.Error(), "make templates") {
		t.Errorf("failed: %v", err)
	}
	err = NotReadyError(Status{Name: "browser", State: StateNotBuilt, Command: "make templates"}, "browser", now)
	if sandbox.ClassOf(err) != sandbox.ClassNotFound || !strings.Contains(err.Error(), "not built") || !strings.Contains(err.Error(), "make templates") {
		t.Errorf("not built: %v", err)
	}
	if n := Note(building, now); n != "building 1m30s of about 4m0s" {
		t.Errorf("note %q", n)
	}
}
