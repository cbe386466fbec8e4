package native

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// newGVisorBackend is newTestBackend with runsc: sandboxes may ask for
// isolation gvisor.
func newGVisorBackend(t testing.TB, dir string) *Backend {
	t.Helper()
	testutil.RequireRoot(t)
	runsc := testutil.Runsc(t)
	b, err := New(Config{Root: dir, AgentPath: testutil.AgentBinary(t), RunscPath: runsc, RunscDebugDir: os.Getenv("AGENTBOX_RUNSC_DEBUG")})
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() {
		b.abandoned.Store(true)
		if err := b.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	return b
}

// TestGVisorConformance runs the conformance suite on gVisor sandboxes,
// skipping (each skip says why) only what Capabilities.GVisor declares.
func TestGVisorConformance(t *testing.T) {
	newB := func(t *testing.T, dir string) backend.Backend {
		return backendtest.AtIsolation(newGVisorBackend(t, dir), sandbox.IsolationGVisor)
	}
	abandon := func(b backend.Backend) { backendtest.Unwrap(b).(*Backend).abandoned.Store(true) }
	backendtest.Run(t, backendtest.Harness{
		New: newB, StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
		Template: sandbox.HostTemplate(), Abandon: abandon,
	})
	t.Run("DirTemplate", func(t *testing.T) {
		rootfs := hostLikeRootfs(t)
		backendtest.Run(t, backendtest.Harness{
			New: newB, StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
			Template: dirTemplate(rootfs), Abandon: abandon,
		})
	})
	t.Run("ImageTemplate", func(t *testing.T) {
		layers := imageLayers(t)
		backendtest.Run(t, backendtest.Harness{
			New: newB, StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
			Template: imageTemplate(layers, sandbox.ImageConfig{}), Abandon: abandon,
		})
	})
}

// TestGVisorSecurity runs the security checks every backend passes on a
// gVisor sandbox, with the native guarantees that hold there: no state
// path in mountinfo. (The agent's socket is in a directory of root's
// inside the sandbox, not passed as a descriptor: AgentSocketHidden is a
// guarantee of the container level only; TestGVisorAgentSocket checks
// what holds instead.)
func TestGVisorSecurity(t *testing.T) {
	dir := testutil.ShortTempDir(t)
	b := newGVisorBackend(t, dir)
	backendtest.RunSecurity(t, backendtest.Security{
		Backend:        backendtest.AtIsolation(b, sandbox.IsolationGVisor),
		Template:       sandbox.HostTemplate(),
		AgentInSandbox: agentPathInSandbox,
		StateDir:       dir,
	})
}

// TestGVisorKernel: a gVisor sandbox talks to gVisor's kernel, not the
// host's: another kernel release and version string (dmesg needs root,
// which the sandbox user is not), and a container sandbox of the same
// backend still sees the host's.
func TestGVisorKernel(t *testing.T) {
	b := newGVisorBackend(t, testutil.ShortTempDir(t))
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(host.Release[:])
	g := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Isolation: sandbox.IsolationGVisor})
	hostVersion, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	r := backendtest.Exec(t, backendtest.Client(t, g, ""), "uname -r; cat /proc/version")
	release, version, _ := strings.Cut(r.Stdout, "\n")
	if release == hostRelease {
		t.Errorf("uname -r in a gVisor sandbox = %q, the host's", release)
	}
	if version == string(hostVersion) || !strings.Contains(release, "gvisor") {
		t.Errorf("a gVisor sandbox's kernel is not gVisor's: release %q, /proc/version %q", release, version)
	}
	c := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	if got := strings.TrimSpace(backendtest.Exec(t, backendtest.Client(t, c, ""), "uname -r").Stdout); got != hostRelease {
		t.Errorf("uname -r in a container sandbox = %q, want the host's %q", got, hostRelease)
	}
	if info, _ := b.Inspect(ctxT(t), g.ID); info.Spec.Isolation != sandbox.IsolationGVisor {
		t.Errorf("Inspect: isolation %q, want gvisor", info.Spec.Isolation)
	}
}

