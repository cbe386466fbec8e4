package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

// File limits.
const (
	maxReadFile   = 10 << 20  // bytes file_read and file_edit load
	maxImageBytes = 5 << 20   // images returned as image content
	maxWriteBytes = 10 << 20  // file_write content
	maxReadChunk  = 100 << 10 // bytes of text one file_read returns
	defaultLines  = 2000
	maxListItems  = 1000
)

// roots are the directories the file tools may touch.
var roots = []string{workspace, "/tmp"}

// underRoot reports whether clean absolute p is a root or inside one.
func underRoot(p string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// fs is the session's client for the file tools: confined to the roots,
// so the sandbox resolves every path under /workspace and /tmp, symbolic
// links included, and refuses one leading out (client.IsOutsideRoot) —
// in the same call that acts on it, with no window for a swapped link.
func (s *Session) fs() *client.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.confined == nil {
		s.confined = s.c.Confined(roots...)
	}
	return s.confined
}

// resolve returns the absolute path a tool argument names: relative paths
// are taken from /workspace, and the path must lie inside /workspace or
// /tmp. Unless keepLast (delete acts on a link itself), the sandbox also
// checks that no symbolic link on it leads out, so a working directory
// given to a command stays inside too; file operations are confined in
// the sandbox as they act (fs).
func (s *Session) resolve(ctx context.Context, sb, p string, keepLast bool) (string, error) {
	if p == "" {
		return "", fail("path is empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", fail("path contains a NUL byte")
	}
	abs := p
	if !path.IsAbs(abs) {
		abs = path.Join(workspace, abs)
	}
	abs = path.Clean(abs)
	if !underRoot(abs) {
		return "", fail("path %s is outside the workspace: file tools work in /workspace (and /tmp). Use a path under /workspace, or relative to it.", p)
	}
	if keepLast {
		return abs, nil
	}
	e, err := s.fs().Stat(ctx, sb, abs)
	switch {
	case client.IsOutsideRoot(err):
		return "", fail("path %s leads out of the workspace through a symbolic link; refused", p)
	case client.IsNotFound(err):
		return abs, nil
	case err != nil:
		return "", err
	case e.Type == "symlink" && e.SymlinkTarget != "":
		// A link the sandbox would not follow: its target is outside
		// the roots (or missing).
		target := e.SymlinkTarget
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(abs), target)
		}
		if !underRoot(path.Clean(target)) {
			return "", fail("path %s leads out of the workspace through the symbolic link %s -> %s; refused", p, abs, e.SymlinkTarget)
		}
	}
	return abs, nil
}

// download reads at most limit bytes of the file at p (an error beyond).
// Paths a model gave go through the confined client (fs); the kit's own
// files (env_set's, in the user's home) through the plain one.
func (s *Session) download(ctx context.Context, c *client.Client, sb, p string, limit int64) ([]byte, error) {
	rc, size, err := c.Download(ctx, sb, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > limit {
		return nil, &tooBig{size: size}
	}
	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &tooBig{size: -1}
	}
	return data, nil
}

type tooBig struct{ size int64 }

func (e *tooBig) Error() string { return fmt.Sprintf("file too large (%d bytes)", e.size) }

func (s *Session) upload(ctx context.Context, c *client.Client, sb, p string, data []byte) error {
	_, err := c.Upload(ctx, sb, p, bytes.NewReader(data), int64(len(data)), nil)
	return err
}

// readText loads a text file for reading or editing, refusing what is
// not text with a hint.
func (s *Session) readText(ctx context.Context, sb, abs string) ([]byte, error) {
	e, err := s.fs().Stat(ctx, sb, abs)
	if client.IsNotFound(err) {
		return nil, fail("%s does not exist. Use file_list or file_search to find the right path.", abs)
	}
	if err != nil {
		return nil, err
	}
	if e.Type == "dir" {
		return nil, fail("%s is a directory: use file_list to see what it holds", abs)
	}
	if e.Size > maxReadFile {
		return nil, fail("%s is %d bytes, over the %d MiB file_read can load. Look at parts of it with shell_exec (head, tail, sed -n '100,200p', grep).", abs, e.Size, maxReadFile>>20)
	}
	data, err := s.download(ctx, s.fs(), sb, abs, maxReadFile)
	if tb := (*tooBig)(nil); errors.As(err, &tb) {
		return nil, fail("%s is over the %d MiB file_read can load. Look at parts of it with shell_exec (head, tail, grep).", abs, maxReadFile>>20)
	}
	return data, err
}

