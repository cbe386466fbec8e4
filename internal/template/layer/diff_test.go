package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fsb builds directory trees for Diff tests; every failure is fatal.
type fsb struct {
	t    testing.TB
	root string
}

func (b fsb) p(rel string) string { return filepath.Join(b.root, rel) }

func (b fsb) check(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
}

func (b fsb) dir(rel string, mode os.FileMode, uid, gid int) {
	b.t.Helper()
	b.check(os.MkdirAll(b.p(rel), 0o755))
	b.check(os.Chown(b.p(rel), uid, gid))
	b.check(unix.Chmod(b.p(rel), uint32(mode)))
}

func (b fsb) file(rel, body string, mode os.FileMode, uid, gid int) {
	b.t.Helper()
	b.check(os.WriteFile(b.p(rel), []byte(body), 0o600))
	b.check(os.Chown(b.p(rel), uid, gid))
	b.check(unix.Chmod(b.p(rel), uint32(mode)))
}

func (b fsb) symlink(rel, to string, uid, gid int) {
	b.t.Helper()
	b.check(os.Symlink(to, b.p(rel)))
	b.check(os.Lchown(b.p(rel), uid, gid))
}

func (b fsb) whiteout(rel string) {
	b.t.Helper()
	b.check(unix.Mknod(b.p(rel), unix.S_IFCHR, 0))
}

func (b fsb) xattr(rel, name, value string) {
	b.t.Helper()
	b.check(unix.Lsetxattr(b.p(rel), name, []byte(value), 0))
}

// touchAll sets every mtime to one instant, deepest first, so trees built
// in different orders look the same.
func (b fsb) touchAll(at time.Time) {
	b.t.Helper()
	var paths []string
	filepath.WalkDir(b.root, func(p string, d os.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	})
	ts := []unix.Timespec{timespec(at), timespec(at)}
	for i := len(paths) - 1; i >= 0; i-- {
		b.check(unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

func diffBytes(t testing.TB, upper string, opts DiffOptions) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := Diff(context.Background(), upper, &buf, opts)
	return buf.Bytes(), err
}

// tarList renders a tar's entries one a line, in order.
func tarList(t testing.TB, data []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var out []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		var x []string
		for k, v := range h.PAXRecords {
			if strings.HasPrefix(k, paxXattrPrefix) {
				x = append(x, strings.TrimPrefix(k, paxXattrPrefix)+"="+v)
			}
		}
		sort.Strings(x)
		if h.Uname != "" || h.Gname != "" || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: non-deterministic fields %+v", h.Name, h)
		}
		out = append(out, fmt.Sprintf("%s %c %o %d:%d %q %q %v", h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, body, h.Linkname, x))
	}
}

const base = 100000

