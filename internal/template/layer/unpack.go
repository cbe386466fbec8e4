package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	copyChunk = 1 << 20 // read size, and how often ctx is checked
	holeBlock = 4096    // zero runs of this granularity become holes
)

// dirMeta is a directory's metadata, applied once every entry is in: a
// read-only directory must not block its children, and adding children
// would change its mtime.
type dirMeta struct {
	dev, ino     uint64 // the directory this was meant for
	uid, gid     int
	mode         uint32
	atime, mtime time.Time
}

type unpacker struct {
	ctx   context.Context
	root  int
	opts  Options
	stats Stats
	dirs  map[string]dirMeta
	buf   []byte
}

var zeroBlock [holeBlock]byte

func unpack(ctx context.Context, r io.Reader, dst string, opts Options) (Stats, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	root, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, fmt.Errorf("layer: open %s: %w", dst, err)
	}
	defer unix.Close(root)
	u := &unpacker{ctx: ctx, root: root, opts: opts, dirs: map[string]dirMeta{}}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return u.stats, fmt.Errorf("layer: unpack: %w", err)
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u.stats, fmt.Errorf("layer: read tar after %d entries: %w", u.stats.Entries, err)
		}
		if u.stats.Entries >= opts.MaxEntries {
			return u.stats, fmt.Errorf("layer: %w: more than %d entries", ErrLimit, opts.MaxEntries)
		}
		u.stats.Entries++
		if err := u.entry(hdr, tr); err != nil {
			return u.stats, fmt.Errorf("layer: entry %q: %w", hdr.Name, err)
		}
	}
	if err := u.finishDirs(); err != nil {
		return u.stats, fmt.Errorf("layer: %w", err)
	}
	return u.stats, nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	parts, err := splitName(hdr.Name)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: the layer root must be a directory", ErrInvalid)
		}
		return nil // dst's own metadata is the caller's
	}
	dir, base := parts[:len(parts)-1], parts[len(parts)-1]
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(dir, base, hdr)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// Devices would bypass the sandbox's device rules; a fifo has no
		// business in an image. Skipped, not fatal: real images have them.
		slog.Debug("layer: skipping special file", "name", hdr.Name, "type", string(hdr.Typeflag))
		return nil
	case tar.TypeXGlobalHeader:
		return nil // PAX global records: nothing we use
	default:
		return fmt.Errorf("%w: unsupported entry type %q", ErrInvalid, hdr.Typeflag)
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid >= math.MaxUint32 || hdr.Gid >= math.MaxUint32 {
		// (uid_t)-1 would mean "leave unchanged" to chown.
		return fmt.Errorf("%w: owner %d:%d out of range", ErrInvalid, hdr.Uid, hdr.Gid)
	}
	parent, err := u.openDir(dir)
	if err != nil {
		return err
	}
	defer u.closeDir(parent)
	switch hdr.Typeflag {
	case tar.TypeReg:
		return u.file(parent, base, hdr, r)
	case tar.TypeDir:
		return u.dir(parent, base, strings.Join(parts, "/"), hdr)
	case tar.TypeSymlink:
		return u.symlink(parent, base, hdr)
	default:
		return u.hardlink(parent, base, hdr)
	}
}

// openDir opens the directory at parts (root when empty), creating missing
// components (0755, root-owned, as other unpackers do for implied
// parents). A symlink on the way is followed inside dst only.
func (u *unpacker) openDir(parts []string) (int, error) {
	if len(parts) == 0 {
		return u.root, nil
	}
	fd, err := inRoot(u.root, strings.Join(parts, "/"), unix.O_RDONLY|unix.O_DIRECTORY)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, parentErr(strings.Join(parts, "/"), err)
	}
	cur := u.root
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		next, err := inRoot(u.root, prefix, unix.O_RDONLY|unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) {
			// EEXIST here is a dangling symlink: the retry reports it.
			if err := unix.Mkdirat(cur, parts[i], 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				u.closeDir(cur)
				return -1, fmt.Errorf("create parent %q: %w", prefix, err)
			}
			next, err = inRoot(u.root, prefix, unix.O_RDONLY|unix.O_DIRECTORY)
		}
		u.closeDir(cur)
		if err != nil {
			return -1, parentErr(prefix, err)
		}
		cur = next
	}
	return cur, nil
}

