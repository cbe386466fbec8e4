package builder

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// copyOp is one COPY or ADD, expanded.
type copyOp struct {
	cmd     string // "COPY" or "ADD"
	sources []string
	dest    string // absolute
	src     source
	chown   *owner
	chmod   *fs.FileMode
	extract bool // ADD: unpack local tar archives
}

// parseChmod accepts Docker's octal --chmod.
func parseChmod(s string) (*fs.FileMode, error) {
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return nil, fmt.Errorf("invalid --chmod %q: want an octal mode such as 0755", s)
	}
	m := fs.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return &m, nil
}

// isRemote reports whether an ADD source is a URL or a git repository.
func isRemote(s string) bool {
	l := strings.ToLower(s)
	for _, p := range []string{"http://", "https://", "git@", "git://", "ssh://"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// writeCopy writes op's layer to lw.
func writeCopy(lw *layerWriter, op copyOp) error {
	var nodes []srcNode
	wildcard := false
	for _, s := range op.sources {
		if isRemote(s) {
			return fmt.Errorf("%s %s: remote sources are not supported; download in a RUN step (curl, wget, git) instead", op.cmd, s)
		}
		if hasWildcards(s) {
			wildcard = true
			m, err := glob(op.src, s)
			if err != nil {
				return err
			}
			nodes = append(nodes, m...)
			continue
		}
		n, err := op.src.lookup(s)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return fmt.Errorf("%s: no source files were specified (no match for %s)", op.cmd, strings.Join(op.sources, " "))
	}
	destIsDir := strings.HasSuffix(op.dest, "/")
	if (len(nodes) > 1 || (wildcard && len(op.sources) > 1)) && !destIsDir {
		if e, _, err := lw.view.resolve(op.dest, true); err != nil || !e.info.IsDir() {
			return fmt.Errorf("%s with more than one source file: the destination must be a directory and end with a /", op.cmd)
		}
	}
	dest, err := resolveDest(lw.view, op.dest)
	if err != nil {
		return err
	}
	if !destIsDir {
		if e, _, err := lw.view.resolve(dest, true); err == nil && e.info.IsDir() {
			destIsDir = true
		}
	}
	for _, n := range nodes {
		if err := copyNode(lw, op, n, dest, destIsDir); err != nil {
			return err
		}
	}
	return nil
}

func copyNode(lw *layerWriter, op copyOp, n srcNode, dest string, destIsDir bool) error {
	switch {
	case n.info.IsDir():
		return copyTree(lw, op, n, dest, true)
	case op.extract && n.info.Mode().IsRegular():
		done, err := extractArchive(lw, op, n, dest)
		if done || err != nil {
			return err
		}
	}
	target := dest
	if destIsDir {
		target = path.Join(dest, path.Base(n.rel))
	}
	return copyTree(lw, op, n, target, false)
}

// copyTree writes n at target; for a directory, its contents. The top
// directory of a COPY that already exists in the image keeps its
// metadata.
func copyTree(lw *layerWriter, op copyOp, n srcNode, target string, top bool) error {
	m := metaOf(n.info)
	if !n.owned {
		m.uid, m.gid = 0, 0
	}
	if op.chown != nil {
		m.uid, m.gid = op.chown.UID, op.chown.GID
	}
	if op.chmod != nil && m.mode&fs.ModeSymlink == 0 {
		m.mode = m.mode.Type() | *op.chmod
	}
	switch {
	case n.info.IsDir():
		if n.ignored {
			if ok, err := hasIncluded(op.src, n); !ok || err != nil {
				return err
			}
		}
		if top {
			if e, _, err := lw.view.resolve(target, false); err == nil && e.info.IsDir() && op.chown == nil && op.chmod == nil {
				m = metaOf(e.info)
			}
		}
		if err := lw.add(target, m, nil); err != nil {
			return err
		}
		kids, err := op.src.children(n)
		if err != nil {
			return fmt.Errorf("%s: %w", n.rel, err)
		}
		for _, k := range kids {
			if err := copyTree(lw, op, k, path.Join(target, path.Base(k.rel)), false); err != nil {
				return err
			}
		}
		return nil
	case n.info.Mode()&fs.ModeSymlink != 0:
		link, err := readLink(n)
		if err != nil {
			return err
		}
		m.link = link
		return lw.add(target, m, nil)
	case n.info.Mode().IsRegular():
		f, err := op.src.open(n)
		if err != nil {
			return fmt.Errorf("%s: %w", n.rel, err)
		}
		defer f.Close()
		return lw.add(target, m, f)
	default:
		// Sockets, fifos and devices in a context are not copied, as
		// BuildKit skips them.
		return nil
	}
}

// resolveDest resolves the existing part of dest in the view (following
// symlinks inside the image, e.g. /bin -> usr/bin on merged-/usr
// systems) and appends the part still to be created.
func resolveDest(v *rootView, dest string) (string, error) {
	parts := splitPath(dest)
	cur := "/"
	for i := range parts {
		next := path.Join(cur, parts[i])
		e, resolved, err := v.resolve(next, true)
		if errors.Is(err, fs.ErrNotExist) {
			return path.Join(append([]string{cur}, parts[i:]...)...), nil
		}
		if err != nil {
			return "", fmt.Errorf("destination %s: %w", dest, err)
		}
		if i < len(parts)-1 && !e.info.IsDir() {
			return "", fmt.Errorf("destination %s: %s is not a directory", dest, next)
		}
		cur = resolved
	}
	return cur, nil
}

// extractArchive unpacks a local tar archive (plain, gzip or bzip2) into
// dest for ADD. It returns false when n is not an archive.
func extractArchive(lw *layerWriter, op copyOp, n srcNode, dest string) (bool, error) {
	f, err := op.src.open(n)
	if err != nil {
		return false, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	magic, _ := br.Peek(6)
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return false, nil
		}
		defer zr.Close()
		r = zr
	case bytes.HasPrefix(magic, []byte("BZh")):
		r = bzip2.NewReader(br)
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}), bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return true, fmt.Errorf("ADD %s: xz and zstd archives are not supported; use a plain, gzip or bzip2 tar", n.rel)
	}
	head := bufio.NewReaderSize(r, 1024)
	block, _ := head.Peek(512)
	if len(block) < 512 {
		return false, nil
	}
	if _, err := tar.NewReader(bytes.NewReader(block)).Next(); err != nil {
		return false, nil
	}
	tr := tar.NewReader(head)
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return true, fmt.Errorf("ADD %s: %w", n.rel, err)
		}
		if err := addArchiveEntry(lw, op, hdr, tr, dest, seen); err != nil {
			return true, fmt.Errorf("ADD %s: %s: %w", n.rel, hdr.Name, err)
		}
	}
}

