package backendtest

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The optional features. A backend claims one in its Capabilities (for
// the kind of the template under test: backend.CapabilitiesFor) and then
// must implement its interface and pass its subtest. A backend that does
// not claim it skips the subtest, saying why; if it implements the
// interface all the same (a dispatcher, a mode lacking the feature), the
// call must be refused with sandbox.ClassUnavailable rather than half
// work.

// gate fails t when b's claim and its interfaces disagree, and skips t
// (after checking refuse's answer) when b does not claim the feature.
// refuse, called only for an unclaimed feature whose interface b has,
// makes the call the feature would.
func gate(t *testing.T, b backend.Backend, h Harness, feature, field, iface string, claimed, implemented bool, refuse func(sandbox.ID) error) {
	t.Helper()
	if claimed && !implemented {
		t.Fatalf("the %s backend claims %s (Capabilities.%s for %s templates) but implements no %s", b.Name(), feature, field, h.Template.Kind, iface)
	}
	if claimed {
		return
	}
	why := "implements no " + iface
	if implemented {
		info := Create(t, b, sandbox.Spec{Template: h.Template})
		if err := refuse(info.ID); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
			t.Fatalf("the %s backend does not claim %s for %s templates but its %s answered %v, want class %s", b.Name(), feature, h.Template.Kind, iface, err, sandbox.ClassUnavailable)
		}
		why = "refuses it with " + string(sandbox.ClassUnavailable)
	}
	t.Skipf("the %s backend does not claim %s for %s templates (Capabilities.%s is false; it %s)", b.Name(), feature, h.Template.Kind, field, why)
}

// testPause: a paused sandbox answers nothing and is reported paused;
// pausing it again and resuming a running one are no-ops; it resumes with
// its files; a stopped one is a conflict; a paused one can be destroyed.
func testPause(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	ctx := ctxT(t)
	p, ok := b.(backend.Pauser)
	gate(t, b, h, "pause", "Pause", "backend.Pauser", backend.CapabilitiesFor(b, h.Template.Kind).Pause, ok,
		func(id sandbox.ID) error { return p.Pause(ctx, id) })

	info := Create(t, b, sandbox.Spec{Template: h.Template})
	c := Client(t, info, h.AccessToken)
	Exec(t, c, "echo kept > pause-note")
	for i := 0; i < 2; i++ { // the second time a no-op
		if err := p.Pause(ctx, info.ID); err != nil {
			t.Fatalf("pause #%d: %v", i+1, err)
		}
	}
	if got, err := b.Inspect(ctx, info.ID); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("inspect paused = %+v, %v", got, err)
	}
	hctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := c.Health(hctx)
	cancel()
	if err == nil {
		t.Fatal("the agent of a paused sandbox answers")
	}
	for i := 0; i < 2; i++ {
		if err := p.Resume(ctx, info.ID); err != nil {
			t.Fatalf("resume #%d: %v", i+1, err)
		}
	}
	if got, err := b.Inspect(ctx, info.ID); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("inspect resumed = %+v, %v", got, err)
	}
	if r := Exec(t, c, "cat pause-note"); r.Stdout != "kept\n" {
		t.Fatalf("file after resume = %+v", r)
	}
	if err := p.Pause(ctx, "no-such-sandbox"); !sandbox.IsNotFound(err) {
		t.Errorf("pause unknown: %v, want not found", err)
	}

	// Paused, then destroyed.
	if err := p.Pause(ctx, info.ID); err != nil {
		t.Fatalf("pause again: %v", err)
	}
	if err := b.Destroy(ctx, info.ID); err != nil {
		t.Fatalf("destroy paused: %v", err)
	}
	if _, err := b.Inspect(ctx, info.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("inspect after destroying a paused sandbox: %v, want not found", err)
	}

	stopped := Create(t, b, sandbox.Spec{Template: h.Template})
	if err := b.Stop(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(ctx, stopped.ID); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Errorf("pause stopped: %v, want conflict", err)
	}
	if err := p.Resume(ctx, stopped.ID); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Errorf("resume stopped: %v, want conflict", err)
	}
}

// snapshotFile is what testSnapshot writes in a sandbox's root
// filesystem and looks for in the layer.
const snapshotFile = "etc/agentbox-conformance"