func fileTools() []*Tool {
	return []*Tool{
		{
			Name: "file_read",
			Description: "Read a text file in the sandbox's workspace. Paths are relative to /workspace or absolute under /workspace or /tmp. " +
				"Long files come in pages: offset is the first line (1-based) and limit the number of lines (default 2000); the result says how to get the next page. " +
				"Images (PNG, JPEG, GIF, WebP) are returned as images; other binary files are refused.",
			Schema: object(req("path"),
				p("path", str("The file, e.g. \"src/main.py\" or \"/workspace/notes.txt\".")),
				p("offset", integer("First line to return, 1-based (default 1).", 1, 1<<30)),
				p("limit", integer("Number of lines to return (default 2000).", 1, 100000)),
			),
			run: runFileRead,
		},
		{
			Name: "file_write",
			Description: "Create or overwrite a text file in the workspace with the given content (parent directories are created). " +
				"To change part of an existing file prefer file_edit. Set append=true to add to the end instead.",
			Schema: object(req("path", "content"),
				p("path", str("The file, relative to /workspace or absolute under /workspace or /tmp.")),
				p("content", strMax("The full text to write.", maxWriteBytes)),
				p("append", boolean("Append to the file instead of replacing it.")),
			),
			run: runFileWrite,
		},
		{
			Name: "file_edit",
			Description: "Edit a text file by replacing an exact string: old_string must appear in the file exactly once (including whitespace and indentation), unless replace_all is true. " +
				"Read the file first to copy the exact text; include enough surrounding lines to make old_string unique.",
			Schema: object(req("path", "old_string", "new_string"),
				p("path", str("The file, relative to /workspace or absolute under /workspace or /tmp.")),
				p("old_string", map[string]any{"type": "string", "minLength": 1, "description": "The exact text to replace."}),
				p("new_string", str("The replacement text (may be empty to delete old_string).")),
				p("replace_all", boolean("Replace every occurrence instead of requiring exactly one.")),
			),
			run: runFileEdit,
		},
		{
			Name:        "file_delete",
			Description: "Delete a file, a symbolic link, or (with recursive=true) a directory and everything in it, inside the workspace.",
			Schema: object(req("path"),
				p("path", str("What to delete, relative to /workspace or absolute under /workspace or /tmp.")),
				p("recursive", boolean("Required to delete a directory.")),
			),
			run: runFileDelete,
		},
		{
			Name:        "file_list",
			Description: "List a directory of the workspace: type, size and path of each entry, down to depth levels (default 1).",
			Schema: object(nil,
				p("path", str("The directory (default /workspace).")),
				p("depth", integer("How many levels to descend (default 1).", 1, 10)),
			),
			run: runFileList,
		},
		{
			Name: "file_search",
			Description: "Search the workspace: by file name (name, a glob such as \"*.py\") and/or by content (pattern, an extended regular expression, or a plain string with fixed_strings). " +
				"With pattern, returns matching lines as path:line:text; with only name, returns matching paths. .git directories and binary files are skipped.",
			Schema: object(nil,
				p("pattern", str("Text to look for inside files (extended regex, e.g. \"def \\\\w+\\\\(\").")),
				p("name", str("File name glob, e.g. \"*.go\" or \"test_*.py\".")),
				p("path", str("Directory to search (default /workspace).")),
				p("ignore_case", boolean("Case-insensitive content match.")),
				p("fixed_strings", boolean("Treat pattern as a plain string, not a regex.")),
				p("max_results", integer("Most results to return (default 200).", 1, 2000)),
			),
			run: runFileSearch,
		},
	}
}

