package layer

import (
	"archive/tar"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// FuzzUnpack unpacks arbitrary bytes as a layer tar (image layers and
// snapshot uploads are outside bytes). Whatever the input: the directory
// beside dst is untouched (no "..", absolute path, symlink or hard link
// reaches out), the limits hold (entries, file bytes), and what is left in
// dst has no setuid/setgid bit and no device node other than a 0/0
// whiteout.
func FuzzUnpack(f *testing.F) {
	seeds := [][]ent{
		{dir("a"), reg("a/b", "hello"), sym("a/l", "b"), hard("a/h", "a/b")},
		{reg("../outside/sentinel", "pwned")},
		{reg("/etc/x", "abs")},
		{sym("s", "../outside"), reg("s/sentinel", "through a symlink")},
		{sym("s", "/"), reg("s/outside/sentinel", "through an absolute symlink")},
		{hard("h", "../outside/sentinel")},
		{reg("x", "1"), reg(".wh.x", ""), dir("d"), reg("d/.wh..wh..opq", "")},
		{{name: "suid", typ: tar.TypeReg, body: "x", mode: 0o6755}},
		{{name: "dev", typ: tar.TypeChar, mode: 0o644}},
		{{name: "big", typ: tar.TypeReg, body: "x", size: 1 << 40, mode: 0o644}},
		{reg(strings.Repeat("n", 300), "long name")},
		{dir("ro"), reg("ro/f", "x"), {name: "ro", typ: tar.TypeDir, mode: 0o500}},
	}
	for _, s := range seeds {
		f.Add(mkTar(f, s...))
	}
	f.Add([]byte("not a tar"))
	opts := Options{MaxBytes: 1 << 20, MaxEntries: 64}
	f.Fuzz(func(t *testing.T, data []byte) {
		requireRoot(t)
		dst, outside := sandboxDirs(t)
		st, err := unpackBytes(t, data, dst, opts)
		checkOutside(t, outside)
		if st.Entries > opts.MaxEntries || st.Bytes > opts.MaxBytes {
			t.Fatalf("limits passed: %+v (err %v)", st, err)
		}
		var total int64
		_ = filepath.WalkDir(dst, func(p string, d fs.DirEntry, werr error) error {
			if werr != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			m := info.Mode()
			if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Fatalf("%s kept %v", p, m)
			}
			if m&fs.ModeDevice != 0 || m&fs.ModeCharDevice != 0 {
				if sys, ok := info.Sys().(*syscall.Stat_t); !ok || sys.Rdev != 0 || m&fs.ModeCharDevice == 0 {
					t.Fatalf("%s is a device node %v", p, m)
				}
			}
			if m.IsRegular() {
				total += info.Size()
			}
			return nil
		})
		// Hard links count once in Stats but once per name here.
		if err == nil && total > opts.MaxBytes*int64(opts.MaxEntries) {
			t.Fatalf("%d bytes of files from a layer limited to %d", total, opts.MaxBytes)
		}
	})
}
