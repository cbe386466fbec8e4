package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
)

// The Filesystem RPCs of a confined request (see RootHeader): each
// resolves its paths under the roots and acts through the descriptors the
// resolution holds, all in one User.do.

func (s *Server) statConfined(u *User, conf *confinement, p string) (*fspb.EntryInfo, error) {
	abs, err := conf.abs(p)
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = conf.do(u, func(rs *rootSet) error {
		r, err := rs.resolve(abs, 0)
		if err != nil {
			return err
		}
		defer r.close()
		e, err = s.entryAt(rs, r.dir, r.dirReal, r.name, abs)
		return err
	})
	return e, err
}

func (s *Server) makeDirConfined(u *User, conf *confinement, p string) (*fspb.EntryInfo, error) {
	abs, err := conf.abs(p)
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = conf.do(u, func(rs *rootSet) error {
		r, err := rs.resolve(abs, makeParents)
		if err != nil {
			return err
		}
		defer r.close()
		fi, err := statAt(r.dir, r.name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := unix.Mkdirat(r.dir, r.name, 0o755); err != nil {
				return fsError(fmt.Sprintf("make directory %q", abs), err)
			}
		case err != nil:
			return fsError(fmt.Sprintf("stat %q", abs), err)
		case fi.IsDir():
			return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %q already exists", abs))
		case fi.Mode()&fs.ModeSymlink != 0:
			// As without confinement, what decides is where the link
			// leads, but only inside the roots.
			t, err := rs.follow(r)
			if err != nil {
				return err
			}
			defer t.close()
			tfi, err := statAt(t.dir, t.name)
			switch {
			case err != nil:
				return fsError(fmt.Sprintf("make directory %q", abs), unix.EEXIST)
			case tfi.IsDir():
				return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %q already exists", abs))
			}
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q exists and is not a directory", abs))
		default:
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q exists and is not a directory", abs))
		}
		e, err = s.entryAt(rs, r.dir, r.dirReal, r.name, abs)
		return err
	})
	return e, err
}

func (s *Server) moveConfined(u *User, conf *confinement, src, dst string) (*fspb.EntryInfo, error) {
	srcAbs, err := conf.abs(src)
	if err != nil {
		return nil, err
	}
	dstAbs, err := conf.abs(dst)
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = conf.do(u, func(rs *rootSet) error {
		from, err := rs.resolve(srcAbs, 0)
		if err != nil {
			return err
		}
		defer from.close()
		if _, err := statAt(from.dir, from.name); err != nil {
			return fsError(fmt.Sprintf("move source %q", srcAbs), err)
		}
		if from.isRoot() {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is a root of this request and cannot be moved", srcAbs))
		}
		to, err := rs.resolve(dstAbs, makeParents)
		if err != nil {
			return err
		}
		defer to.close()
		if to.isRoot() {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is a root of this request and cannot be replaced", dstAbs))
		}
		if err := unix.Renameat(from.dir, from.name, to.dir, to.name); err != nil {
			return fsError(fmt.Sprintf("move %q to %q", srcAbs, dstAbs), err)
		}
		e, err = s.entryAt(rs, to.dir, to.dirReal, to.name, dstAbs)
		return err
	})
	return e, err
}

func (s *Server) removeConfined(u *User, conf *confinement, p string) error {
	abs, err := conf.abs(p)
	if err != nil {
		return err
	}
	return conf.do(u, func(rs *rootSet) error {
		r, err := rs.resolve(abs, 0)
		if err != nil {
			return err
		}
		defer r.close()
		if _, err := statAt(r.dir, r.name); err != nil {
			return fsError(fmt.Sprintf("remove %q", abs), err)
		}
		if r.isRoot() {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is a root of this request and cannot be removed", abs))
		}
		if err := removeAt(r.dir, r.name); err != nil {
			return fsError(fmt.Sprintf("remove %q", abs), err)
		}
		return nil
	})
}

func (s *Server) listDirConfined(ctx context.Context, u *User, conf *confinement, p string, depth int) ([]*fspb.EntryInfo, error) {
	abs, err := conf.abs(p)
	if err != nil {
		return nil, err
	}
	var entries []*fspb.EntryInfo
	err = conf.do(u, func(rs *rootSet) error {
		r, err := rs.resolve(abs, followFinal)
		if err != nil {
			return err
		}
		defer r.close()
		if _, err := statAt(r.dir, r.name); err != nil {
			return fsError(fmt.Sprintf("list %q", abs), err)
		}
		d, err := openDirAt(r.dir, r.name, abs)
		if err != nil {
			return err
		}
		entries, err = s.listDirAt(ctx, rs, d, r.real(), abs, depth, nil)
		return err
	})
	return entries, err
}

// listDirAt is listDir on the open directory d (closed here), whose
// link-free path is real, listed as dir. Subdirectories are opened from
// d's descriptor without following links.
func (s *Server) listDirAt(ctx context.Context, rs *rootSet, d *os.File, real, dir string, depth int, out []*fspb.EntryInfo) ([]*fspb.EntryInfo, error) {
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return out, fsError(fmt.Sprintf("list %q", dir), err)
	}
	slices.Sort(names) // as os.ReadDir does without confinement
	fd := fdOf(d)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return out, connect.NewError(connect.CodeCanceled, err)
		}
		p := filepath.Join(dir, name)
		fi, err := statAt(fd, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return out, fsError(fmt.Sprintf("stat %q", p), err)
		}
		out = append(out, s.entryOfStat(rs, fd, real, name, p, fi))
		if depth > 1 && fi.IsDir() {
			sub, err := openDirAt(fd, name, p)
			if err == nil {
				out, err = s.listDirAt(ctx, rs, sub, filepath.Join(real, name), p, depth-1, out)
			}
			// Unreadable, vanished, or replaced by a link or a file
			// meanwhile: listed, not descended into.
			if err != nil && !skippableListError(err) {
				return out, err
			}
		}
	}
	return out, nil
}

func skippableListError(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodePermissionDenied, connect.CodeNotFound, connect.CodeInvalidArgument:
		return true
	}
	return false
}
