package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ent is one tar entry of a test layer.
type ent struct {
	name   string
	typ    byte
	body   string
	link   string
	mode   int64
	uid    int
	gid    int
	mtime  time.Time
	atime  time.Time
	pax    map[string]string
	size   int64 // declared size when it must differ from len(body)
	format tar.Format
}

var testTime = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)

func reg(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent       { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func sym(name, to string) ent   { return ent{name: name, typ: tar.TypeSymlink, link: to, mode: 0o777} }
func hard(name, to string) ent  { return ent{name: name, typ: tar.TypeLink, link: to, mode: 0o644} }

func mkTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: e.mtime, AccessTime: e.atime, PAXRecords: e.pax, Format: e.format,
		}
		if e.typ == tar.TypeXGlobalHeader {
			h = &tar.Header{Typeflag: e.typ, PAXRecords: e.pax}
		}
		if h.ModTime.IsZero() && e.typ != tar.TypeXGlobalHeader {
			h.ModTime = testTime
		}
		if h.Format == tar.FormatUnknown {
			h.Format = tar.FormatPAX
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil && e.size == 0 {
				t.Fatalf("tar body %q: %v", e.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil && !bytes.Contains([]byte(err.Error()), []byte("missed writing")) {
		t.Fatalf("tar close: %v", err)
	}
	return buf.Bytes()
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown, mknod whiteouts, trusted xattrs)")
	}
}

// sandboxDirs gives an empty dst and, beside it, an "outside" directory
// with a sentinel file that no layer may touch.
func sandboxDirs(t testing.TB) (dst, outside string) {
	t.Helper()
	base := t.TempDir()
	dst, outside = filepath.Join(base, "dst"), filepath.Join(base, "outside")
	for _, d := range []string{dst, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "sentinel"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { chmodTree(dst) })
	return dst, outside
}

// chmodTree makes a tree removable by t.TempDir's cleanup (root does
// not need it, but a non-root run of the skip path might).
func chmodTree(root string) {
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}

// checkOutside fails unless outside holds exactly the untouched sentinel.
func checkOutside(t testing.TB, outside string) {
	t.Helper()
	names, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != "sentinel" {
		t.Fatalf("outside directory changed: %v", names)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(outside, "sentinel"), &st); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(outside, "sentinel"))
	if string(b) != "keep" || st.Nlink != 1 || st.Mode&0o7777 != 0o644 || st.Uid != 0 {
		t.Fatalf("sentinel changed: %q nlink %d mode %o uid %d", b, st.Nlink, st.Mode&0o7777, st.Uid)
	}
}

func unpackBytes(t testing.TB, data []byte, dst string, opts Options) (Stats, error) {
	t.Helper()
	return Unpack(context.Background(), bytes.NewReader(data), dst, opts)
}

// node is what tree comparisons look at.
type node struct {
	Type     string
	Mode     uint32 // permission, sticky, setuid/setgid bits
	UID, GID uint32
	Size     int64
	Sum      string // content hash of regular files
	Link     string
	Mtime    int64 // ns; dirs and files and symlinks
	Rdev     uint64
	Xattrs   string // sorted user.* and the opaque xattr
	Ino      uint64 // only to group hard links (see linkGroups)
}

func snapshot(t testing.TB, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Mtime: st.Mtim.Nano(), Ino: st.Ino}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n.Type = "dir"
		case unix.S_IFREG:
			n.Type, n.Size = "file", st.Size
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			n.Sum = hex.EncodeToString(s[:8])
		case unix.S_IFLNK:
			n.Type, n.Mode = "symlink", 0
			n.Link, _ = os.Readlink(p)
		case unix.S_IFCHR:
			n.Type, n.Rdev = "char", st.Rdev
		default:
			n.Type = "other"
		}
		if n.Type != "symlink" {
			n.Xattrs = xattrsOf(t, p)
		}
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return out
}

func xattrsOf(t testing.TB, p string) string {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		return ""
	}
	buf := make([]byte, sz)
	sz, _ = unix.Llistxattr(p, buf)
	var kv []string
	for _, k := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if !strings.HasPrefix(k, "user.") && k != opaqueXattr {
			continue
		}
		v := make([]byte, 1024)
		n, _ := unix.Lgetxattr(p, k, v)
		kv = append(kv, k+"="+string(v[:max(n, 0)]))
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// compareTrees reports every difference; ignoreDirMtime covers
// directories whose mtime the kernel sets (overlayfs merged views).
func compareTrees(t testing.TB, want, got map[string]node, ignoreDirMtime bool) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			t.Errorf("missing %s", p)
			continue
		}
		w.Ino, g.Ino = 0, 0
		if ignoreDirMtime && w.Type == "dir" {
			w.Mtime, g.Mtime = 0, 0
		}
		if w != g {
			t.Errorf("%s differs:\n want %+v\n  got %+v", p, w, g)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected %s", p)
		}
	}
}

// linkGroups lists the sets of paths sharing an inode (hard links).
func linkGroups(tree map[string]node) []string {
	by := map[uint64][]string{}
	for p, n := range tree {
		if n.Type == "file" {
			by[n.Ino] = append(by[n.Ino], p)
		}
	}
	var out []string
	for _, ps := range by {
		if len(ps) > 1 {
			sort.Strings(ps)
			out = append(out, strings.Join(ps, "+"))
		}
	}
	sort.Strings(out)
	return out
}
