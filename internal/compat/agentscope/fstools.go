package agentscope

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// workspaceRoot is the one allowed directory of the filesystem tools and
// the root of the workspace routes.
const workspaceRoot = "/workspace"

// Limits of one filesystem tool call, beside the tool timeout
// (TOOL_TIMEOUT): the review of the first version read 16 copies of a
// 33 MB file into one 528 MB answer, and ran thousands of edits of it in
// the daemon.
const (
	// maxToolText bounds the text one call reads into its answer
	// (read_file, and read_multiple_files all files together).
	maxToolText = 16 << 20
	// maxReadPaths bounds the paths of one read_multiple_files.
	maxReadPaths = 256
	// listCost is what a recursive listing may hold while it is built:
	// the agent's answer (at most 16 MiB) decoded.
	listCost = 48 << 20
)

// fsTools are the MCP filesystem server's tools (names and argument
// schemas are the contract; descriptions are our own words).
var fsTools = []toolSpec{
	{Name: "read_file", Description: "Read the complete contents of a file as text. Paths are relative to /workspace or absolute inside it.",
		Parameters: object(map[string]any{"path": stringProp("")}, "path")},
	{Name: "read_multiple_files", Description: "Read several files at once; each result is prefixed with its path, and a file that cannot be read reports its error without failing the others.",
		Parameters: object(map[string]any{"paths": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, "paths")},
	{Name: "write_file", Description: "Create a file or replace its whole content with the given text.",
		Parameters: object(map[string]any{"path": stringProp(""), "content": stringProp("")}, "path", "content")},
	{Name: "edit_file", Description: "Apply line-based edits (replace oldText with newText, in order) to a text file and return a git-style diff of the change. With dryRun the diff is returned and the file is left unchanged.",
		Parameters: object(map[string]any{
			"path": stringProp(""),
			"edits": map[string]any{"type": "array", "items": object(map[string]any{
				"oldText": stringProp("Text to search for - must match exactly"),
				"newText": stringProp("Text to replace with"),
			}, "oldText", "newText")},
			"dryRun": map[string]any{"type": "boolean", "default": false, "description": "Preview changes using git-style diff format"},
		}, "path", "edits")},
	{Name: "create_directory", Description: "Create a directory, with its missing parents; an existing directory is not an error.",
		Parameters: object(map[string]any{"path": stringProp("")}, "path")},
	{Name: "list_directory", Description: "List a directory: one line per entry, prefixed [FILE] or [DIR].",
		Parameters: object(map[string]any{"path": stringProp("")}, "path")},
	{Name: "directory_tree", Description: "Return the recursive tree of a directory as JSON: entries with name, type (file or directory) and, for directories, children.",
		Parameters: object(map[string]any{"path": stringProp("")}, "path")},
	{Name: "move_file", Description: "Move or rename a file or directory.",
		Parameters: object(map[string]any{"source": stringProp(""), "destination": stringProp("")}, "source", "destination")},
	{Name: "search_files", Description: "Search a directory tree for files and directories whose name contains the pattern (case-insensitive), or whose path matches it when it is a glob such as **/*.py. excludePatterns are globs of paths to skip.",
		Parameters: object(map[string]any{
			"path": stringProp(""), "pattern": stringProp(""),
			"excludePatterns": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "default": []any{}},
		}, "path", "pattern")},
	{Name: "get_file_info", Description: "Return metadata of a file or directory: size, times, type and permissions.",
		Parameters: object(map[string]any{"path": stringProp("")}, "path")},
	{Name: "list_allowed_directories", Description: "List the directories these tools may access.",
		Parameters: object(map[string]any{})},
}

// fsCtx is one filesystem tool call.
type fsCtx struct {
	ctx context.Context
	dr  *dataplane.Request
	out *textOut // the answer, for the tools that read files into it
}