// mkUpper builds a representative upper owned through a 100000 id base.
func mkUpper(t testing.TB, root string, reverse bool) {
	b := fsb{t, root}
	steps := []func(){
		func() {
			b.dir("etc", 0o755, base, base)
			b.file("etc/conf", "c", 0o644, base, base)
			b.xattr("etc/conf", "user.note", "n")
			b.xattr("etc/conf", "trusted.secret", "s")
		},
		func() {
			b.dir("home/user", 0o750, base+1000, base+1000)
			b.check(os.Chown(b.p("home"), base, base))
			b.file("home/user/suid", "s", 0o4755, base+1000, base+1000)
		},
		func() {
			b.dir("bin", 0o755, base, base)
			b.file("bin/a", "same", 0o755, base, base)
			b.check(os.Link(b.p("bin/a"), b.p("bin/b")))
			b.dir("z", 0o755, base, base)
			b.check(os.Link(b.p("bin/a"), b.p("z/c")))
			b.symlink("bin/sh", "busybox", base, base)
		},
		func() {
			b.whiteout("gone")
			b.dir("opq", 0o755, base, base)
			b.xattr("opq", opaqueXattr, "y")
			b.file("opq/new", "n", 0o644, base, base)
			b.dir("sticky", 0o1777, base, base)
		},
		func() {
			b.check(unix.Mkfifo(b.p("fifo"), 0o644))
			b.check(unix.Mknod(b.p("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
			b.dir("tmp/deep", 0o755, base, base)
			b.file("tmp/deep/x", "x", 0o644, 5, 5) // out of range, but excluded
			b.dir("workspace", 0o755, base+1000, base+1000)
		},
	}
	if reverse {
		for i := len(steps) - 1; i >= 0; i-- {
			steps[i]()
		}
	} else {
		for _, s := range steps {
			s()
		}
	}
	b.touchAll(testTime)
}

func TestDiffEntries(t *testing.T) {
	requireRoot(t)
	upper := t.TempDir()
	mkUpper(t, upper, false)
	data, err := diffBytes(t, upper, DiffOptions{UIDBase: base, GIDBase: base, Exclude: []string{"tmp", "./workspace/"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`bin/ 5 755 0:0 "" "" []`,
		`bin/a 0 755 0:0 "same" "" []`,
		`bin/b 1 755 0:0 "" "bin/a" []`,
		`bin/sh 2 777 0:0 "" "busybox" []`,
		`etc/ 5 755 0:0 "" "" []`,
		`etc/conf 0 644 0:0 "c" "" [user.note=n]`,
		`.wh.gone 0 0 0:0 "" "" []`,
		`home/ 5 755 0:0 "" "" []`,
		`home/user/ 5 750 1000:1000 "" "" []`,
		`home/user/suid 0 755 1000:1000 "s" "" []`,
		`opq/ 5 755 0:0 "" "" []`,
		`opq/.wh..wh..opq 0 0 0:0 "" "" []`,
		`opq/new 0 644 0:0 "n" "" []`,
		`sticky/ 5 1777 0:0 "" "" []`,
		`z/ 5 755 0:0 "" "" []`,
		`z/c 1 755 0:0 "" "bin/a" []`,
	}
	got := tarList(t, data)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if !h.ModTime.Equal(testTime) {
			t.Errorf("%s mtime %v", h.Name, h.ModTime)
		}
	}
}

// Identical uppers give identical tars, whatever order they were made in
// (the build cache keys on it).
func TestDiffDeterministic(t *testing.T) {
	requireRoot(t)
	a, b := t.TempDir(), t.TempDir()
	mkUpper(t, a, false)
	mkUpper(t, b, true)
	opts := DiffOptions{UIDBase: base, GIDBase: base, Exclude: []string{"tmp"}}
	da, err := diffBytes(t, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	db, err := diffBytes(t, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(da, db) {
		t.Fatalf("different tars:\n%v\n%v", tarList(t, da), tarList(t, db))
	}
}

func TestDiffOwnerOutOfRange(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct {
		uid, gid int
		want     string
	}{
		{5, base, "uid 5"},
		{base + 65536, base, "uid 165536"},
		{base, base - 1, "gid 99999"},
	} {
		upper := t.TempDir()
		b := fsb{t, upper}
		b.dir("d", 0o755, base, base)
		b.file("d/bad", "x", 0o644, c.uid, c.gid)
		_, err := diffBytes(t, upper, DiffOptions{UIDBase: base, GIDBase: base})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"d/bad"`) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d:%d: err = %v", c.uid, c.gid, err)
		}
	}
}

func TestDiffRefusesRedirectAndMetacopy(t *testing.T) {
	requireRoot(t)
	for _, x := range []string{redirectXattr, metacopyXattr} {
		upper := t.TempDir()
		b := fsb{t, upper}
		b.dir("d", 0o755, 0, 0)
		b.xattr("d", x, "y")
		if _, err := diffBytes(t, upper, DiffOptions{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), x) {
			t.Errorf("%s: err = %v", x, err)
		}
	}
}

func TestDiffBadExclude(t *testing.T) {
	for _, e := range []string{"../x", "/abs", ""} {
		if _, err := diffBytes(t, t.TempDir(), DiffOptions{Exclude: []string{e}}); err == nil {
			t.Errorf("exclude %q accepted", e)
		}
	}
}

func TestDiffContextCanceled(t *testing.T) {
	upper := t.TempDir()
	os.WriteFile(filepath.Join(upper, "f"), []byte("x"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Diff(ctx, upper, io.Discard, DiffOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// Unpack(Diff(upper)) gives back the upper: content, owners, modes,
// mtimes, user xattrs, whiteouts, opaque dirs and hard links.
func TestDiffUnpackRoundTrip(t *testing.T) {
	requireRoot(t)
	upper := t.TempDir()
	mkUpper(t, upper, false)
	data, err := diffBytes(t, upper, DiffOptions{UIDBase: base, GIDBase: base, Exclude: []string{"tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := sandboxDirs(t)
	if _, err := unpackBytes(t, data, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, upper)
	for p, n := range want {
		switch {
		case p == "fifo" || p == "null" || p == "tmp" || strings.HasPrefix(p, "tmp/"):
			delete(want, p) // left out by design
			continue
		case n.Type == "char": // whiteouts are created 0/0 by root anyway
		default:
			n.UID -= base
			n.GID -= base
		}
		n.Mode &^= unix.S_ISUID | unix.S_ISGID
		want[p] = n
	}
	got := snapshot(t, dst)
	compareTrees(t, want, got, false)
	if g, w := linkGroups(got), linkGroups(want); strings.Join(g, " ") != strings.Join(w, " ") {
		t.Errorf("hard links %v, want %v", g, w)
	}
}