func runFileRead(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Path   string `json:"path"`
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	abs, err := s.resolve(ctx, sb, a.Path, false)
	if err != nil {
		return nil, err
	}
	data, err := s.readText(ctx, sb, abs)
	if err != nil {
		return nil, err
	}
	if mt := imageType(data); mt != "" {
		if len(data) > maxImageBytes {
			return nil, fail("%s is an image of %d bytes, over the %d MiB that can be shown", abs, len(data), maxImageBytes>>20)
		}
		return &Result{Content: []Content{
			{Type: "text", Text: fmt.Sprintf("%s (%s, %d bytes)", abs, mt, len(data))},
			{Type: "image", Data: base64.StdEncoding.EncodeToString(data), MimeType: mt},
		}}, nil
	}
	if looksBinary(data) {
		return nil, fail("%s is a binary file (%d bytes); file_read shows text only. Inspect it with shell_exec (e.g. file, xxd | head, unzip -l) or convert it to text first.", abs, len(data))
	}
	if len(data) == 0 {
		return textResult("(%s is empty)", abs), nil
	}
	text := string(data)
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	total := len(lines)
	offset := max(a.Offset, 1)
	limit := a.Limit
	if limit == 0 {
		limit = defaultLines
	}
	if offset > total {
		return nil, fail("offset %d is past the end: %s has %d lines", offset, abs, total)
	}
	end := min(offset-1+limit, total)
	var b strings.Builder
	shown := offset - 1
	for i := offset - 1; i < end; i++ {
		if b.Len()+len(lines[i]) > maxReadChunk && i > offset-1 {
			break
		}
		b.WriteString(lines[i])
		shown = i + 1
	}
	out := b.String()
	if len(out) > maxReadChunk { // one giant line
		out = out[:maxReadChunk]
		out = strings.ToValidUTF8(out, "")
		return textResult("%s\n[line %d is longer than %d KiB and was cut; view it with shell_exec, e.g. cut -c1-2000 or fold]", out, offset, maxReadChunk>>10), nil
	}
	if offset > 1 || shown < total {
		if !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		note := fmt.Sprintf("[lines %d-%d of %d", offset, shown, total)
		if shown < total {
			note += fmt.Sprintf("; call file_read with offset=%d to read on", shown+1)
		}
		out += note + "]"
	}
	return textResult("%s", out), nil
}

func runFileWrite(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Append  bool   `json:"append"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	abs, err := s.resolve(ctx, sb, a.Path, false)
	if err != nil {
		return nil, err
	}
	if abs == workspace || abs == "/tmp" {
		return nil, fail("%s is a directory; give a file path", abs)
	}
	data := []byte(a.Content)
	if a.Append {
		old, err := s.download(ctx, s.fs(), sb, abs, maxWriteBytes)
		switch {
		case client.IsNotFound(err):
		case err != nil:
			if tb := (*tooBig)(nil); errors.As(err, &tb) {
				return nil, fail("%s is too large to append to with file_write; use shell_exec (cat >> file)", abs)
			}
			return nil, err
		default:
			data = append(old, data...)
		}
	}
	if e, err := s.fs().Stat(ctx, sb, abs); err == nil && e.Type == "dir" {
		return nil, fail("%s is a directory; give a file path", abs)
	}
	if err := s.upload(ctx, s.fs(), sb, abs, data); err != nil {
		return nil, err
	}
	return textResult("Wrote %d bytes to %s.", len(data), abs), nil
}

func runFileEdit(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Path       string `json:"path"`
		Old        string `json:"old_string"`
		New        string `json:"new_string"`
		ReplaceAll bool   `json:"replace_all"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	abs, err := s.resolve(ctx, sb, a.Path, false)
	if err != nil {
		return nil, err
	}
	data, err := s.readText(ctx, sb, abs)
	if err != nil {
		return nil, err
	}
	if looksBinary(data) {
		return nil, fail("%s is a binary file; file_edit edits text only", abs)
	}
	text := string(data)
	n := strings.Count(text, a.Old)
	switch {
	case n == 0:
		return nil, fail("old_string was not found in %s. It must match exactly, including whitespace and indentation: read the file with file_read and copy the text.", abs)
	case n > 1 && !a.ReplaceAll:
		return nil, fail("old_string occurs %d times in %s. Include more surrounding text to make it unique, or set replace_all=true to replace every occurrence.", n, abs)
	}
	if a.Old == a.New {
		return nil, fail("old_string and new_string are the same; nothing to change")
	}
	line := strings.Count(text[:strings.Index(text, a.Old)], "\n") + 1
	if a.ReplaceAll {
		text = strings.ReplaceAll(text, a.Old, a.New)
	} else {
		text = strings.Replace(text, a.Old, a.New, 1)
	}
	if err := s.upload(ctx, s.fs(), sb, abs, []byte(text)); err != nil {
		return nil, err
	}
	if n == 1 {
		return textResult("Replaced 1 occurrence in %s (at line %d).", abs, line), nil
	}
	return textResult("Replaced %d occurrences in %s (first at line %d).", n, abs, line), nil
}