// TestGVisorAgentSocket: the agent's socket of a gVisor sandbox is in a
// directory the sandbox user cannot enter, and the API refuses what the
// level cannot do with ClassUnavailable.
func TestGVisorAgentSocket(t *testing.T) {
	b := newGVisorBackend(t, testutil.ShortTempDir(t))
	g := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Isolation: sandbox.IsolationGVisor})
	r := backendtest.Exec(t, backendtest.Client(t, g, ""), "id -u; ls "+agentRunInSandbox+" 2>&1; echo x > "+agentRunInSandbox+"/f 2>&1; true")
	if !strings.HasPrefix(r.Stdout, "1000\n") || !strings.Contains(r.Stdout, "Permission denied") || strings.Contains(r.Stdout, agentSocketName) {
		t.Errorf("the sandbox user reaches the agent's socket directory: %q", r.Stdout)
	}
	ctx := ctxT(t)
	if err := b.Pause(ctx, g.ID); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("Pause of a gVisor sandbox: %v, want class %s", err, sandbox.ClassUnavailable)
	}
	if _, err := b.DialPort(ctx, g.ID, 80); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("DialPort of a gVisor sandbox: %v, want class %s", err, sandbox.ClassUnavailable)
	}
}

// TestGVisorUnavailable: without runsc, isolation gvisor is refused as
// invalid, and Capabilities lists the container level only.
func TestGVisorUnavailable(t *testing.T) {
	b := newTestBackend(t, testutil.ShortTempDir(t))
	if got := backend.Isolations(b.Capabilities()); len(got) != 1 || got[0] != sandbox.IsolationContainer {
		t.Errorf("isolation levels without runsc: %v", got)
	}
	_, err := b.Create(ctxT(t), sandbox.Spec{ID: sandbox.NewID(), Template: sandbox.HostTemplate(), Isolation: sandbox.IsolationGVisor})
	if sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("create at isolation gvisor without runsc: %v, want class %s", err, sandbox.ClassInvalid)
	}
}

// TestGVisorOrphanRemoved: a gVisor sandbox whose record is gone (a daemon
// that died mid-create) is killed and deleted by the next Recover: no
// runsc container, no sandbox process left.
func TestGVisorOrphanRemoved(t *testing.T) {
	dir := testutil.ShortTempDir(t)
	b1 := newGVisorBackend(t, dir)
	ctx := ctxT(t)
	id := sandbox.NewID()
	info, err := b1.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), Isolation: sandbox.IsolationGVisor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b1.Destroy(context.Background(), id) })
	b1.abandoned.Store(true)
	if err := os.Remove(newBoxPaths(b1.sbRoot, b1.diskRoot, id).record); err != nil {
		t.Fatal(err)
	}
	b2 := newGVisorBackend(t, dir)
	infos, err := b2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.ID == id {
			t.Fatalf("the orphan was recovered: %+v", in)
		}
	}
	if b2.runscKnows(ctx, string(id)) {
		t.Errorf("runsc still has the orphan %s", id)
	}
	if err := unix.Kill(info.Pid, 0); err == nil {
		t.Errorf("the orphan's runsc process %d still runs", info.Pid)
	}
}

