package builder

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestRootViewMergesLayersLikeOverlayfs reads a stack of real layer
// directories: upper files win, whiteouts hide, opaque directories hide
// the layers below, and host symlinks are never followed.
func TestRootViewMergesLayersLikeOverlayfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts (0/0 character devices) need root")
	}
	low, up := t.TempDir(), t.TempDir()
	mk := func(p, data string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(low, "etc/passwd"), "root:x:0:0::/:/bin/sh\nold:x:5:5::/:/bin/sh\n")
	mk(filepath.Join(low, "etc/group"), "root:x:0:\n")
	mk(filepath.Join(low, "opt/a"), "a")
	mk(filepath.Join(low, "gone"), "g")
	mk(filepath.Join(up, "etc/passwd"), "root:x:0:0::/:/bin/sh\nnew:x:9:9::/:/bin/sh\n")
	os.MkdirAll(filepath.Join(up, "opt"), 0o755)
	mk(filepath.Join(up, "opt/b"), "b")
	if err := unix.Mknod(filepath.Join(up, "gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	// A host symlink in a layer must not be followed out of it.
	os.Symlink("/etc", filepath.Join(up, "hostetc"))
	v := newRootView(sandbox.Template{Kind: sandbox.TemplateImage, Layers: []string{low, up}})

	if _, err := resolveChown(v, "new"); err != nil {
		t.Errorf("upper passwd: %v", err)
	}
	if _, err := resolveChown(v, "old"); err == nil {
		t.Errorf("lower passwd shadowed by upper should hide old")
	}
	if _, _, err := v.resolve("/gone", false); err == nil {
		t.Errorf("whiteout did not hide /gone")
	}
	opt, _, err := v.resolve("/opt", true)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := v.readDir(opt); len(got) != 2 {
		t.Errorf("merged /opt: %v", got)
	}
	if data, err := v.readFile("/hostetc/hostname", 1<<20); err == nil {
		t.Errorf("followed a symlink to the host: %q", data)
	}
	root, _ := v.rootEntry()
	if names, _ := v.readDir(root); len(names) != 3 { // etc, hostetc, opt; gone is whited out
		t.Errorf("root: %v", names)
	}
	// An opaque directory hides the lower one's entries.
	if err := unix.Lsetxattr(filepath.Join(up, "opt"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("trusted xattrs unsupported here: %v", err)
	}
	opt, _, _ = v.resolve("/opt", true)
	if got, _ := v.readDir(opt); len(got) != 1 || got[0] != "b" {
		t.Errorf("opaque /opt: %v", got)
	}
}