// testSnapshot: host templates have no layer (invalid_argument); for the
// others the layer holds what the sandbox wrote to its root filesystem,
// and the sandbox runs on.
func testSnapshot(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	ctx := ctxT(t)
	caps := backend.CapabilitiesFor(b, h.Template.Kind)
	sn, ok := b.(backend.Snapshotter)
	gate(t, b, h, "snapshots", "Snapshot", "backend.Snapshotter", caps.Snapshot, ok,
		func(id sandbox.ID) error { return sn.SnapshotDiff(ctx, id, io.Discard) })

	if err := sn.SnapshotDiff(ctx, "no-such-sandbox", io.Discard); !sandbox.IsNotFound(err) {
		t.Errorf("snapshot unknown: %v, want not found", err)
	}
	if h.Template.Kind == sandbox.TemplateHost {
		info := Create(t, b, sandbox.Spec{Template: h.Template})
		if err := sn.SnapshotDiff(ctx, info.ID, io.Discard); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Fatalf("snapshot of a host template sandbox: %v, want invalid_argument (it has no layer)", err)
		}
		return
	}
	info := Create(t, b, sandbox.Spec{Template: h.Template, WritableRoot: true, Root: caps.RootInUserNS})
	root := ""
	if h.RootDir != nil {
		root = h.RootDir(b, info.ID)
	}
	c := Client(t, info, h.AccessToken)
	path := shellQuote(root + "/" + snapshotFile)
	dir := shellQuote(root + "/etc")
	if r := Exec(t, c, "[ -d "+dir+" ] || mkdir "+dir+"; echo snap > "+path+" && echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("write %s: %+v", snapshotFile, r)
	}
	var layer bytes.Buffer
	if err := sn.SnapshotDiff(ctx, info.ID, &layer); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	got, found, err := tarFile(&layer, snapshotFile)
	if err != nil || !found || got != "snap\n" {
		t.Fatalf("layer's %s = %q (found %v), %v; want the file the sandbox wrote", snapshotFile, got, found, err)
	}
	if r := Exec(t, c, "cat "+path); r.Stdout != "snap\n" {
		t.Fatalf("sandbox after its snapshot: %+v", r)
	}
}

// tarFile returns the content of file name in tarball, and whether it is
// there.
func tarFile(tarball io.Reader, name string) (string, bool, error) {
	tr := tar.NewReader(tarball)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		if strings.TrimPrefix(strings.TrimPrefix(hdr.Name, "./"), "/") != name {
			continue
		}
		var b strings.Builder
		if _, err := io.Copy(&b, tr); err != nil {
			return "", true, err
		}
		return b.String(), true, nil
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// testRecycle: a recycled sandbox runs again with the new token only,
// with none of its processes and none of its files.
func testRecycle(t *testing.T, h Harness) {
	b := h.New(t, h.StateDir(t))
	ctx := ctxT(t)
	r, ok := b.(backend.Recycler)
	newToken := "conformance-recycled-" + string(sandbox.NewID())
	gate(t, b, h, "recycling", "Recycle", "backend.Recycler", backend.CapabilitiesFor(b, h.Template.Kind).Recycle, ok,
		func(id sandbox.ID) error { return r.Recycle(ctx, id, backend.RecycleRequest{AccessToken: newToken}) })

	oldToken := h.AccessToken
	if oldToken == "" {
		oldToken = "conformance-first-" + string(sandbox.NewID())
	}
	info := Create(t, b, sandbox.Spec{Template: h.Template, AccessToken: oldToken})
	c := Client(t, info, oldToken)
	Exec(t, c, "echo used > recycle-note")
	// A process still running when the sandbox is recycled, told by the
	// marker in its command line from a process that reuses its pid.
	marker := "MARKER-" + string(info.ID)
	lctx, stop := context.WithCancel(ctx)
	looped := make(chan struct{})
	go func() {
		defer close(looped)
		_, _ = ExecErr(lctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "echo $$ > loop-pid; while :; do sleep 1; done; : " + marker}})
	}()
	t.Cleanup(func() { stop(); <-looped })
	var pid string
	for deadline := time.Now().Add(30 * time.Second); pid == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the looping process never started")
		}
		pid = strings.TrimSpace(Exec(t, c, "cat loop-pid 2>/dev/null").Stdout)
	}
	// The check's own command line spells the marker with quotes in
	// between, so it cannot find itself.
	alive := `case "$(cat /proc/` + pid + `/cmdline 2>/dev/null)" in *MARK"ER-` + string(info.ID) + `"*) echo alive;; *) echo gone;; esac`
	if r := Exec(t, c, alive); r.Stdout != "alive\n" {
		t.Fatalf("the looping process (pid %s) is not found by its marker: %q", pid, r.Stdout)
	}

	if err := r.Recycle(ctx, info.ID, backend.RecycleRequest{}); err == nil {
		t.Fatal("recycle without a new access token succeeded")
	}
	if err := r.Recycle(ctx, "no-such-sandbox", backend.RecycleRequest{AccessToken: newToken}); !sandbox.IsNotFound(err) {
		t.Errorf("recycle unknown: %v, want not found", err)
	}
	if err := r.Recycle(ctx, info.ID, backend.RecycleRequest{AccessToken: newToken}); err != nil {
		t.Fatalf("recycle: %v", err)
	}
	got, err := b.Inspect(ctx, info.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("inspect recycled = %+v, %v", got, err)
	}
	if _, err := ExecErr(ctx, Client(t, got, oldToken), agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "true"}}); err == nil {
		t.Error("the previous access token still works after recycle")
	}
	nc := Client(t, got, newToken)
	if r := Exec(t, nc, alive+"; cat recycle-note 2>/dev/null || echo gone"); r.Stdout != "gone\ngone\n" {
		t.Fatalf("recycled sandbox (the looping process, the file) = %q, want both gone", r.Stdout)
	}
	select {
	case <-looped:
	case <-time.After(30 * time.Second):
		t.Fatal("the exec of a process killed by recycle did not end")
	}
}
