package layer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// idRange is how many ids a sandbox's user namespace maps.
const idRange = 65536

type devIno struct{ dev, ino uint64 }

type differ struct {
	ctx     context.Context
	tw      *tar.Writer
	opts    DiffOptions
	exclude map[string]bool
	links   map[devIno]string // first path of each multiply-linked file
	buf     []byte
}

func diff(ctx context.Context, upper string, w io.Writer, opts DiffOptions) error {
	d := &differ{ctx: ctx, tw: tar.NewWriter(w), opts: opts, exclude: map[string]bool{}, links: map[devIno]string{}}
	for _, e := range opts.Exclude {
		parts, err := splitName(e)
		if err != nil || len(parts) == 0 {
			return fmt.Errorf("layer: diff: exclude %q: invalid path", e)
		}
		d.exclude[strings.Join(parts, "/")] = true
	}
	root, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("layer: diff: open %s: %w", upper, err)
	}
	defer unix.Close(root)
	if err := d.walk(root, ""); err != nil {
		return fmt.Errorf("layer: diff: %w", err)
	}
	if err := d.tw.Close(); err != nil {
		return fmt.Errorf("layer: diff: finish tar: %w", err)
	}
	return nil
}

// walk writes dirfd's entries, sorted, each directory before its content.
func (d *differ) walk(dirfd int, rel string) error {
	names, err := readNames(dirfd)
	if err != nil {
		return fmt.Errorf("list %q: %w", rel, err)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		if d.exclude[p] {
			continue
		}
		if err := d.entry(dirfd, name, p); err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
	}
	return nil
}

func (d *differ) entry(dirfd int, name, p string) error {
	st, ok, err := lstatAt(dirfd, name)
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !ok {
		return errors.New("vanished while reading")
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			slog.Debug("layer: diff skips a device", "path", p)
			return nil
		}
		// A whiteout: overlayfs makes it with the mounter's ids, so it is
		// not shifted (and carries no owner in the layer).
		return d.tw.WriteHeader(d.header(whiteoutName(p), tar.TypeReg, 0, &st))
	case unix.S_IFDIR:
		return d.dir(dirfd, name, p)
	case unix.S_IFREG:
		return d.file(dirfd, name, p)
	case unix.S_IFLNK:
		return d.symlink(dirfd, name, p, &st)
	default:
		slog.Debug("layer: diff skips a fifo, socket or device", "path", p)
		return nil
	}
}

func whiteoutName(p string) string {
	i := strings.LastIndexByte(p, '/')
	return p[:i+1] + whiteoutPrefix + p[i+1:]
}

// header builds a deterministic header: no atime/ctime, no user or group
// names; PAX so nanosecond mtimes and xattrs survive.
func (d *differ) header(name string, typ byte, mode uint32, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name: name, Typeflag: typ, Mode: int64(mode),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec), Format: tar.FormatPAX,
	}
}

// owned sets hdr's owner from st, shifted back to the image's ids.
func (d *differ) owned(hdr *tar.Header, st *unix.Stat_t) error {
	uid, err := shift(st.Uid, d.opts.UIDBase, "uid")
	if err != nil {
		return err
	}
	gid, err := shift(st.Gid, d.opts.GIDBase, "gid")
	if err != nil {
		return err
	}
	hdr.Uid, hdr.Gid = uid, gid
	return nil
}

func shift(id, base uint32, what string) (int, error) {
	if id < base || uint64(id)-uint64(base) >= idRange {
		return 0, fmt.Errorf("%w: owned by host %s %d, outside the sandbox's range [%d, %d)",
			ErrInvalid, what, id, base, uint64(base)+idRange)
	}
	return int(id - base), nil
}

// mode keeps permissions and sticky; setuid/setgid are dropped as Unpack
// would drop them.
func mode(st *unix.Stat_t) uint32 { return st.Mode & (0o777 | unix.S_ISVTX) }

func (d *differ) dir(dirfd int, name, p string) error {
	fd, err := openChild(dirfd, name)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	x, err := readXattrs(fd)
	if err != nil {
		return err
	}
	hdr := d.header(p+"/", tar.TypeDir, mode(&st), &st)
	if err := d.owned(hdr, &st); err != nil {
		return err
	}
	hdr.PAXRecords = x.keep
	if err := d.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if x.opaque {
		if err := d.tw.WriteHeader(d.header(p+"/"+opaqueMarker, tar.TypeReg, 0, &st)); err != nil {
			return err
		}
	}
	return d.walk(fd, p)
}