// parentErr blames the layer for a parent that is not a directory, a
// dangling symlink or a symlink loop.
func parentErr(path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: parent %q: %v", ErrInvalid, path, err)
	default:
		return fmt.Errorf("parent %q: %w", path, err)
	}
}

func (u *unpacker) closeDir(fd int) {
	if fd != u.root && fd >= 0 {
		unix.Close(fd)
	}
}

// clear makes room for a new entry at name: later entries win, whatever
// was there (a non-empty directory included) goes.
func (u *unpacker) clear(parent int, name string) error {
	if err := removeAt(parent, name); err != nil {
		return fmt.Errorf("replace existing: %w", err)
	}
	return nil
}

// whiteout turns ".wh.NAME" into overlayfs' 0/0 character device NAME and
// ".wh..wh..opq" into the opaque xattr on its directory.
func (u *unpacker) whiteout(dir []string, base string, hdr *tar.Header) error {
	if base != opaqueMarker && strings.HasPrefix(base, whiteoutMeta) {
		return nil // AUFS bookkeeping, meaningless here
	}
	parent, err := u.openDir(dir)
	if err != nil {
		return err
	}
	defer u.closeDir(parent)
	if base == opaqueMarker {
		if err := unix.Fsetxattr(parent, opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("mark opaque: %w", err)
		}
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("%w: whiteout of %q", ErrInvalid, name)
	}
	if err := u.clear(parent, name); err != nil {
		return err
	}
	if err := unix.Mknodat(parent, name, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("create whiteout: %w", err)
	}
	return setTimes(parent, name, hdr.AccessTime, hdr.ModTime)
}

func (u *unpacker) file(parent int, name string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return fmt.Errorf("%w: negative size", ErrInvalid)
	}
	if hdr.Size > u.opts.MaxBytes-u.stats.Bytes {
		return fmt.Errorf("%w: %d bytes of files would pass the limit of %d", ErrLimit, u.stats.Bytes+hdr.Size, u.opts.MaxBytes)
	}
	u.stats.Bytes += hdr.Size
	if err := u.clear(parent, name); err != nil {
		return err
	}
	fd, err := unix.Openat(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	err = u.write(f, r, hdr.Size)
	if err == nil {
		err = u.setMeta(fd, hdr, fileMode(hdr.Mode))
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return err
	}
	return setTimes(parent, name, hdr.AccessTime, hdr.ModTime)
}

// write copies size bytes of r into f, leaving holes where whole blocks
// are zero (how a sparse entry's holes read back from archive/tar, and
// what a zero-filled region costs nothing to keep as).
func (u *unpacker) write(f *os.File, r io.Reader, size int64) error {
	if u.buf == nil {
		u.buf = make([]byte, copyChunk)
	}
	var off int64
	for off < size {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		chunk := u.buf[:min(int64(len(u.buf)), size-off)]
		if _, err := io.ReadFull(r, chunk); err != nil {
			return fmt.Errorf("read content: %w", err)
		}
		if err := writeSparse(f, chunk, off); err != nil {
			return err
		}
		off += int64(len(chunk))
	}
	// The size of a file ending in a hole comes from the truncate.
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("set size: %w", err)
	}
	return nil
}

// writeSparse writes the non-zero block runs of chunk at off.
func writeSparse(f *os.File, chunk []byte, off int64) error {
	start := -1 // beginning of the pending data run
	for i := 0; i < len(chunk); i += holeBlock {
		blk := chunk[i:min(i+holeBlock, len(chunk))]
		zero := bytes.Equal(blk, zeroBlock[:len(blk)])
		if !zero && start < 0 {
			start = i
		}
		if zero && start >= 0 {
			if _, err := f.WriteAt(chunk[start:i], off+int64(start)); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			start = -1
		}
	}
	if start >= 0 {
		if _, err := f.WriteAt(chunk[start:], off+int64(start)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}

// setMeta applies owner, kept xattrs and then mode to an open file or
// directory (chown after content, mode after chown).
func (u *unpacker) setMeta(fd int, hdr *tar.Header, mode uint32) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := setXattrs(fd, hdr); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

func setXattrs(fd int, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattrPrefix)
		if !ok || !keepXattr(name) {
			continue
		}
		err := unix.Fsetxattr(fd, name, []byte(v), 0)
		if errors.Is(err, unix.ENOTSUP) {
			slog.Debug("layer: filesystem refuses user xattrs", "name", hdr.Name, "xattr", name)
			continue
		}
		if err != nil {
			return fmt.Errorf("set xattr %q: %w", name, err)
		}
	}
	return nil
}