// TestGVisorImageTemplate: an image template runs at isolation gvisor with
// its layers mounted as stored (no idmap: gVisor's kernel has no user
// namespace to map into) and the writable upper on the sandbox's disk.
// Inside, the layers merge as for a container and carry the image's ids;
// the sandbox user is uid 1000 and cannot write or take the image's
// root-owned files; on the host what it writes lands in its disk's upper
// layer owned by uid 1000, never by root, and never in a layer.
func TestGVisorImageTemplate(t *testing.T) {
	b := newGVisorBackend(t, testutil.ShortTempDir(t))
	layers := imageLayers(t)
	// As in the built-in templates, the image's user owns its home: the
	// sandbox user writes there through a copy-up of the layer's directory.
	if err := os.Lchown(filepath.Join(layers[0], "home", "user"), sandboxUID, sandboxGID); err != nil {
		t.Fatal(err)
	}
	tmpl := imageTemplate(layers, sandbox.ImageConfig{Env: []string{"IMG=image", "PATH=/usr/local/bin:/usr/bin:/bin"}, WorkingDir: "/srv/app"})
	a := backendtest.Create(t, b, sandbox.Spec{Template: tmpl, WritableRoot: true, Isolation: sandbox.IsolationGVisor})
	ca := backendtest.Client(t, a, "")
	r := backendtest.Exec(t, ca, `cat /etc/layer2 /etc/image-only; test -e /etc/deleted-me && echo deleted-me-visible; ls /opt/data; echo "$IMG"; pwd; id -u; cat /proc/sys/kernel/osrelease`)
	want := "from layer 2\nfrom the lower layer\nnew\nimage\n/srv/app\n1000\n"
	if !strings.HasPrefix(r.Stdout, want) || !strings.Contains(r.Stdout[len(want):], "gvisor") || r.Exit.ExitCode != 0 {
		t.Fatalf("gVisor image sandbox = %+v, want stdout %q and gVisor's kernel release", r, want)
	}
	r = backendtest.Exec(t, ca, `ls -nd /etc/layer2 /usr/share/owned-by /home/app | while read mode links uid gid rest; do echo "$uid:$gid"; done`)
	if r.Stdout != "0:0\n1001:1001\n1001:1001\n" {
		t.Fatalf("owners inside = %q (%s), want the image's ids as stored", r.Stdout, r.Stderr)
	}
	// The sandbox user is no one special to the image's root files.
	r = backendtest.Exec(t, ca, `echo x > /etc/layer2 2>/dev/null && echo wrote-layer2; echo x > /etc/new 2>/dev/null && echo wrote-etc; rm /etc/image-only 2>/dev/null && echo removed; `+
		`echo mine > "$HOME/f" && echo w > /workspace/w && mkdir -p "$HOME/d" && echo ok; chown 0:0 "$HOME/f" 2>/dev/null && echo chowned; true`)
	if r.Stdout != "ok\n" {
		t.Fatalf("writes as the sandbox user: %q (%s), want only its own home and /workspace written", r.Stdout, r.Stderr)
	}
	// On the host: the file is in the disk's upper layer, owned by uid 1000.
	b.mu.Lock()
	bx := b.boxes[a.ID]
	b.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Lstat(bx.diskPath("upper", "home", "user", "f"), &st); err != nil || st.Uid != sandboxUID || st.Gid != sandboxGID {
		t.Errorf("the sandbox's file on its disk: uid %d gid %d %v, want %d:%d", st.Uid, st.Gid, err, sandboxUID, sandboxGID)
	}
	if err := unix.Lstat(bx.diskPath("upper", "etc", "new"), &st); err == nil {
		t.Errorf("a write the sandbox user was refused reached the upper layer")
	}
	for _, l := range layers {
		if fileExists(filepath.Join(l, "home", "user", "f")) || fileExists(filepath.Join(l, "workspace", "w")) {
			t.Errorf("a sandbox write reached layer %s", l)
		}
	}
	if err := unix.Stat(filepath.Join(layers[0], "etc", "image-only"), &st); err != nil || st.Uid != 0 {
		t.Errorf("layer file owner changed: uid %d %v", st.Uid, err)
	}
	// Another sandbox of the template sees none of it.
	other := backendtest.Create(t, b, sandbox.Spec{Template: tmpl, WritableRoot: true, Isolation: sandbox.IsolationGVisor})
	r = backendtest.Exec(t, backendtest.Client(t, other, ""), `test -e "$HOME/f" && echo leaked; cat /etc/image-only; id -u`)
	if r.Stdout != "from the lower layer\n1000\n" {
		t.Errorf("second gVisor image sandbox = %q (%s)", r.Stdout, r.Stderr)
	}
	// No host path of a layer shows inside.
	r = backendtest.Exec(t, ca, `cat /proc/self/mountinfo`)
	for _, l := range layers {
		if strings.Contains(r.Stdout, l) {
			t.Errorf("mountinfo names layer %s:\n%s", l, r.Stdout)
		}
	}
}