// runFSTool runs a filesystem tool; every failure is an error result,
// except a refusal of the request memory it needs, which is the
// request's (429).
func (s *Server) runFSTool(ctx context.Context, r *record, name string, args map[string]any) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ToolTimeout)
	defer cancel()
	dr, done, err := s.work(ctx, r)
	if err != nil {
		return toolError("%s", errorText(err)), nil
	}
	defer done()
	f := &fsCtx{ctx: ctx, dr: dr, out: &textOut{ctx: ctx}}
	text, err := f.run(name, args)
	if sandbox.ClassOf(err) == sandbox.ClassQuota {
		return nil, err
	}
	if err != nil {
		return toolError("%s", err.Error()), nil
	}
	// The answer's JSON encoding, before it is made.
	if err := reserve(ctx, jsonCost(text)); err != nil {
		return nil, err
	}
	return toolResult(false, textContent(text)), nil
}

func (f *fsCtx) run(name string, args map[string]any) (string, error) {
	if name == "list_allowed_directories" {
		return "Allowed directories:\n" + workspaceRoot, nil
	}
	if name == "read_multiple_files" {
		paths, err := argStrings(args, "paths", true)
		if err != nil {
			return "", err
		}
		if len(paths) > maxReadPaths {
			return "", fmt.Errorf("read_multiple_files reads at most %d paths in one call; %d given", maxReadPaths, len(paths))
		}
		return f.readMany(paths)
	}
	if name == "move_file" {
		src, err := toolPath(args, "source")
		if err != nil {
			return "", err
		}
		dst, err := toolPath(args, "destination")
		if err != nil {
			return "", err
		}
		if _, err := f.dr.Move(f.ctx, src, dst, ""); err != nil {
			return "", fsErr(err, "rename", src)
		}
		return fmt.Sprintf("Successfully moved %s to %s", args["source"], args["destination"]), nil
	}
	p, err := toolPath(args, "path")
	if err != nil {
		return "", err
	}
	switch name {
	case "read_file":
		if err := f.read(p); err != nil {
			return "", err
		}
		return f.out.String(), nil
	case "write_file":
		content, err := argString(args, "content")
		if err != nil {
			return "", err
		}
		if _, err := f.dr.Write(f.ctx, p, "", strings.NewReader(content)); err != nil {
			return "", fsErr(err, "open", p)
		}
		return fmt.Sprintf("Successfully wrote to %s", args["path"]), nil
	case "edit_file":
		return f.edit(p, args)
	case "create_directory":
		if _, err := f.dr.MakeDir(f.ctx, p, ""); err != nil && sandbox.ClassOf(err) != sandbox.ClassConflict {
			return "", fsErr(err, "mkdir", p)
		}
		return fmt.Sprintf("Successfully created directory %s", args["path"]), nil
	case "list_directory":
		return f.list(p)
	case "directory_tree":
		return f.tree(p)
	case "search_files":
		pattern, err := argString(args, "pattern")
		if err != nil {
			return "", err
		}
		excludes, err := argStrings(args, "excludePatterns", false)
		if err != nil {
			return "", err
		}
		return f.search(p, pattern, excludes)
	case "get_file_info":
		return f.info(p)
	}
	return "", errUnknownTool{name}
}

// toolPath reads a path argument and resolves it inside /workspace, with
// the MCP filesystem server's refusal text.
func toolPath(args map[string]any, name string) (string, error) {
	p, err := argString(args, name)
	if err != nil {
		return "", err
	}
	abs, ok := resolveWorkspacePath(p)
	if !ok {
		return "", fmt.Errorf("Access denied - path outside allowed directories: %s not in %s", abs, workspaceRoot) //nolint:staticcheck // exact text
	}
	return abs, nil
}

// resolveWorkspacePath makes p absolute (relative paths are relative to
// /workspace) and reports whether it stays inside /workspace.
func resolveWorkspacePath(p string) (string, bool) {
	abs := p
	if !path.IsAbs(abs) {
		abs = path.Join(workspaceRoot, abs)
	}
	abs = path.Clean(abs)
	return abs, abs == workspaceRoot || strings.HasPrefix(abs, workspaceRoot+"/")
}

// fsErr words an agent error like Node's fs errors, which clients of the
// MCP filesystem server see.
func fsErr(err error, syscall, p string) error {
	if errors.Is(err, dataplane.ErrOutsideRoot) {
		// The agent refused a symbolic link leading out of /workspace.
		return fmt.Errorf("Access denied - symlink target outside allowed directories: %s not in %s", p, workspaceRoot) //nolint:staticcheck // exact text
	}
	switch sandbox.ClassOf(err) {
	case sandbox.ClassNotFound:
		return fmt.Errorf("ENOENT: no such file or directory, %s '%s'", syscall, p)
	case sandbox.ClassConflict:
		return fmt.Errorf("EEXIST: file already exists, %s '%s'", syscall, p)
	case sandbox.ClassForbidden:
		return fmt.Errorf("EACCES: permission denied, %s '%s'", syscall, p)
	}
	return fmt.Errorf("%s '%s': %s", syscall, p, errorText(err))
}

