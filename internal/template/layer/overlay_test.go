package layer

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mountOverlay mounts an overlay at a new directory and unmounts it at
// cleanup (registered after the directories', so it runs first).
func mountOverlay(t *testing.T, opts string, flags uintptr) string {
	t.Helper()
	m := t.TempDir()
	if err := unix.Mount("overlay", m, "overlay", flags, opts); err != nil {
		if errors.Is(err, unix.ENODEV) {
			t.Skip("no overlayfs in this kernel")
		}
		t.Fatalf("mount overlay %s: %v", opts, err)
	}
	t.Cleanup(func() { unmount(t, m) })
	return m
}

func unmount(t *testing.T, m string) {
	if err := unix.Unmount(m, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		t.Errorf("unmount %s: %v", m, err)
	}
}

// Our mounts' options: no redirect_dir, no metacopy, no index.
const ovlOpts = ",redirect_dir=off,metacopy=off,index=off"

// A sandbox's changes, taken as Diff of its upper and applied as a second
// layer, give the merged view the sandbox saw.
func TestOverlayRoundTrip(t *testing.T) {
	requireRoot(t)
	base1 := mkTar(t,
		dir("etc/"), reg("etc/conf", "v1"), reg("etc/keep", "k"),
		dir("usr/"), dir("usr/bin/"), ent{name: "usr/bin/tool", typ: tar.TypeReg, body: "#!", mode: 0o755},
		dir("usr/lib/"), reg("usr/lib/a", "a"), reg("usr/lib/b", "b"), hard("usr/lib/b2", "usr/lib/b"),
		reg("rm-me", "x"),
		dir("replace-dir/"), dir("replace-dir/sub/"), reg("replace-dir/sub/f", "f"),
		dir("opaque-dir/"), reg("opaque-dir/old1", "1"), reg("opaque-dir/old2", "2"),
		dir("data/"), reg("data/old", "payload"),
		reg("file-to-dir", "f"),
		dir("dir-to-link/"), reg("dir-to-link/x", "x"),
	)
	l1 := t.TempDir()
	if _, err := unpackBytes(t, base1, l1, Options{}); err != nil {
		t.Fatal(err)
	}
	upper, work := t.TempDir(), t.TempDir()
	m := mountOverlay(t, "lowerdir="+l1+",upperdir="+upper+",workdir="+work+ovlOpts, 0)

	b := fsb{t, m}
	b.check(os.WriteFile(b.p("etc/conf"), []byte("version two"), 0o644))
	b.xattr("etc/conf", "user.origin", "sandbox")
	b.check(os.Chmod(b.p("usr/bin/tool"), 0o700))
	b.check(os.Chown(b.p("usr/lib/b"), 1000, 1000))
	b.check(os.Remove(b.p("rm-me")))
	b.check(os.Remove(b.p("usr/lib/a")))
	b.check(os.RemoveAll(b.p("replace-dir")))
	b.file("replace-dir", "now a file", 0o600, 1000, 1000)
	b.check(os.RemoveAll(b.p("opaque-dir")))
	b.dir("opaque-dir", 0o750, 0, 0)
	b.file("opaque-dir/fresh", "new", 0o644, 0, 0)
	b.dir("newdir/sub", 0o755, 1000, 1000)
	b.file("newdir/sub/file", "hello", 0o640, 1000, 1000)
	b.check(os.Link(b.p("newdir/sub/file"), b.p("newdir/hardlink")))
	b.symlink("newlink", "etc/conf", 0, 0)
	b.check(os.Rename(b.p("data/old"), b.p("data/renamed")))
	b.check(os.Remove(b.p("file-to-dir")))
	b.dir("file-to-dir", 0o755, 0, 0)
	b.file("file-to-dir/in", "in", 0o644, 0, 0)
	b.check(os.RemoveAll(b.p("dir-to-link")))
	b.symlink("dir-to-link", "usr", 0, 0)
	want := snapshot(t, m)
	wantLinks := linkGroups(want)
	unmount(t, m)

	data, err := diffBytes(t, upper, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list := strings.Join(tarList(t, data), "\n")
	for _, s := range []string{".wh.rm-me ", "usr/lib/.wh.a ", "opaque-dir/.wh..wh..opq ", "data/.wh.old "} {
		if !strings.Contains(list, s) {
			t.Errorf("diff lacks %q:\n%s", s, list)
		}
	}
	l2 := t.TempDir()
	if _, err := unpackBytes(t, data, l2, Options{}); err != nil {
		t.Fatal(err)
	}
	m2 := mountOverlay(t, "lowerdir="+l2+":"+l1+ovlOpts, unix.MS_RDONLY)
	got := snapshot(t, m2)
	compareTrees(t, want, got, false)
	if g := linkGroups(got); strings.Join(g, " ") != strings.Join(wantLinks, " ") {
		t.Errorf("hard links %v, want %v", g, wantLinks)
	}
	if _, ok := got["opaque-dir/old1"]; ok {
		t.Error("opaque dir let a lower entry through")
	}
}

// An upper written with redirect_dir=on (a lower directory renamed) cannot
// be expressed as a tar: Diff refuses it rather than lose the content.
func TestOverlayRedirectRefused(t *testing.T) {
	requireRoot(t)
	l1 := t.TempDir()
	if _, err := unpackBytes(t, mkTar(t, dir("d/"), reg("d/f", "x")), l1, Options{}); err != nil {
		t.Fatal(err)
	}
	upper, work := t.TempDir(), t.TempDir()
	m := mountOverlay(t, "lowerdir="+l1+",upperdir="+upper+",workdir="+work+",redirect_dir=on,index=off", 0)
	if err := os.Rename(filepath.Join(m, "d"), filepath.Join(m, "e")); err != nil {
		t.Skipf("rename with redirect_dir=on: %v", err)
	}
	unmount(t, m)
	_, err := diffBytes(t, upper, DiffOptions{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), redirectXattr) {
		t.Fatalf("err = %v", err)
	}
	if err := Diff(t.Context(), upper, &bytes.Buffer{}, DiffOptions{Exclude: []string{"e"}}); err != nil {
		t.Fatalf("excluded redirect still refused: %v", err)
	}
}
