package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestUnpackTree(t *testing.T) {
	requireRoot(t)
	dst, outside := sandboxDirs(t)
	exe := reg("usr/bin/tool", "#!/bin/sh\n")
	exe.mode, exe.uid, exe.gid = 0o755, 0, 0
	owned := reg("home/user/notes", "hello")
	owned.uid, owned.gid, owned.mode = 1000, 1001, 0o600
	owned.pax = map[string]string{
		"SCHILY.xattr.user.comment":           "kept",
		"SCHILY.xattr.user.overlay.opaque":    "y",
		"SCHILY.xattr.trusted.overlay.opaque": "y",
		"SCHILY.xattr.security.capability":    "\x01\x00\x00\x02",
		"SCHILY.xattr.security.selinux":       "system_u:object_r:shadow_t:s0",
	}
	ro := dir("ro")
	ro.mode = 0o555
	home := dir("home/user")
	home.uid, home.gid, home.mode = 1000, 1001, 0o750
	data := ent{name: "./srv/data", typ: tar.TypeReg, body: "data", mode: 0o640, uid: 7, gid: 8}
	layer := mkTar(t,
		dir("./"), dir("usr/"), dir("usr/bin/"), exe, home, owned,
		sym("usr/bin/alias", "tool"), hard("usr/bin/tool2", "usr/bin/tool"),
		ro, reg("ro/inside", "x"), data,
	)
	st, err := unpackBytes(t, layer, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 11 || st.Bytes != int64(len("#!/bin/sh\n")+5+1+4) {
		t.Errorf("stats = %+v", st)
	}
	tree := snapshot(t, dst)
	ns := testTime.UnixNano()
	want := map[string]node{
		"usr":             {Type: "dir", Mode: 0o755, Mtime: ns},
		"usr/bin":         {Type: "dir", Mode: 0o755, Mtime: ns},
		"usr/bin/tool":    {Type: "file", Mode: 0o755, Size: 10, Mtime: ns},
		"usr/bin/tool2":   {Type: "file", Mode: 0o755, Size: 10, Mtime: ns},
		"usr/bin/alias":   {Type: "symlink", Link: "tool", Mtime: ns},
		"home":            {Type: "dir", Mode: 0o755}, // implied parent
		"home/user":       {Type: "dir", Mode: 0o750, UID: 1000, GID: 1001, Mtime: ns},
		"home/user/notes": {Type: "file", Mode: 0o600, UID: 1000, GID: 1001, Size: 5, Mtime: ns, Xattrs: "user.comment=kept"},
		"ro":              {Type: "dir", Mode: 0o555, Mtime: ns},
		"ro/inside":       {Type: "file", Mode: 0o644, Size: 1, Mtime: ns},
		"srv":             {Type: "dir", Mode: 0o755},
		"srv/data":        {Type: "file", Mode: 0o640, UID: 7, GID: 8, Size: 4, Mtime: ns},
	}
	for p, n := range want {
		g := tree[p]
		if n.Mtime == 0 {
			g.Mtime = 0
		}
		g.Sum, g.Ino = "", 0
		if g != n {
			t.Errorf("%s:\n want %+v\n  got %+v", p, n, g)
		}
	}
	if len(tree) != len(want) {
		t.Errorf("tree has %d entries, want %d", len(tree), len(want))
	}
	if g := linkGroups(tree); len(g) != 1 || g[0] != "usr/bin/tool+usr/bin/tool2" {
		t.Errorf("hard links = %v", g)
	}
	for _, x := range []string{opaqueXattr, "security.capability", "security.selinux"} {
		if _, err := unix.Lgetxattr(filepath.Join(dst, "home/user/notes"), x, make([]byte, 64)); err == nil {
			t.Errorf("xattr %s was kept", x)
		}
	}
	checkOutside(t, outside)
}

func TestUnpackRefuses(t *testing.T) {
	requireRoot(t)
	long := strings.Repeat("a", 256)
	deep := strings.Repeat("d/", 2100) + "f"
	cases := []struct {
		name string
		ents func(outside string) []ent
	}{
		{"dotdot", func(string) []ent { return []ent{reg("../escape", "x")} }},
		{"dotdot inside name", func(string) []ent { return []ent{dir("a/"), reg("a/../../escape", "x")} }},
		{"dotdot even when harmless", func(string) []ent { return []ent{reg("a/../b", "x")} }},
		{"absolute", func(o string) []ent { return []ent{reg(o+"/escape", "x")} }},
		{"absolute dir", func(string) []ent { return []ent{dir("/etc/")} }},
		{"hard link dotdot", func(string) []ent { return []ent{hard("l", "../outside/sentinel")} }},
		{"hard link absolute", func(o string) []ent { return []ent{hard("l", o+"/sentinel")} }},
		{"hard link through symlink out", func(o string) []ent {
			return []ent{sym("out", o), hard("l", "out/sentinel")}
		}},
		{"hard link through relative symlink out", func(string) []ent {
			return []ent{sym("out", "../../../../../outside"), hard("l", "out/sentinel")}
		}},
		{"hard link to missing", func(string) []ent { return []ent{hard("l", "nothing")} }},
		{"hard link to later entry", func(string) []ent { return []ent{hard("l", "later"), reg("later", "x")} }},
		{"hard link to dir", func(string) []ent { return []ent{dir("d/"), hard("l", "d")} }},
		{"hard link to symlink", func(o string) []ent { return []ent{sym("s", o+"/sentinel"), hard("l", "s")} }},
		{"hard link to whiteout", func(string) []ent { return []ent{reg(".wh.gone", ""), hard("l", "gone")} }},
		{"hard link to root", func(string) []ent { return []ent{hard("l", "./")} }},
		{"component too long", func(string) []ent { return []ent{reg(long, "x")} }},
		{"path too long", func(string) []ent { return []ent{reg(deep, "x")} }},
		{"parent is a file", func(string) []ent { return []ent{reg("f", "x"), reg("f/g", "y")} }},
		{"parent is a dangling symlink", func(string) []ent { return []ent{sym("lib", "usr/lib"), reg("lib/x", "y")} }},
		{"parent is a symlink loop", func(string) []ent { return []ent{sym("a", "b"), sym("b", "a"), reg("a/x", "y")} }},
		{"root as a file", func(string) []ent { return []ent{reg(".", "x")} }},
		{"through an absolute symlink to a host dir", func(o string) []ent { return []ent{sym("abs", o), reg("abs/pwned", "x")} }},
		{"dir through a symlink to a host dir", func(o string) []ent { return []ent{sym("abs", o), dir("abs/d/")} }},
		{"opaque marker through a symlink to a host dir", func(o string) []ent { return []ent{sym("opq", o), reg("opq/.wh..wh..opq", "")} }},
		{"whiteout through a symlink to a host dir", func(o string) []ent { return []ent{sym("wh", o), reg("wh/.wh.sentinel", "")} }},
		{"whiteout of dot", func(string) []ent { return []ent{reg("d/.wh..", "")} }},
		{"empty symlink", func(string) []ent { return []ent{sym("s", "")} }},
		{"negative owner", func(string) []ent { e := reg("f", "x"); e.uid = -1; return []ent{e} }},
		{"owner -1 as uint32", func(string) []ent { e := reg("f", "x"); e.uid = 1<<32 - 1; return []ent{e} }},
		{"unknown type", func(string) []ent { return []ent{{name: "c", typ: 'Z', mode: 0o644}} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst, outside := sandboxDirs(t)
			_, err := unpackBytes(t, mkTar(t, c.ents(outside)...), dst, Options{})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			checkOutside(t, outside)
		})
	}
}

func TestUnpackErrorNamesEntry(t *testing.T) {
	requireRoot(t)
	dst, _ := sandboxDirs(t)
	_, err := unpackBytes(t, mkTar(t, reg("ok", "x"), reg("../evil", "x")), dst, Options{})
	if err == nil || !strings.Contains(err.Error(), `"../evil"`) {
		t.Fatalf("err = %v, want it to name the entry", err)
	}
}

// Symlinks are created as they are and never followed out of dst: an
// entry under one resolves inside dst, and an entry at a symlink's own name
// replaces the symlink instead of writing through it.
func TestUnpackSymlinksStayInside(t *testing.T) {
	requireRoot(t)
	dst, outside := sandboxDirs(t)
	ro := dir("d/")
	ro.mode = 0o500
	layer := mkTar(t,
		dir("target/"),
		sym("abs", "/target"), reg("abs/pwned", "x"),
		sym("rel", "../../../../../../target"), reg("rel/pwned2", "y"),
		sym("file", filepath.Join(outside, "sentinel")), reg("file", "replaced"),
		sym("hl", filepath.Join(outside, "sentinel")), reg("hltarget", "t"), hard("hl", "hltarget"),
		sym("d", outside), ro, // a dir replacing a symlink: its mode must not reach outside
		sym("wh", outside), reg(".wh.wh", ""),
	)
	if _, err := unpackBytes(t, layer, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	checkOutside(t, outside)
	tree := snapshot(t, dst)
	// Resolved with dst as the root, the way the image sees it.
	if n := tree["target/pwned"]; n.Type != "file" {
		t.Errorf("abs/pwned not placed under dst: %v", tree)
	}
	if n := tree["abs"]; n.Type != "symlink" || n.Link != "/target" {
		t.Errorf("abs = %+v", n)
	}
	if n := tree["target/pwned2"]; n.Type != "file" {
		t.Errorf("rel/pwned2 not placed under dst")
	}
	if n := tree["file"]; n.Type != "file" || n.Size != int64(len("replaced")) {
		t.Errorf("file = %+v", n)
	}
	if n := tree["hl"]; n.Type != "file" {
		t.Errorf("hl = %+v", n)
	}
	if n := tree["d"]; n.Type != "dir" || n.Mode != 0o500 {
		t.Errorf("d = %+v", n)
	}
	if n := tree["wh"]; n.Type != "char" || n.Rdev != 0 {
		t.Errorf("wh = %+v", n)
	}
}

func TestUnpackSpecialFilesSkipped(t *testing.T) {
	requireRoot(t)
	dst, outside := sandboxDirs(t)
	layer := mkTar(t,
		ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		ent{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660},
		ent{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
		ent{name: "g", typ: tar.TypeXGlobalHeader, pax: map[string]string{"comment": "x"}},
		reg("kept", "k"),
	)
	st, err := unpackBytes(t, layer, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tree := snapshot(t, dst)
	if len(tree) != 1 || tree["kept"].Type != "file" || st.Entries != 5 {
		t.Fatalf("tree = %v, stats %+v", tree, st)
	}
	checkOutside(t, outside)
}

func TestUnpackModes(t *testing.T) {
	requireRoot(t)
	dst, _ := sandboxDirs(t)
	suid := reg("bin/su", "x")
	suid.mode = 0o4755 | 0o2000
	sticky := reg("sticky-file", "x")
	sticky.mode = 0o1644
	tmp := dir("tmp/")
	tmp.mode = 0o1777
	sgid := dir("shared/")
	sgid.mode = 0o2775
	locked := dir("locked/")
	locked.mode = 0o000
	wo := reg("locked/readonly-file", "x")
	wo.mode = 0o400
	layer := mkTar(t, suid, sticky, tmp, sgid, locked, wo, dir("locked/sub/"), reg("locked/sub/f", "y"))
	if _, err := unpackBytes(t, layer, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	tree := snapshot(t, dst)
	for p, m := range map[string]uint32{
		"bin/su": 0o755, "sticky-file": 0o644, "tmp": 0o1777, "shared": 0o775,
		"locked": 0o000, "locked/readonly-file": 0o400, "locked/sub/f": 0o644,
	} {
		if tree[p].Mode != m {
			t.Errorf("%s mode %o, want %o", p, tree[p].Mode, m)
		}
	}
}

func TestUnpackWhiteouts(t *testing.T) {
	requireRoot(t)
	dst, _ := sandboxDirs(t)
	layer := mkTar(t,
		reg(".wh.etc", ""), dir("usr/"), reg("usr/.wh.games", ""),
		reg("opq/.wh..wh..opq", ""), reg("opq/new", "n"),
		reg(".wh..wh.plnk", ""), dir(".wh..wh.aufs/"), // AUFS bookkeeping
		reg("later", "x"), reg(".wh.later", ""), // a whiteout replaces
	)
	if _, err := unpackBytes(t, layer, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	tree := snapshot(t, dst)
	for _, p := range []string{"etc", "usr/games", "later"} {
		if n := tree[p]; n.Type != "char" || n.Rdev != 0 || n.UID != 0 || n.GID != 0 {
			t.Errorf("%s = %+v, want a 0/0 whiteout", p, n)
		}
	}
	if n := tree["opq"]; n.Type != "dir" || n.Xattrs != opaqueXattr+"=y" {
		t.Errorf("opq = %+v", n)
	}
	for p := range tree {
		if strings.Contains(p, ".wh.") {
			t.Errorf("%s left in the tree", p)
		}
	}
}

func TestUnpackDuplicates(t *testing.T) {
	requireRoot(t)
	d2 := dir("d/")
	d2.mode, d2.uid = 0o700, 5
	cases := []struct {
		name  string
		ents  []ent
		check func(t *testing.T, dst string, tree map[string]node)
	}{
		{"file then file", []ent{reg("f", "one"), reg("f", "second")}, func(t *testing.T, dst string, tree map[string]node) {
			if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "second" {
				t.Errorf("f = %q", b)
			}
		}},
		{"file then dir", []ent{reg("f", "one"), dir("f/"), reg("f/in", "x")}, func(t *testing.T, dst string, tree map[string]node) {
			if tree["f"].Type != "dir" || tree["f/in"].Type != "file" {
				t.Errorf("tree = %v", tree)
			}
		}},
		{"non-empty dir then file", []ent{dir("d/"), dir("d/e/"), reg("d/e/f", "x"), reg("d", "file")}, func(t *testing.T, dst string, tree map[string]node) {
			if tree["d"].Type != "file" || len(tree) != 1 {
				t.Errorf("tree = %v", tree)
			}
		}},
		{"dir then dir keeps children, later metadata", []ent{dir("d/"), reg("d/f", "x"), d2}, func(t *testing.T, dst string, tree map[string]node) {
			if n := tree["d"]; n.Mode != 0o700 || n.UID != 5 || tree["d/f"].Type != "file" {
				t.Errorf("tree = %v", tree)
			}
		}},
		{"dir then symlink", []ent{dir("d/"), reg("d/f", "x"), sym("d", "elsewhere")}, func(t *testing.T, dst string, tree map[string]node) {
			if tree["d"].Type != "symlink" || len(tree) != 1 {
				t.Errorf("tree = %v", tree)
			}
		}},
		{"symlink then dir", []ent{sym("d", "/"), d2}, func(t *testing.T, dst string, tree map[string]node) {
			if tree["d"].Type != "dir" || tree["d"].Mode != 0o700 {
				t.Errorf("tree = %v", tree)
			}
		}},
		{"hard link keeps the replaced content", []ent{reg("a", "old"), hard("b", "a"), reg("a", "new")}, func(t *testing.T, dst string, tree map[string]node) {
			b, _ := os.ReadFile(filepath.Join(dst, "b"))
			a, _ := os.ReadFile(filepath.Join(dst, "a"))
			if string(a) != "new" || string(b) != "old" {
				t.Errorf("a=%q b=%q", a, b)
			}
		}},
		{"hard link to itself", []ent{reg("a", "x"), hard("a", "a")}, func(t *testing.T, dst string, tree map[string]node) {
			if tree["a"].Type != "file" {
				t.Errorf("tree = %v", tree)
			}
		}},
		{"file under a replaced dir", []ent{d2, reg("d", "f"), dir("d/"), reg("d/x", "x")}, func(t *testing.T, dst string, tree map[string]node) {
			// The first d's deferred 0700/uid 5 must not land on the new d.
			if n := tree["d"]; n.Type != "dir" || n.Mode != 0o755 || n.UID != 0 {
				t.Errorf("d = %+v", n)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst, outside := sandboxDirs(t)
			if _, err := unpackBytes(t, mkTar(t, c.ents...), dst, Options{}); err != nil {
				t.Fatal(err)
			}
			c.check(t, dst, snapshot(t, dst))
			checkOutside(t, outside)
		})
	}
}

func TestUnpackLimits(t *testing.T) {
	requireRoot(t)
	many := make([]ent, 101)
	for i := range many {
		many[i] = reg("f"+strings.Repeat("x", i), "")
	}
	cases := []struct {
		name string
		opts Options
		data []byte
	}{
		// A 1 TiB header with no content behind it: refused before reading.
		{"one huge file", Options{}, mkTar(t, ent{name: "huge", typ: tar.TypeReg, mode: 0o644, size: 1 << 40, body: "x"})},
		{"total across files", Options{MaxBytes: 10}, mkTar(t, reg("a", "123456"), reg("b", "123456"))},
		{"entries", Options{MaxEntries: 100}, mkTar(t, many...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst, _ := sandboxDirs(t)
			if _, err := unpackBytes(t, c.data, dst, c.opts); !errors.Is(err, ErrLimit) {
				t.Fatalf("err = %v, want ErrLimit", err)
			}
		})
	}
	t.Run("exactly at the limits", func(t *testing.T) {
		dst, _ := sandboxDirs(t)
		st, err := unpackBytes(t, mkTar(t, reg("a", "12345"), reg("b", "12345")), dst, Options{MaxBytes: 10, MaxEntries: 2})
		if err != nil || st.Bytes != 10 || st.Entries != 2 {
			t.Fatalf("stats %+v, err %v", st, err)
		}
	})
}

// A tar bomb: a small compressible stream that declares far more than it
// may unpack (many entries of zeros). It stops at the limit, having
// written no more than the limit.
func TestUnpackTarBomb(t *testing.T) {
	requireRoot(t)
	dst, _ := sandboxDirs(t)
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		zero := make([]byte, 1<<20)
		for i := range 1000 { // would be 1000 MiB
			if err := tw.WriteHeader(&tar.Header{Name: "bomb/" + strings.Repeat("z", 1+i%200) + string(rune('a'+i%26)), Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 20}); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := tw.Write(zero); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	st, err := Unpack(context.Background(), pr, dst, Options{MaxBytes: 32 << 20})
	pr.CloseWithError(errors.New("done"))
	if !errors.Is(err, ErrLimit) || st.Bytes > 32<<20 {
		t.Fatalf("stats %+v, err %v", st, err)
	}
}

// Holes are written as holes: GNU tar's PAX sparse format (what `tar -S`
// makes) of a 1 GiB file holding 8 KiB of data.
func TestUnpackSparse(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("needs GNU tar to make a sparse archive")
	}
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte("a"), 4096), 0)
	f.WriteAt(bytes.Repeat([]byte("b"), 4096), 512<<20)
	f.Truncate(1 << 30)
	f.Close()
	archive := filepath.Join(t.TempDir(), "sparse.tar")
	if out, err := exec.Command("tar", "-S", "--format=pax", "-C", src, "-cf", archive, "sparse").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 1<<20 {
		t.Fatalf("archive is %d bytes: not sparse", len(data))
	}
	dst, _ := sandboxDirs(t)
	if _, err := unpackBytes(t, data, dst, Options{MaxBytes: 1<<30 - 1}); !errors.Is(err, ErrLimit) {
		t.Fatalf("apparent size must count: err = %v", err)
	}
	dst, _ = sandboxDirs(t)
	st, err := unpackBytes(t, data, dst, Options{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var fs unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "sparse"), &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Size != 1<<30 || st.Bytes != 1<<30 || fs.Blocks*512 > 1<<20 {
		t.Fatalf("size %d, stats %+v, allocated %d bytes", fs.Size, st, fs.Blocks*512)
	}
	g, _ := os.Open(filepath.Join(dst, "sparse"))
	defer g.Close()
	b := make([]byte, 4096)
	g.ReadAt(b, 512<<20)
	if !bytes.Equal(b, bytes.Repeat([]byte("b"), 4096)) {
		t.Fatal("data after the hole differs")
	}
}

func TestUnpackLongNames(t *testing.T) {
	requireRoot(t)
	name := strings.Repeat("n", 200) + "/" + strings.Repeat("m", 255)
	for _, format := range []tar.Format{tar.FormatPAX, tar.FormatGNU} {
		t.Run(format.String(), func(t *testing.T) {
			dst, _ := sandboxDirs(t)
			e := reg(name, "long")
			e.format = format
			l := sym("link", strings.Repeat("t/", 300))
			l.format = format
			if _, err := unpackBytes(t, mkTar(t, e, l), dst, Options{}); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != "long" {
				t.Fatalf("read %q: %v", b, err)
			}
			if got, _ := os.Readlink(filepath.Join(dst, "link")); got != strings.Repeat("t/", 300) {
				t.Fatalf("link = %q", got)
			}
		})
	}
}

func TestUnpackTruncated(t *testing.T) {
	requireRoot(t)
	dst, _ := sandboxDirs(t)
	data := mkTar(t, reg("f", strings.Repeat("x", 5000)))
	if _, err := unpackBytes(t, data[:2048], dst, Options{}); err == nil {
		t.Fatal("truncated layer accepted")
	}
}

func TestUnpackContextCanceled(t *testing.T) {
	requireRoot(t)
	dst, _ := sandboxDirs(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Unpack(ctx, bytes.NewReader(mkTar(t, reg("f", "x"))), dst, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// Canceled in the middle of a large file.
	dst, _ = sandboxDirs(t)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	data := mkTar(t, reg("big", strings.Repeat("x", 8<<20)))
	r := &cancelAfter{r: bytes.NewReader(data), n: 3 << 20, cancel: cancel}
	if _, err := Unpack(ctx, r, dst, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

// Times: nanoseconds survive; atime comes from PAX when present.
func TestUnpackTimes(t *testing.T) {
	requireRoot(t)
	dst, _ := sandboxDirs(t)
	old := reg("old", "x")
	old.mtime = time.Date(1970, 1, 1, 0, 0, 1, 0, time.UTC)
	e := reg("f", "x")
	e.atime = time.Unix(1000000000, 5e8)
	if _, err := unpackBytes(t, mkTar(t, old, e), dst, Options{}); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Lstat(filepath.Join(dst, "f"), &st)
	if st.Mtim.Nano() != testTime.UnixNano() || st.Atim.Sec != 1000000000 || st.Atim.Nsec != 5e8 {
		t.Fatalf("mtime %v atime %v", st.Mtim, st.Atim)
	}
	unix.Lstat(filepath.Join(dst, "old"), &st)
	if st.Mtim.Sec != 1 {
		t.Fatalf("old mtime %v", st.Mtim)
	}
}
