package native

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

func TestMain(m *testing.M) {
	SealSelf()
	if os.Getenv(crashChildEnv) != "" {
		crashChild() // never returns
	}
	if os.Getenv(rootlessChildEnv) != "" {
		rootlessChild() // never returns
	}
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// newTestBackend returns a native backend over dir, abandoned (not
// destroyed) at cleanup: tests destroy their own sandboxes.
func newTestBackend(t testing.TB, dir string) *Backend {
	t.Helper()
	testutil.RequireRoot(t)
	b, err := New(Config{Root: dir, AgentPath: testutil.AgentBinary(t)})
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

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		New:      func(t *testing.T, dir string) backend.Backend { return newTestBackend(t, dir) },
		StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
		Template: sandbox.HostTemplate(),
		Abandon:  func(b backend.Backend) { b.(*Backend).abandoned.Store(true) },
	})
	t.Run("DirTemplate", func(t *testing.T) {
		rootfs := hostLikeRootfs(t)
		backendtest.Run(t, backendtest.Harness{
			New:      func(t *testing.T, dir string) backend.Backend { return newTestBackend(t, dir) },
			StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
			Template: dirTemplate(rootfs),
			Abandon:  func(b backend.Backend) { b.(*Backend).abandoned.Store(true) },
		})
	})
}

// hostLikeRootfs builds a small unpacked root filesystem for dir: template
// tests: a handful of host binaries and the shared libraries they load,
// copied into a fresh tree (an overlay lower layer cannot contain mounts).
func hostLikeRootfs(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	rootfs := filepath.Join(testutil.ShortTempDir(t), "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := hostSkeleton(rootfs); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"sh", "dash", "cat", "id", "hostname", "ls", "sleep"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			t.Skipf("host lacks %s: %v", bin, err)
		}
		copyWithLibs(t, path, rootfs)
	}
	// A marker only this template has, to prove the sandbox runs on it.
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "template-marker"), []byte("dir-template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return rootfs
}

// copyWithLibs copies a host executable and the libraries ldd lists for it
// into rootfs at the same (resolved, /usr-merged) paths.
func copyWithLibs(t *testing.T, path, rootfs string) {
	t.Helper()
	files := []string{path}
	out, _ := exec.Command("ldd", path).Output()
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, dst := range []string{real, f} {
			dst = filepath.Join(rootfs, "usr", strings.TrimPrefix(strings.TrimPrefix(dst, "/usr"), "/"))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(real)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dirTemplate is the resolved dir template of rootfs.
func dirTemplate(rootfs string) sandbox.Template {
	return sandbox.Template{Ref: "test-dir", Kind: sandbox.TemplateDir, Dir: rootfs}
}