func runFileDelete(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	abs, err := s.resolve(ctx, sb, a.Path, true)
	if err != nil {
		return nil, err
	}
	for _, r := range roots {
		if abs == r {
			return nil, fail("refusing to delete %s itself; delete what is inside it instead", r)
		}
	}
	e, err := s.fs().Stat(ctx, sb, abs)
	if client.IsNotFound(err) {
		return nil, fail("%s does not exist", abs)
	}
	if err != nil {
		return nil, err
	}
	if e.Type == "dir" && !a.Recursive {
		return nil, fail("%s is a directory: set recursive=true to delete it and everything in it", abs)
	}
	if err := s.fs().Remove(ctx, sb, abs); err != nil {
		return nil, err
	}
	return textResult("Deleted %s.", abs), nil
}

func runFileList(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Path  string `json:"path"`
		Depth int    `json:"depth"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		a.Path = workspace
	}
	abs, err := s.resolve(ctx, sb, a.Path, false)
	if err != nil {
		return nil, err
	}
	entries, err := s.fs().ListFiles(ctx, sb, abs, max(a.Depth, 1))
	if client.IsNotFound(err) {
		return nil, fail("%s does not exist", abs)
	}
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return textResult("%s is empty.", abs), nil
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	var b strings.Builder
	for i, e := range entries {
		if i == maxListItems {
			fmt.Fprintf(&b, "[%d more entries not shown: list a subdirectory, lower depth, or use file_search]\n", len(entries)-maxListItems)
			break
		}
		switch e.Type {
		case "dir":
			fmt.Fprintf(&b, "dir      %s/\n", e.Path)
		case "symlink":
			fmt.Fprintf(&b, "link     %s -> %s\n", e.Path, e.SymlinkTarget)
		default:
			fmt.Fprintf(&b, "%-8d %s\n", e.Size, e.Path)
		}
	}
	return textResult("%s", strings.TrimSuffix(b.String(), "\n")), nil
}

func runFileSearch(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Pattern      string `json:"pattern"`
		Name         string `json:"name"`
		Path         string `json:"path"`
		IgnoreCase   bool   `json:"ignore_case"`
		FixedStrings bool   `json:"fixed_strings"`
		MaxResults   int    `json:"max_results"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.Pattern == "" && a.Name == "" {
		return nil, fail("give pattern (content) and/or name (file name glob)")
	}
	if a.Path == "" {
		a.Path = workspace
	}
	abs, err := s.resolve(ctx, sb, a.Path, false)
	if err != nil {
		return nil, err
	}
	maxRes := a.MaxResults
	if maxRes == 0 {
		maxRes = 200
	}
	var script string
	var args []string
	if a.Pattern == "" {
		script = `find "$1" -name .git -prune -o -name "$2" -print 2>/dev/null | head -n "$3"`
		args = []string{abs, a.Name, fmt.Sprint(maxRes + 1)}
	} else {
		flags := "-rnIH"
		if a.IgnoreCase {
			flags += "i"
		}
		if a.FixedStrings {
			flags += "F"
		} else {
			flags += "E"
		}
		inc := ""
		if a.Name != "" {
			inc = `--include="$4"`
		}
		script = `grep ` + flags + ` --exclude-dir=.git ` + inc + ` -e "$2" -- "$1" 2>/dev/null | head -n "$3"; exit 0`
		args = []string{abs, a.Pattern, fmt.Sprint(maxRes + 1), a.Name}
	}
	res, err := s.sh(ctx, sb, "", 60*time.Second, script, args...)
	if err != nil {
		return nil, err
	}
	out := strings.TrimRight(res.Stdout, "\n")
	if out == "" {
		return textResult("No matches."), nil
	}
	lines := strings.Split(out, "\n")
	more := len(lines) > maxRes
	if more {
		lines = lines[:maxRes]
	}
	for i, l := range lines {
		if len(l) > 400 {
			lines[i] = strings.ToValidUTF8(l[:400], "") + "…"
		}
	}
	text := strings.Join(lines, "\n")
	if more {
		text += fmt.Sprintf("\n[more than %d results; narrow the search (path, name) or raise max_results]", maxRes)
	}
	text, _ = truncateText(text)
	return textResult("%s", text), nil
}
