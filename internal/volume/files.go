package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/units"
)

// The content API reaches a volume's files without a sandbox. Every path
// is resolved through an os.Root opened at the volume's root: '..' and
// symlinks (absolute or relative) cannot lead out of it — a symlink a
// sandbox planted is followed only while it stays inside. New files and
// directories belong to the sandbox user, as if a sandbox had written
// them.

// Entry describes a file of a volume.
type Entry struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"` // from the volume root, leading "/"
	Type    string    `json:"type"` // file, dir, symlink or other
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	UID     uint32    `json:"uid"`
	GID     uint32    `json:"gid"`
	ModTime time.Time `json:"mtime"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
}

// maxListEntries caps one listing.
const maxListEntries = 10000

// rel turns an API path ("/a/b", "a/b", "/") into os.Root's form.
func rel(p string) (string, error) {
	if strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", sandbox.Invalid("path", "invalid path")
	}
	c := path.Clean("/" + p)
	if c == "/" {
		return ".", nil
	}
	return c[1:], nil
}

func (s *Service) openRoot(ctx context.Context, owner, name string) (*os.Root, error) {
	v, err := s.Get(ctx, owner, name)
	if err != nil {
		return nil, err
	}
	dir, err := s.Path(ctx, v)
	if err != nil {
		return nil, err
	}
	return os.OpenRoot(dir)
}

// fileErr gives filesystem errors their class.
func fileErr(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return sandbox.Errorf(sandbox.ClassNotFound, "no such file or directory: %s", p)
	case errors.Is(err, fs.ErrExist):
		return sandbox.Errorf(sandbox.ClassConflict, "%s already exists", p)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return sandbox.Errorf(sandbox.ClassNoSpace, "the volume is full: %s", p)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTEMPTY):
		return sandbox.Errorf(sandbox.ClassInvalid, "%s: %v", p, err)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// os.Root's refusal of a path leading out of the volume (its
		// error has no sentinel), and the rest of what a path can be.
		return sandbox.Errorf(sandbox.ClassForbidden, "path %s cannot be reached inside the volume: %v", p, pe.Err)
	}
	return fmt.Errorf("volume file %s: %w", p, err)
}

func entryOf(p string, fi fs.FileInfo) Entry {
	e := Entry{Name: fi.Name(), Path: p, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime().UTC()}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
	default:
		e.Type = "other"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
	}
	if p == "/" {
		e.Name = "/"
	}
	return e
}

// Stat describes the file at p (a symlink itself, not its target).
func (s *Service) Stat(ctx context.Context, owner, name, p string) (Entry, error) {
	r, err := s.openRoot(ctx, owner, name)
	if err != nil {
		return Entry{}, err
	}
	defer r.Close()
	rp, err := rel(p)
	if err != nil {
		return Entry{}, err
	}
	fi, err := r.Lstat(rp)
	if err != nil {
		return Entry{}, fileErr(p, err)
	}
	e := entryOf(path.Clean("/"+p), fi)
	if e.Type == "symlink" {
		e.Target, _ = r.Readlink(rp)
	}
	return e, nil
}

// ListDir lists the directory at p.
func (s *Service) ListDir(ctx context.Context, owner, name, p string) ([]Entry, error) {
	r, err := s.openRoot(ctx, owner, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rp, err := rel(p)
	if err != nil {
		return nil, err
	}
	d, err := r.Open(rp)
	if err != nil {
		return nil, fileErr(p, err)
	}
	defer d.Close()
	infos, err := d.Readdir(maxListEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fileErr(p, err)
	}
	if len(infos) > maxListEntries {
		return nil, sandbox.Errorf(sandbox.ClassTooLarge, "%s has more than %d entries", p, maxListEntries)
	}
	base := path.Clean("/" + p)
	out := make([]Entry, 0, len(infos))
	for _, fi := range infos {
		e := entryOf(path.Join(base, fi.Name()), fi)
		if e.Type == "symlink" {
			e.Target, _ = r.Readlink(path.Join(rp, fi.Name()))
		}
		out = append(out, e)
	}
	return out, nil
}

// Open opens the regular file at p for reading; the caller closes it.
func (s *Service) Open(ctx context.Context, owner, name, p string) (*os.File, Entry, error) {
	r, err := s.openRoot(ctx, owner, name)
	if err != nil {
		return nil, Entry{}, err
	}
	defer r.Close()
	rp, err := rel(p)
	if err != nil {
		return nil, Entry{}, err
	}
	f, err := r.OpenFile(rp, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, Entry{}, fileErr(p, err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, Entry{}, sandbox.Errorf(sandbox.ClassInvalid, "%s is not a regular file", p)
	}
	return f, entryOf(path.Clean("/"+p), fi), nil
}

// Write stores r as the file at p (its parent directories made when
// missing), at most limit bytes (0: no limit). A write that fails
// leaves no partial file: it goes to a temporary file renamed into
// place.
func (s *Service) Write(ctx context.Context, owner, name, p string, data io.Reader, limit int64) (Entry, error) {
	r, err := s.openRoot(ctx, owner, name)
	if err != nil {
		return Entry{}, err
	}
	defer r.Close()
	rp, err := rel(p)
	if err != nil {
		return Entry{}, err
	}
	if rp == "." {
		return Entry{}, sandbox.Invalid("path", "a file path is required")
	}
	if dir := path.Dir(rp); dir != "." {
		if err := mkdirAllOwned(r, dir); err != nil {
			return Entry{}, fileErr(p, err)
		}
	}
	tmp := path.Join(path.Dir(rp), ".agentbox-upload-"+newID())
	f, err := r.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return Entry{}, fileErr(p, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = r.Remove(tmp)
		}
	}()
	src := data
	if limit > 0 {
		src = io.LimitReader(data, limit+1)
	}
	n, err := io.Copy(f, src)
	if err != nil {
		return Entry{}, fileErr(p, err)
	}
	if limit > 0 && n > limit {
		return Entry{}, sandbox.Errorf(sandbox.ClassTooLarge, "upload is over %s (MAX_UPLOAD_SIZE)", units.FormatBytes(limit))
	}
	if err := f.Sync(); err != nil {
		return Entry{}, fileErr(p, err)
	}
	if err := f.Chown(sandboxUser, sandboxUser); err != nil {
		return Entry{}, fileErr(p, err)
	}
	if err := f.Close(); err != nil {
		return Entry{}, fileErr(p, err)
	}
	if err := r.Rename(tmp, rp); err != nil {
		_ = r.Remove(tmp)
		ok = true
		return Entry{}, fileErr(p, err)
	}
	ok = true
	fi, err := r.Lstat(rp)
	if err != nil {
		return Entry{}, fileErr(p, err)
	}
	return entryOf(path.Clean("/"+p), fi), nil
}

// Mkdir makes the directory at p and its parents.
func (s *Service) Mkdir(ctx context.Context, owner, name, p string) error {
	r, err := s.openRoot(ctx, owner, name)
	if err != nil {
		return err
	}
	defer r.Close()
	rp, err := rel(p)
	if err != nil {
		return err
	}
	if rp == "." {
		return nil
	}
	return fileErr(p, mkdirAllOwned(r, rp))
}

// Remove deletes the file or directory tree at p (not the root).
func (s *Service) Remove(ctx context.Context, owner, name, p string) error {
	r, err := s.openRoot(ctx, owner, name)
	if err != nil {
		return err
	}
	defer r.Close()
	rp, err := rel(p)
	if err != nil {
		return err
	}
	if rp == "." {
		return sandbox.Invalid("path", "the volume's root cannot be removed (delete the volume)")
	}
	if _, err := r.Lstat(rp); err != nil {
		return fileErr(p, err)
	}
	return fileErr(p, r.RemoveAll(rp))
}