// fileMode keeps permissions only: no setuid/setgid (a sandbox runs with
// no_new_privs, so they could only ever matter outside it), no sticky.
func fileMode(m int64) uint32 { return uint32(m) & 0o777 }

// dirMode also keeps sticky (/tmp-like directories need it).
func dirMode(m int64) uint32 { return uint32(m) & (0o777 | unix.S_ISVTX) }

func (u *unpacker) dir(parent int, name, path string, hdr *tar.Header) error {
	st, ok, err := lstatAt(parent, name)
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := u.clear(parent, name); err != nil {
			return err
		}
		if err := unix.Mkdirat(parent, name, 0o700); err != nil {
			return fmt.Errorf("mkdir: %w", err)
		}
	}
	fd, err := openChild(parent, name)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if err := setXattrs(fd, hdr); err != nil {
		return err
	}
	u.dirs[path] = dirMeta{
		dev: st.Dev, ino: st.Ino, uid: hdr.Uid, gid: hdr.Gid, mode: dirMode(hdr.Mode),
		atime: hdr.AccessTime, mtime: hdr.ModTime,
	}
	return nil
}

// finishDirs applies the deferred directory metadata, to the directory
// each was recorded for only (a later entry may have replaced it).
func (u *unpacker) finishDirs() error {
	for path, m := range u.dirs {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		parts := strings.Split(path, "/")
		parent, err := u.root, error(nil)
		if len(parts) > 1 {
			parent, err = inRoot(u.root, strings.Join(parts[:len(parts)-1], "/"), unix.O_RDONLY|unix.O_DIRECTORY)
		}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue // replaced since
		}
		if err != nil {
			return fmt.Errorf("directory %q: %w", path, err)
		}
		err = applyDir(parent, parts[len(parts)-1], m)
		u.closeDir(parent)
		if err != nil {
			return fmt.Errorf("directory %q: %w", path, err)
		}
	}
	return nil
}

func applyDir(parent int, name string, m dirMeta) error {
	fd, err := openChild(parent, name)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Dev != m.dev || st.Ino != m.ino {
		return nil
	}
	if err := unix.Fchown(fd, m.uid, m.gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, m.mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return setTimes(parent, name, m.atime, m.mtime)
}

func (u *unpacker) symlink(parent int, name string, hdr *tar.Header) error {
	t := hdr.Linkname
	if t == "" || len(t) >= maxPathLen || strings.IndexByte(t, 0) >= 0 {
		return fmt.Errorf("%w: symlink target %q", ErrInvalid, t)
	}
	if err := u.clear(parent, name); err != nil {
		return err
	}
	if err := unix.Symlinkat(t, parent, name); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if err := unix.Fchownat(parent, name, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	return setTimes(parent, name, hdr.AccessTime, hdr.ModTime)
}

// hardlink links name to an earlier regular file of this layer. The
// target is resolved like any entry (inside dst) and must already exist:
// a link to a later entry, a directory, a symlink or a device is refused.
func (u *unpacker) hardlink(parent int, name string, hdr *tar.Header) error {
	tparts, err := splitName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("link target: %w", err)
	}
	if len(tparts) == 0 {
		return fmt.Errorf("%w: link to the layer root", ErrInvalid)
	}
	tdir := u.root
	if len(tparts) > 1 {
		tdir, err = inRoot(u.root, strings.Join(tparts[:len(tparts)-1], "/"), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("link target %q: %w", hdr.Linkname, parentErr(strings.Join(tparts[:len(tparts)-1], "/"), err))
		}
		defer u.closeDir(tdir)
	}
	tname := tparts[len(tparts)-1]
	tst, ok, err := lstatAt(tdir, tname)
	if err != nil || !ok {
		return fmt.Errorf("%w: link target %q does not exist (yet)", ErrInvalid, hdr.Linkname)
	}
	if tst.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: link target %q is not a regular file", ErrInvalid, hdr.Linkname)
	}
	if st, ok, _ := lstatAt(parent, name); ok && st.Dev == tst.Dev && st.Ino == tst.Ino {
		return nil // already that file (a link to itself, or a repeat)
	}
	if err := u.clear(parent, name); err != nil {
		return err
	}
	if err := unix.Linkat(tdir, tname, parent, name, 0); err != nil {
		return fmt.Errorf("link: %w", err)
	}
	return nil
}