func addArchiveEntry(lw *layerWriter, op copyOp, hdr *tar.Header, r io.Reader, dest string, seen map[string]bool) error {
	name := path.Clean("/" + hdr.Name) // ".." cannot climb above dest
	if name == "/" {
		return nil
	}
	target := path.Join(dest, name)
	m := fileMeta{mode: fs.FileMode(hdr.Mode).Perm(), uid: hdr.Uid, gid: hdr.Gid, mtime: hdr.ModTime}
	if hdr.Mode&0o4000 != 0 {
		m.mode |= fs.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		m.mode |= fs.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		m.mode |= fs.ModeSticky
	}
	if op.chown != nil {
		m.uid, m.gid = op.chown.UID, op.chown.GID
	}
	if op.chmod != nil {
		m.mode = *op.chmod
	}
	if m.mtime.IsZero() {
		m.mtime = time.Unix(0, 0)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		m.mode |= fs.ModeDir
	case tar.TypeReg:
		m.size = hdr.Size
	case tar.TypeSymlink:
		m.mode |= fs.ModeSymlink
		m.link = hdr.Linkname
	case tar.TypeLink:
		to := path.Join(dest, path.Clean("/"+hdr.Linkname))
		if !seen[to] {
			return fmt.Errorf("hard link to %s, which is not an earlier file of the archive", hdr.Linkname)
		}
		m.hardTo = to
	default:
		return nil // devices, fifos: skipped as the store's unpacker would
	}
	seen[target] = true
	return lw.add(target, m, r)
}