func (d *differ) file(dirfd int, name, p string) error {
	// O_NONBLOCK: had the name been swapped for a fifo since the stat,
	// opening it must not hang; fstat below checks what was opened.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("changed type while reading")
	}
	x, err := readXattrs(fd)
	if err != nil {
		return err
	}
	// No sticky bit on files: Unpack drops it, so a layer that kept one
	// would not be what a Diff of its unpacked tree gives (the store
	// writes a snapshot's blob again that way at export).
	hdr := d.header(p, tar.TypeReg, mode(&st)&^unix.S_ISVTX, &st)
	if err := d.owned(hdr, &st); err != nil {
		return err
	}
	if st.Nlink > 1 {
		key := devIno{st.Dev, st.Ino}
		if first, ok := d.links[key]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return d.tw.WriteHeader(hdr)
		}
		d.links[key] = p
	}
	hdr.Size, hdr.PAXRecords = st.Size, x.keep
	if err := d.tw.WriteHeader(hdr); err != nil {
		return err
	}
	return d.copy(f, st.Size)
}

// copy writes exactly size bytes of f (a file that shrank while being read
// is an error: its tar entry would be a lie).
func (d *differ) copy(f *os.File, size int64) error {
	if d.buf == nil {
		d.buf = make([]byte, copyChunk)
	}
	for done := int64(0); done < size; {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		chunk := d.buf[:min(int64(len(d.buf)), size-done)]
		n, err := io.ReadFull(f, chunk)
		if err != nil {
			return fmt.Errorf("read (changed while reading?): %w", err)
		}
		if _, err := d.tw.Write(chunk[:n]); err != nil {
			return err
		}
		done += int64(n)
	}
	return nil
}

func (d *differ) symlink(dirfd int, name, p string, st *unix.Stat_t) error {
	buf := make([]byte, maxPathLen)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return fmt.Errorf("readlink: %w", err)
	}
	hdr := d.header(p, tar.TypeSymlink, 0o777, st)
	hdr.Linkname = string(buf[:n])
	if err := d.owned(hdr, st); err != nil {
		return err
	}
	return d.tw.WriteHeader(hdr)
}

type xattrs struct {
	keep   map[string]string // PAX records of the kept ones
	opaque bool
}

// readXattrs reads an open file's or directory's xattrs: user.* to keep,
// the opaque mark, and a refusal of redirect_dir/metacopy, which our
// mounts never enable and whose upper a tar could not express.
func readXattrs(fd int) (xattrs, error) {
	var x xattrs
	names, err := listXattrs(fd)
	if err != nil {
		return x, err
	}
	for _, n := range names {
		switch {
		case n == redirectXattr || n == metacopyXattr:
			return x, fmt.Errorf("%w: has %s (redirect_dir/metacopy uppers are not supported)", ErrInvalid, n)
		case n == opaqueXattr:
			v, err := getXattr(fd, n)
			if err != nil {
				return x, err
			}
			x.opaque = v == "y" // "x" (kernel 6.7+) marks xwhiteouts, not opacity
		case keepXattr(n):
			v, err := getXattr(fd, n)
			if err != nil {
				return x, err
			}
			if x.keep == nil {
				x.keep = map[string]string{}
			}
			x.keep[paxXattrPrefix+n] = v
		}
	}
	return x, nil
}

func listXattrs(fd int) ([]string, error) {
	for range 4 { // the list may grow between the two calls
		sz, err := unix.Flistxattr(fd, nil)
		if errors.Is(err, unix.ENOTSUP) || (err == nil && sz == 0) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs: %w", err)
		}
		buf := make([]byte, sz)
		sz, err = unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs: %w", err)
		}
		return strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00"), nil
	}
	return nil, fmt.Errorf("list xattrs: %w", unix.ERANGE)
}

func getXattr(fd int, name string) (string, error) {
	buf := make([]byte, 64<<10) // XATTR_SIZE_MAX
	n, err := unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return "", fmt.Errorf("get xattr %s: %w", name, err)
	}
	return string(buf[:n]), nil
}
