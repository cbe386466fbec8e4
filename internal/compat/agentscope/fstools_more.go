package agentscope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/textedit"
)

// maxTreeDepth bounds recursive listings (directory_tree, search_files).
const maxTreeDepth = 64

func sortEntries(entries []dataplane.Entry) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
}

// treeNode is one entry of directory_tree's JSON.
type treeNode struct {
	Name     string      `json:"name"`
	Type     string      `json:"type"`
	Children []*treeNode `json:"children,omitempty"`
	isDir    bool
}

// MarshalJSON keeps "children" on directories even when empty, and off
// files, as the MCP filesystem server does.
func (n *treeNode) MarshalJSON() ([]byte, error) {
	if n.isDir {
		kids := n.Children
		if kids == nil {
			kids = []*treeNode{}
		}
		return json.Marshal(struct {
			Name     string      `json:"name"`
			Type     string      `json:"type"`
			Children []*treeNode `json:"children"`
		}{n.Name, n.Type, kids})
	}
	return json.Marshal(struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}{n.Name, n.Type})
}

func (f *fsCtx) tree(p string) (string, error) {
	entries, err := f.listDir(p, maxTreeDepth)
	if err != nil {
		return "", err
	}
	dirs := map[string]*treeNode{p: {isDir: true}}
	for _, e := range entries {
		n := &treeNode{Name: e.Name, Type: "file"}
		if e.Type == dataplane.FileTypeDir && !e.IsSymlink {
			n.Type, n.isDir = "directory", true
			dirs[e.Path] = n
		}
		if parent := dirs[path.Dir(e.Path)]; parent != nil {
			parent.Children = append(parent.Children, n)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	root := dirs[p].Children
	if root == nil {
		root = []*treeNode{}
	}
	if err := enc.Encode(root); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

func (f *fsCtx) search(p, pattern string, excludes []string) (string, error) {
	entries, err := f.listDir(p, maxTreeDepth)
	if err != nil {
		return "", err
	}
	var excl []string
	for _, x := range excludes {
		if !strings.Contains(x, "*") {
			x = "**/" + x + "/**"
		}
		excl = append(excl, x)
	}
	var match func(rel, name string) bool
	if strings.ContainsAny(pattern, "*?[{") {
		match = func(rel, name string) bool { return globMatch(pattern, rel) || globMatch(pattern, name) }
	} else {
		lower := strings.ToLower(pattern)
		match = func(rel, name string) bool { return strings.Contains(strings.ToLower(name), lower) }
	}
	var results []string
	skipped := map[string]bool{}
	for _, e := range entries {
		rel := strings.TrimPrefix(strings.TrimPrefix(e.Path, p), "/")
		if skipped[path.Dir(e.Path)] {
			skipped[e.Path] = true // inside an excluded directory
			continue
		}
		excluded := false
		for _, x := range excl {
			if globMatch(x, rel) {
				excluded = true
				break
			}
		}
		if excluded {
			skipped[e.Path] = true
			continue
		}
		if match(rel, e.Name) {
			results = append(results, e.Path)
		}
	}
	if len(results) == 0 {
		return "No matches found", nil
	}
	return strings.Join(results, "\n"), nil
}

// globMatch reports whether the slash-separated path matches a glob as the
// MCP filesystem server's minimatch (with dot files) does: "**" crosses
// directories as a whole segment, "*" and "?" do not, [...] and {a,b}
// work. A malformed glob matches nothing.
func globMatch(glob, p string) bool {
	ok, err := doublestar.Match(glob, p)
	return err == nil && ok
}

func (f *fsCtx) info(p string) (string, error) {
	st, err := f.dr.Stat(f.ctx, p, "")
	if err != nil {
		return "", fsErr(err, "stat", p)
	}
	mtime := jsDate(st.ModTime)
	isDir := st.Type == dataplane.FileTypeDir
	lines := []string{
		fmt.Sprintf("size: %d", st.Size),
		"created: " + mtime, // birth time is not reported by the agent
		"modified: " + mtime,
		"accessed: " + mtime,
		fmt.Sprintf("isDirectory: %t", isDir),
		fmt.Sprintf("isFile: %t", st.Type == dataplane.FileTypeFile),
		fmt.Sprintf("permissions: %03o", st.Mode.Perm()),
	}
	return strings.Join(lines, "\n"), nil
}

// jsDate formats t as JavaScript's Date.prototype.toString in UTC.
func jsDate(t time.Time) string {
	return t.UTC().Format("Mon Jan 02 2006 15:04:05") + " GMT+0000 (Coordinated Universal Time)"
}

// edit is edit_file: the agent applies the edits in the sandbox (each
// oldText replaced at its first exact occurrence, or else at a run of
// lines equal to it up to surrounding whitespace) and answers the diff,
// which is fenced here; the file is written unless dryRun.
func (f *fsCtx) edit(p string, args map[string]any) (string, error) {
	rawEdits, ok := args["edits"].([]any)
	if !ok {
		return "", fmt.Errorf("argument \"edits\" must be an array of {oldText, newText}")
	}
	if len(rawEdits) > textedit.MaxEdits {
		return "", fmt.Errorf("%d edits in one call, more than the %d allowed: split them over several calls", len(rawEdits), textedit.MaxEdits)
	}
	dryRun, _ := args["dryRun"].(bool)
	edits := make([]dataplane.Edit, len(rawEdits))
	for i, re := range rawEdits {
		e, ok := re.(map[string]any)
		oldText, ok1 := e["oldText"].(string)
		newText, ok2 := e["newText"].(string)
		if !ok || !ok1 || !ok2 {
			return "", fmt.Errorf("each edit needs string oldText and newText")
		}
		edits[i] = dataplane.Edit{OldText: oldText, NewText: newText}
	}
	// The answer: the agent's JSON, the diff decoded from it, and the
	// fenced copy.
	if err := reserve(f.ctx, dataplane.MaxEditAnswer+2*textedit.MaxDiff); err != nil {
		return "", err
	}
	diff, err := f.dr.EditFile(f.ctx, p, "", edits, dryRun, p)
	var noMatch *dataplane.NoMatchError
	switch {
	case errors.As(err, &noMatch):
		return "", noMatch
	case err != nil && sandbox.ClassOf(err) == sandbox.ClassNotFound:
		return "", fsErr(err, "open", p)
	case err != nil:
		return "", errors.New(errorText(err))
	}
	fence := "```"
	for strings.Contains(diff, fence) {
		fence += "`"
	}
	return fence + "diff\n" + diff + fence + "\n\n", nil
}
