package agentscope

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/dataplane"
)

// The workspace copy (STORAGE_FOLDER, FILE_SYSTEM=local). Content comes
// from the sandbox and is untrusted: every host-side access goes through
// os.Root, so a symlink (or a race swapping a directory for one) cannot
// make the daemon read or write outside the two directories. Symlinks and
// special files are not copied.

// owner is who restored files in a mounted workspace belong to.
type owner struct{ uid, gid int }

// savingSuffix names a copy being written, next to the one it replaces.
const savingSuffix = ".saving"

// saveWorkspace copies r's workspace to its storage path, replacing the
// previous copy: from the mount directory on the host when there is one,
// else out of the running sandbox as a tar stream. The copy is written
// through the owner's storage area (storageRoot).
func (s *Server) saveWorkspace(ctx context.Context, r *record) error {
	area, rel, err := s.storageRoot(r)
	if err != nil {
		return err
	}
	defer area.Close()
	tmp := rel + savingSuffix
	if err := area.RemoveAll(tmp); err != nil {
		return err
	}
	if err := area.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	dst, err := area.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer dst.Close()
	if r.MountDir != "" {
		src, err := os.OpenRoot(r.MountDir)
		if err != nil {
			return err
		}
		defer src.Close()
		if err := copyTree(src, dst, nil); err != nil {
			return err
		}
	} else {
		dr, done, err := s.work(ctx, r)
		if err != nil {
			return err
		}
		defer done()
		if err := tarOut(ctx, dr, dst); err != nil {
			return err
		}
	}
	// Swap in the new copy only once it is complete.
	if err := area.RemoveAll(rel); err != nil {
		return err
	}
	if err := area.Rename(tmp, rel); err != nil {
		return err
	}
	if o := s.cfg.Objects; o != nil {
		// Into the bucket; on failure the copy stays here (a restore on
		// this replica finds it, the next release uploads it again).
		if err := o.upload(ctx, r, area, rel); err != nil {
			return err
		}
		return area.RemoveAll(rel)
	}
	return nil
}

// restoreWorkspace copies r's stored workspace (if any) into its
// workspace, overwriting files of the same name.
func (s *Server) restoreWorkspace(ctx context.Context, r *record) error {
	area, rel, err := s.storageRoot(r)
	if err != nil {
		return err
	}
	defer area.Close()
	if o := s.cfg.Objects; o != nil {
		done, err := o.stageFromBucket(ctx, r, area, rel)
		if err != nil {
			return err
		}
		defer done()
	}
	src, err := area.OpenRoot(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if r.MountDir != "" {
		dst, err := os.OpenRoot(r.MountDir)
		if err != nil {
			return err
		}
		defer dst.Close()
		// The backend gave the workspace directory to the sandbox user's
		// host id (each sandbox has its own); restored files get the same.
		st, err := dst.Stat(".")
		if err != nil {
			return err
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat workspace %s: no owner", r.MountDir)
		}
		return copyTree(src, dst, &owner{uid: int(sys.Uid), gid: int(sys.Gid)})
	}
	dr, done, err := s.work(ctx, r)
	if err != nil {
		return err
	}
	defer done()
	return tarIn(ctx, dr, src)
}

// copyTree copies regular files and directories from src to dst. With an
// owner, copies are given to it.
func copyTree(src, dst *os.Root, chown *owner) error {
	return fs.WalkDir(src.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := dst.Mkdir(p, info.Mode().Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(src, dst, p, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // symlinks, devices, sockets: not copied
		}
		if chown != nil {
			return dst.Lchown(p, chown.uid, chown.gid)
		}
		return nil
	})
}

func copyFile(src, dst *os.Root, p string, perm fs.FileMode) error {
	in, err := src.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// tarOut streams /workspace out of the sandbox (tar runs inside it) and
// unpacks the regular files and directories into dst.
func tarOut(ctx context.Context, dr *dataplane.Request, dst *os.Root) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := untar(pr, dst)
		if err == nil {
			// tar pads its output past the end-of-archive blocks.
			_, _ = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(err) // unblock the writer if we stopped early
		done <- err
	}()
	var stderr strings.Builder
	res, err := dr.Run(ctx, dataplane.StartOptions{Cmd: "tar", Args: []string{"-C", "/workspace", "-cf", "-", "."}},
		nil, pw, &limitWriter{w: &stderr, n: 4096})
	pw.Close()
	uerr := <-done
	if uerr != nil {
		return fmt.Errorf("unpack workspace: %w", uerr)
	}
	if err != nil {
		return fmt.Errorf("tar in sandbox: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("tar in sandbox: %s: %s", res.Status, stderr.String())
	}
	return nil
}

func untar(r io.Reader, dst *os.Root) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || name == ".." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := dst.MkdirAll(name, fs.FileMode(h.Mode).Perm()|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if dir := path.Dir(name); dir != "." {
				if err := dst.MkdirAll(dir, 0o700); err != nil {
					return err
				}
			}
			f, err := dst.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.Mode).Perm()|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// tarIn packs src's regular files and directories and unpacks them into
// the sandbox's /workspace (tar runs inside it, as the sandbox user).
func tarIn(ctx context.Context, dr *dataplane.Request, src *os.Root) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src)) }()
	var stderr strings.Builder
	res, err := dr.Run(ctx, dataplane.StartOptions{Cmd: "tar", Args: []string{"-C", "/workspace", "-xf", "-", "--no-same-owner"}},
		pr, nil, &limitWriter{w: &stderr, n: 4096})
	pr.Close()
	if err != nil {
		return fmt.Errorf("tar in sandbox: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("tar in sandbox: %s: %s", res.Status, stderr.String())
	}
	return nil
}

// limitWriter keeps the first n bytes and drops the rest.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// writeTar packs src's regular files and directories as a tar stream
// (names relative to src, no owners).
func writeTar(w io.Writer, src *os.Root) error {
	tw := tar.NewWriter(w)
	err := fs.WalkDir(src.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname, h.Uid, h.Gid = p, "", "", 0, 0
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := src.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