// read appends the file at p to the answer, within what is left of
// maxToolText.
func (f *fsCtx) read(p string) error {
	st, err := f.dr.Stat(f.ctx, p, "")
	if err != nil {
		return fsErr(err, "open", p)
	}
	if st.Type == dataplane.FileTypeDir {
		return fmt.Errorf("EISDIR: illegal operation on a directory, read")
	}
	left := maxToolText - int64(f.out.Len())
	if st.Size > left {
		return f.tooLarge(p, st.Size)
	}
	rc, _, err := f.dr.Read(f.ctx, p, "")
	if err != nil {
		return fsErr(err, "open", p)
	}
	defer rc.Close()
	mark := f.out.Len()
	if err := f.out.grow(int(st.Size)); err != nil {
		return err
	}
	n, err := io.Copy(f.out, io.LimitReader(rc, left+1))
	if err != nil {
		f.out.truncate(mark)
		if sandbox.ClassOf(err) == sandbox.ClassQuota {
			return err
		}
		return fsErr(err, "read", p)
	}
	if n > left { // it grew since the stat
		f.out.truncate(mark)
		return f.tooLarge(p, n)
	}
	return nil
}

func (f *fsCtx) tooLarge(p string, size int64) error {
	return fmt.Errorf("file %s is %d bytes; one call returns at most %d MiB of file content (read fewer or smaller files, or parts of them with run_shell_command)", p, size, maxToolText>>20)
}

// readMany is read_multiple_files: each file prefixed with its path, the
// files separated by "---"; a file that cannot be read (or no longer
// fits the answer) reports its error without failing the others.
func (f *fsCtx) readMany(paths []string) (string, error) {
	for i, raw := range paths {
		if i > 0 {
			if err := f.out.writeString("\n---\n"); err != nil {
				return "", err
			}
		}
		abs, ok := resolveWorkspacePath(raw)
		var err error
		mark := f.out.Len()
		if !ok {
			err = fmt.Errorf("Access denied - path outside allowed directories: %s not in %s", abs, workspaceRoot) //nolint:staticcheck // exact text
		} else {
			if err = f.out.writeString(raw + ":\n"); err == nil {
				if err = f.read(abs); err == nil {
					err = f.out.writeString("\n")
				}
			}
		}
		if sandbox.ClassOf(err) == sandbox.ClassQuota {
			return "", err
		}
		if err != nil {
			f.out.truncate(mark)
			if err := f.out.writeString(fmt.Sprintf("%s: Error - %s", raw, err)); err != nil {
				return "", err
			}
		}
	}
	return f.out.String(), nil
}

func (f *fsCtx) list(p string) (string, error) {
	entries, err := f.listDir(p, 1)
	if err != nil {
		return "", err
	}
	lines := make([]string, len(entries))
	for i, e := range entries {
		kind := "[FILE]"
		if e.Type == dataplane.FileTypeDir && !e.IsSymlink {
			kind = "[DIR]"
		}
		lines[i] = kind + " " + e.Name
	}
	return strings.Join(lines, "\n"), nil
}

// listDir lists p (a directory) down to depth, sorted by path.
func (f *fsCtx) listDir(p string, depth int) ([]dataplane.Entry, error) {
	if err := reserve(f.ctx, listCost); err != nil {
		return nil, err
	}
	// The listing itself refuses a link leading out of /workspace.
	entries, err := f.dr.List(f.ctx, p, "", depth)
	if sandbox.ClassOf(err) == sandbox.ClassInvalid && !errors.Is(err, dataplane.ErrOutsideRoot) {
		return nil, fmt.Errorf("ENOTDIR: not a directory, scandir '%s'", p)
	}
	if err != nil {
		return nil, fsErr(err, "scandir", p)
	}
	sortEntries(entries)
	return entries, nil
}
