package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
)

// fsService implements filesystem.Filesystem. Every operation runs with the
// permissions of the requested user (see User.do) and resolves relative
// paths against that user's home or, in a confined request, under the
// request's roots (see RootHeader).
type fsService struct {
	s *Server
}

var _ filesystemconnect.FilesystemHandler = (*fsService)(nil)

// scope resolves the request's user and its confinement (nil without
// RootHeader).
func (f *fsService) scope(h http.Header) (*User, *confinement, error) {
	u, err := f.s.requestUser(h, basicAuthUser(h))
	if err != nil {
		return nil, nil, err
	}
	conf, err := confinementOf(h)
	if err != nil {
		return nil, nil, err
	}
	return u, conf, nil
}

// Stat describes one entry.
func (f *fsService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	u, conf, err := f.scope(req.Header())
	if err != nil {
		return nil, err
	}
	if conf != nil {
		e, err := f.s.statConfined(u, conf, req.Msg.GetPath())
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
	}
	p, err := u.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	if err := u.do(func() (err error) { e, err = f.s.entryInfo(p); return err }); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its missing parents; already_exists if
// it is there already.
func (f *fsService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	u, conf, err := f.scope(req.Header())
	if err != nil {
		return nil, err
	}
	if conf != nil {
		e, err := f.s.makeDirConfined(u, conf, req.Msg.GetPath())
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&fspb.MakeDirResponse{Entry: e}), nil
	}
	p, err := u.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = u.do(func() error {
		if fi, err := os.Stat(p); err == nil {
			if fi.IsDir() {
				return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %q already exists", p))
			}
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q exists and is not a directory", p))
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fsError(fmt.Sprintf("make directory %q", p), err)
		}
		e, err = f.s.entryInfo(p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination, creating the destination's parent.
func (f *fsService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	u, conf, err := f.scope(req.Header())
	if err != nil {
		return nil, err
	}
	if conf != nil {
		e, err := f.s.moveConfined(u, conf, req.Msg.GetSource(), req.Msg.GetDestination())
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&fspb.MoveResponse{Entry: e}), nil
	}
	src, err := u.resolvePath(req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := u.resolvePath(req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = u.do(func() error {
		if _, err := os.Lstat(src); err != nil {
			return fsError(fmt.Sprintf("move source %q", src), err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fsError(fmt.Sprintf("create parent of %q", dst), err)
		}
		if err := os.Rename(src, dst); err != nil {
			return fsError(fmt.Sprintf("move %q to %q", src, dst), err)
		}
		e, err = f.s.entryInfo(dst)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: e}), nil
}

// Remove deletes a file, link or directory tree; not_found when missing,
// except in E2B's dialect, where removing what is not there succeeds (as
// envd's RemoveAll does).
func (f *fsService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	u, conf, err := f.scope(req.Header())
	if err != nil {
		return nil, err
	}
	if conf != nil {
		if err := f.s.removeConfined(u, conf, req.Msg.GetPath()); err != nil {
			return nil, err
		}
		return connect.NewResponse(&fspb.RemoveResponse{}), nil
	}
	p, err := u.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e2b := e2bDialect(req.Header())
	err = u.do(func() error {
		if _, err := os.Lstat(p); err != nil && !(e2b && errors.Is(err, fs.ErrNotExist)) {
			return fsError(fmt.Sprintf("remove %q", p), err)
		}
		if err := os.RemoveAll(p); err != nil {
			return fsError(fmt.Sprintf("remove %q", p), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// maxListDepth bounds ListDir recursion; deeper requests are clamped.
const maxListDepth = 64

// ListDir lists a directory (following the directory's own symlink) down
// to depth levels; depth 0 or 1 means direct children. Symlinked
// directories inside are listed but not descended into, and unreadable
// subdirectories are listed but skipped.
func (f *fsService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	depth := int(min(max(req.Msg.GetDepth(), 1), maxListDepth))
	u, conf, err := f.scope(req.Header())
	if err != nil {
		return nil, err
	}
	if conf != nil {
		entries, err := f.s.listDirConfined(ctx, u, conf, req.Msg.GetPath(), depth)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
	}
	p, err := u.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var entries []*fspb.EntryInfo
	err = u.do(func() error {
		fi, err := os.Stat(p)
		if err != nil {
			return fsError(fmt.Sprintf("list %q", p), err)
		}
		if !fi.IsDir() {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is not a directory", p))
		}
		entries, err = f.s.listDir(ctx, p, depth, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

func (s *Server) listDir(ctx context.Context, dir string, depth int, out []*fspb.EntryInfo) ([]*fspb.EntryInfo, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return out, fsError(fmt.Sprintf("list %q", dir), err)
	}
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return out, connect.NewError(connect.CodeCanceled, err)
		}
		p := filepath.Join(dir, de.Name())
		fi, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return out, fsError(fmt.Sprintf("stat %q", p), err)
		}
		out = append(out, s.entryFromInfo(p, fi))
		if depth > 1 && fi.IsDir() {
			out, err = s.listDir(ctx, p, depth-1, out)
			if err != nil && connect.CodeOf(err) != connect.CodePermissionDenied && connect.CodeOf(err) != connect.CodeNotFound {
				return out, err
			}
		}
	}
	return out, nil
}
