package agentclient

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// FileType is the kind of a filesystem entry.
type FileType string

const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink" // a symlink whose target is missing
	FileTypeUnknown FileType = ""
)

// EntryInfo describes a file, directory or symlink in the sandbox.
type EntryInfo struct {
	Name        string
	Path        string // absolute
	Type        FileType
	Size        int64
	Mode        fs.FileMode // permission bits
	Permissions string      // "-rw-r--r--"
	Owner       string
	Group       string
	ModTime     time.Time
	// IsSymlink is set for symbolic links; Type then describes the target.
	IsSymlink     bool
	SymlinkTarget string
}

func entryFromProto(e *fspb.EntryInfo) EntryInfo {
	if e == nil {
		return EntryInfo{}
	}
	out := EntryInfo{
		Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(),
		Mode: fs.FileMode(e.GetMode()).Perm(), Permissions: e.GetPermissions(),
		Owner: e.GetOwner(), Group: e.GetGroup(),
		IsSymlink: e.GetIsSymlink(), SymlinkTarget: e.GetSymlinkTarget(),
	}
	if t := e.GetModifiedTime(); t != nil {
		out.ModTime = t.AsTime()
	}
	switch e.GetType() {
	case fspb.FileType_FILE_TYPE_FILE:
		out.Type = FileTypeFile
	case fspb.FileType_FILE_TYPE_DIRECTORY:
		out.Type = FileTypeDir
	case fspb.FileType_FILE_TYPE_SYMLINK:
		out.Type = FileTypeSymlink
	}
	return out
}

// Stat describes the entry at path (a final symlink is not followed).
func (c *Client) Stat(ctx context.Context, path, user string) (EntryInfo, error) {
	var resp fspb.StatResponse
	if err := c.unary(ctx, filesystemconnect.FilesystemStatProcedure, user, &fspb.StatRequest{Path: path}, &resp); err != nil {
		return EntryInfo{}, mapError("stat", err)
	}
	return entryFromProto(resp.GetEntry()), nil
}

// MakeDir creates a directory and its parents; ClassConflict if it exists.
func (c *Client) MakeDir(ctx context.Context, path, user string) (EntryInfo, error) {
	var resp fspb.MakeDirResponse
	if err := c.unary(ctx, filesystemconnect.FilesystemMakeDirProcedure, user, &fspb.MakeDirRequest{Path: path}, &resp); err != nil {
		return EntryInfo{}, mapError("make dir", err)
	}
	return entryFromProto(resp.GetEntry()), nil
}

// Move renames src to dst, creating dst's parent directory.
func (c *Client) Move(ctx context.Context, src, dst, user string) (EntryInfo, error) {
	var resp fspb.MoveResponse
	if err := c.unary(ctx, filesystemconnect.FilesystemMoveProcedure, user, &fspb.MoveRequest{Source: src, Destination: dst}, &resp); err != nil {
		return EntryInfo{}, mapError("move", err)
	}
	return entryFromProto(resp.GetEntry()), nil
}

// ListDir lists path down to depth levels (depth <= 1: direct children).
func (c *Client) ListDir(ctx context.Context, path, user string, depth int) ([]EntryInfo, error) {
	var resp fspb.ListDirResponse
	req := &fspb.ListDirRequest{Path: path, Depth: uint32(max(depth, 1))}
	if err := c.unary(ctx, filesystemconnect.FilesystemListDirProcedure, user, req, &resp); err != nil {
		return nil, mapError("list dir", err)
	}
	out := make([]EntryInfo, len(resp.GetEntries()))
	for i, e := range resp.GetEntries() {
		out[i] = entryFromProto(e)
	}
	return out, nil
}

// Remove deletes a file or a directory tree; ClassNotFound if missing.
func (c *Client) Remove(ctx context.Context, path, user string) error {
	err := c.unary(ctx, filesystemconnect.FilesystemRemoveProcedure, user, &fspb.RemoveRequest{Path: path}, &fspb.RemoveResponse{})
	return mapError("remove", err)
}

// FSOp is the kind of a filesystem change.
type FSOp string

const (
	OpCreate FSOp = "create"
	OpWrite  FSOp = "write"
	OpRemove FSOp = "remove"
	OpRename FSOp = "rename" // the name went away by a rename
	OpChmod  FSOp = "chmod"
)

// FSEvent is one change below a watched directory.
type FSEvent struct {
	Name  string // relative to the watched directory
	Op    FSOp
	Entry *EntryInfo // only with WatchOptions.IncludeEntry, when stat-able
}

// WatchOptions tunes WatchDir.
type WatchOptions struct {
	Recursive    bool
	IncludeEntry bool
}

// Watcher streams filesystem events. Use it from one goroutine.
type Watcher struct {
	stream *frameStream
}

// WatchDir starts watching path and returns once the watch is in place,
// so every change made after it returns is reported. ctx bounds the watch.
func (c *Client) WatchDir(ctx context.Context, path, user string, opts WatchOptions) (*Watcher, error) {
	msg := &fspb.WatchDirRequest{Path: path, Recursive: opts.Recursive, IncludeEntry: opts.IncludeEntry}
	fs, err := c.serverStream(ctx, filesystemconnect.FilesystemWatchDirProcedure, user, msg)
	if err != nil {
		return nil, mapError("watch dir", err)
	}
	var first fspb.WatchDirResponse
	if err := fs.recv(&first); err != nil {
		fs.close()
		return nil, mapError("watch dir", err)
	}
	if first.GetStart() == nil {
		fs.close()
		return nil, sandbox.Errorf(sandbox.ClassInternal, "agent watch dir: stream did not begin with a start event")
	}
	return &Watcher{stream: fs}, nil
}

// Next returns the next change, skipping keepalives.
func (w *Watcher) Next() (FSEvent, error) {
	for {
		var msg fspb.WatchDirResponse
		if err := w.stream.recv(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return FSEvent{}, io.EOF
			}
			return FSEvent{}, mapError("watch dir", err)
		}
		ev := msg.GetFilesystem()
		if ev == nil {
			continue
		}
		out := FSEvent{Name: ev.GetName()}
		switch ev.GetType() {
		case fspb.EventType_EVENT_TYPE_CREATE:
			out.Op = OpCreate
		case fspb.EventType_EVENT_TYPE_WRITE:
			out.Op = OpWrite
		case fspb.EventType_EVENT_TYPE_REMOVE:
			out.Op = OpRemove
		case fspb.EventType_EVENT_TYPE_RENAME:
			out.Op = OpRename
		case fspb.EventType_EVENT_TYPE_CHMOD:
			out.Op = OpChmod
		}
		if ev.Entry != nil {
			e := entryFromProto(ev.Entry)
			out.Entry = &e
		}
		return out, nil
	}
}

// Close stops the watch.
func (w *Watcher) Close() error { return w.stream.close() }
