package template

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// importRootfsTar imports a root filesystem tarball as a one-layer image.
func (s *Store) importRootfsTar(ctx context.Context, p, tmplName string, progress func(Progress)) (Info, error) {
	base := filepath.Base(p)
	r, err := s.rootfsName(tmplName, base)
	if err != nil {
		return Info{}, err
	}
	rc, err := openTar(p)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	defer rc.Close()
	return s.commitLayer(ctx, r, nil, rc, sandbox.ImageConfig{}, "rootfs-tar:"+base, progress, CommitOptions{})
}

// importRootfsDir imports a root filesystem directory as a one-layer
// image: the directory is streamed as a tar (symlinks as links, never
// followed) into the same hostile-input-safe unpacker as any layer.
func (s *Store) importRootfsDir(ctx context.Context, dir, tmplName string, progress func(Progress)) (Info, error) {
	base := filepath.Base(dir)
	r, err := s.rootfsName(tmplName, base)
	if err != nil {
		return Info{}, err
	}
	// The operator named this directory; only its own path is resolved.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	pr, pw := io.Pipe()
	var g errgroup.Group
	g.Go(func() error {
		err := writeDirTar(ctx, dir, pw)
		pw.CloseWithError(err)
		return err
	})
	info, err := s.commitLayer(ctx, r, nil, pr, sandbox.ImageConfig{}, "rootfs-dir:"+base, progress, CommitOptions{})
	pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if the reader stopped early
	if werr := g.Wait(); err == nil && werr != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, werr)
	}
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	return info, nil
}

func (s *Store) rootfsName(tmplName, base string) (ref, error) {
	if tmplName == "" {
		return ref{}, sandbox.Errorf(sandbox.ClassInvalid, "import %s: a root filesystem needs a template name", base)
	}
	return parseRef(tmplName)
}

// writeDirTar writes the tree under dir as a layer tar: owners and modes
// as they are, symlinks as symlinks, hard links within the tree as links,
// no devices, fifos or sockets. Files are opened with O_NOFOLLOW, so one
// swapped for a symlink during the walk fails instead of leaking its target.
func writeDirTar(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return writeEntry(tw, p, filepath.ToSlash(rel), fi, links)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, p, rel string, fi fs.FileInfo, links map[[2]uint64]string) error {
	mode := fi.Mode()
	if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
		return nil
	}
	target := ""
	if mode&fs.ModeSymlink != 0 {
		t, err := os.Readlink(p)
		if err != nil {
			return err
		}
		target = t
	}
	h, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	h.Name, h.Uname, h.Gname = rel, "", ""
	h.Format = tar.FormatPAX
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st != nil {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	if mode.IsDir() {
		h.Name += "/"
	}
	if mode.IsRegular() && st != nil && st.Nlink > 1 {
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if first, ok := links[key]; ok {
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			return tw.WriteHeader(h)
		}
		links[key] = rel
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if !mode.IsRegular() {
		return nil
	}
	// O_NONBLOCK: a fifo swapped in must not block the import.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if now, err := f.Stat(); err != nil || !now.Mode().IsRegular() || (st != nil && now.Sys().(*syscall.Stat_t).Ino != st.Ino) {
		return fmt.Errorf("%s: changed while it was imported", rel)
	}
	n, err := io.Copy(tw, io.LimitReader(f, h.Size))
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if n != h.Size {
		return fmt.Errorf("%s: changed while it was imported", rel)
	}
	return nil
}
