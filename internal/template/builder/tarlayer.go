package builder

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

// layerWriter writes a layer tar for COPY, ADD and WORKDIR on top of the
// stage's root filesystem view, and hashes what it writes (paths, modes,
// owners, link targets, contents — not times) for the step cache key.
type layerWriter struct {
	tw      *tar.Writer
	view    *rootView
	sum     hash.Hash
	written map[string]bool // rooted paths already in the tar
	entries int
	bytes   int64
	limits  copyLimits
}

// copyLimits bound one COPY/ADD layer.
type copyLimits struct {
	MaxEntries int
	MaxBytes   int64
}

func newLayerWriter(w io.Writer, view *rootView, lim copyLimits) *layerWriter {
	return &layerWriter{tw: tar.NewWriter(w), view: view, sum: sha256.New(), written: map[string]bool{}, limits: lim}
}

// digest is the content hash of everything written so far.
func (lw *layerWriter) digest() string { return hex.EncodeToString(lw.sum.Sum(nil)) }

func (lw *layerWriter) close() error { return lw.tw.Close() }

// fileMeta is what a tar entry says besides its name and content.
type fileMeta struct {
	mode   fs.FileMode // type and permission bits
	uid    int
	gid    int
	mtime  time.Time
	link   string // symlink target
	size   int64
	hardTo string // rooted path of an earlier entry (ADD archives)
}

// add writes one entry at the rooted path p, its parents first.
func (lw *layerWriter) add(p string, m fileMeta, content io.Reader) error {
	p = path.Clean("/" + p)
	if p == "/" {
		return nil
	}
	if err := lw.ensureParents(path.Dir(p)); err != nil {
		return err
	}
	lw.entries++
	if lw.limits.MaxEntries > 0 && lw.entries > lw.limits.MaxEntries {
		return fmt.Errorf("more than %d files", lw.limits.MaxEntries)
	}
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(p, "/"),
		Mode:    int64(unixPerm(m.mode)),
		Uid:     m.uid,
		Gid:     m.gid,
		ModTime: m.mtime,
		Format:  tar.FormatPAX,
	}
	switch {
	case m.hardTo != "":
		hdr.Typeflag, hdr.Linkname = tar.TypeLink, strings.TrimPrefix(m.hardTo, "/")
	case m.mode.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
	case m.mode&fs.ModeSymlink != 0:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, m.link
	case m.mode.IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, m.size
	default:
		return fmt.Errorf("%s: unsupported file type %v", p, m.mode.Type())
	}
	fmt.Fprintf(lw.sum, "%q %c %o %d %d %q %d\n", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Linkname, hdr.Size)
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	lw.written[p] = true
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	lw.bytes += m.size
	if lw.limits.MaxBytes > 0 && lw.bytes > lw.limits.MaxBytes {
		return fmt.Errorf("more than %d bytes", lw.limits.MaxBytes)
	}
	n, err := io.Copy(lw.tw, io.TeeReader(io.LimitReader(content, m.size), lw.sum))
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if n != m.size {
		return fmt.Errorf("%s: changed while being copied", p)
	}
	return nil
}

// ensureParents writes the directories above an entry. A directory the
// stage already has keeps its metadata (overlayfs shows the topmost
// layer's directory attributes, so writing it with defaults would change
// it); a missing one is created 0755 root, as Docker does.
func (lw *layerWriter) ensureParents(dir string) error {
	if dir == "/" || lw.written[dir] {
		return nil
	}
	if err := lw.ensureParents(path.Dir(dir)); err != nil {
		return err
	}
	m := fileMeta{mode: fs.ModeDir | 0o755, mtime: time.Unix(0, 0)}
	if e, _, err := lw.view.resolve(dir, false); err == nil {
		if !e.info.IsDir() {
			return fmt.Errorf("%s is not a directory in the image", dir)
		}
		m = metaOf(e.info)
	}
	return lw.add(dir, m, nil)
}

// metaOf converts host file info (of a layer or the context).
func metaOf(fi fs.FileInfo) fileMeta {
	m := fileMeta{mode: fi.Mode(), mtime: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		m.uid, m.gid = int(st.Uid), int(st.Gid)
	}
	if !fi.Mode().IsRegular() {
		m.size = 0
	}
	return m
}

// unixPerm maps Go's mode bits to the tar's (permissions plus setuid,
// setgid and sticky).
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// readLink reads a symlink of a source.
func readLink(n srcNode) (string, error) { return os.Readlink(n.host) }
