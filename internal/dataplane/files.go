package dataplane

import (
	"context"
	"io"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/textedit"
)

// Entry describes a file, directory or symlink in a sandbox.
type Entry = agentclient.EntryInfo

// FileType is the kind of an Entry.
type FileType = agentclient.FileType

// Entry kinds.
const (
	FileTypeFile    = agentclient.FileTypeFile
	FileTypeDir     = agentclient.FileTypeDir
	FileTypeSymlink = agentclient.FileTypeSymlink
)

// FSOp is the kind of a filesystem change; FSEvent one change below a
// watched directory.
type (
	FSOp         = agentclient.FSOp
	FSEvent      = agentclient.FSEvent
	WatchOptions = agentclient.WatchOptions
	Watcher      = agentclient.Watcher
)

// Filesystem changes.
const (
	OpCreate = agentclient.OpCreate
	OpWrite  = agentclient.OpWrite
	OpRemove = agentclient.OpRemove
	OpRename = agentclient.OpRename
	OpChmod  = agentclient.OpChmod
)

// Edit is one edit of EditFile.
type Edit = textedit.Edit

// NoMatchError is an edit whose text EditFile did not find.
type NoMatchError = textedit.NoMatchError

// File operations act as user inside the sandbox (empty: the sandbox's
// user). Paths are absolute or relative: relative to the user's home, or
// to the first root of a confined request. Failures are *sandbox.Error
// values (ClassNotFound for a missing path).

// Stat describes the entry at path (a final symlink is not followed).
func (r *Request) Stat(ctx context.Context, path, user string) (Entry, error) {
	return r.client.Stat(ctx, path, user)
}

// List lists the directory at path down to depth levels.
func (r *Request) List(ctx context.Context, path, user string, depth int) ([]Entry, error) {
	return r.client.ListDir(ctx, path, user, depth)
}

// Read opens the file at path as a stream and gives its size (-1 when
// unknown). Nothing is buffered here; the caller closes the reader.
func (r *Request) Read(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	return r.client.Download(ctx, path, user)
}

// Write streams body into the file at path, creating its parents and
// replacing it atomically, and describes the new file.
func (r *Request) Write(ctx context.Context, path, user string, body io.Reader) (Entry, error) {
	return r.client.Upload(ctx, path, user, body)
}

// MakeDir creates a directory and its parents; ClassConflict if it
// exists.
func (r *Request) MakeDir(ctx context.Context, path, user string) (Entry, error) {
	return r.client.MakeDir(ctx, path, user)
}

// Move renames src to dst and describes dst.
func (r *Request) Move(ctx context.Context, src, dst, user string) (Entry, error) {
	return r.client.Move(ctx, src, dst, user)
}

// Remove deletes a file or a directory tree.
func (r *Request) Remove(ctx context.Context, path, user string) error {
	return r.client.Remove(ctx, path, user)
}

// Watch reports changes below the directory at path until ctx ends or the
// watcher is closed.
func (r *Request) Watch(ctx context.Context, path, user string, opts WatchOptions) (*Watcher, error) {
	return r.client.WatchDir(ctx, path, user, opts)
}

// EditFile applies edit_file's edits to the file at path in the sandbox
// (the agent does the work, under the sandbox's limits) and returns the
// diff, named diffName; with dryRun nothing is written. An edit whose
// text is not found is a *NoMatchError.
func (r *Request) EditFile(ctx context.Context, path, user string, edits []Edit, dryRun bool, diffName string) (string, error) {
	return r.client.EditFile(ctx, user, textedit.Request{Path: path, Edits: edits, DryRun: dryRun, DiffName: diffName})
}

// MaxEditAnswer bounds the answer of EditFile in the daemon's memory (the
// diff, JSON-escaped): reserve it before the call.
const MaxEditAnswer = agentclient.MaxEditAnswer
