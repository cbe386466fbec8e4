package agentscope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
)

// maxTreeDepth bounds recursive listings (directory_tree, search_files).
const maxTreeDepth = 64

func sortEntries(entries []agentclient.EntryInfo) {
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
		if e.Type == agentclient.FileTypeDir && !e.IsSymlink {
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
	var excl []*regexp.Regexp
	for _, x := range excludes {
		if !strings.Contains(x, "*") {
			x = "**/" + x + "/**"
		}
		excl = append(excl, globRegexp(x))
	}
	var match func(rel, name string) bool
	if strings.ContainsAny(pattern, "*?[") {
		re := globRegexp(pattern)
		match = func(rel, name string) bool { return re.MatchString(rel) || re.MatchString(name) }
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
		for _, re := range excl {
			if re.MatchString(rel) {
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

// globRegexp compiles a minimatch-style glob (with dot files matched):
// "**" crosses directories, "*" and "?" do not.
func globRegexp(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch {
		case strings.HasPrefix(glob[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 2
		case strings.HasPrefix(glob[i:], "/**") && i+3 == len(glob):
			b.WriteString("(?:/.*)?")
			i += 2
		case strings.HasPrefix(glob[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return regexp.MustCompile(`^$.`) // matches nothing
	}
	return re
}

func (f *fsCtx) info(p string) (string, error) {
	st, err := f.client.Stat(f.ctx, p, "")
	if err != nil {
		return "", fsErr(err, "stat", p)
	}
	mtime := jsDate(st.ModTime)
	isDir := st.Type == agentclient.FileTypeDir
	lines := []string{
		fmt.Sprintf("size: %d", st.Size),
		"created: " + mtime, // birth time is not reported by the agent
		"modified: " + mtime,
		"accessed: " + mtime,
		fmt.Sprintf("isDirectory: %t", isDir),
		fmt.Sprintf("isFile: %t", st.Type == agentclient.FileTypeFile),
		fmt.Sprintf("permissions: %03o", st.Mode.Perm()),
	}
	return strings.Join(lines, "\n"), nil
}

// jsDate formats t as JavaScript's Date.prototype.toString in UTC.
func jsDate(t time.Time) string {
	return t.UTC().Format("Mon Jan 02 2006 15:04:05") + " GMT+0000 (Coordinated Universal Time)"
}

// edit applies edit_file's edits: each oldText is replaced at its first
// exact occurrence, or else at a run of lines equal to it up to leading
// and trailing whitespace (keeping the file's indentation). The result is
// the diff, fenced; the file is written unless dryRun.
func (f *fsCtx) edit(p string, args map[string]any) (string, error) {
	rawEdits, ok := args["edits"].([]any)
	if !ok {
		return "", fmt.Errorf("argument \"edits\" must be an array of {oldText, newText}")
	}
	dryRun, _ := args["dryRun"].(bool)
	original, err := f.read(p)
	if err != nil {
		return "", err
	}
	content := strings.ReplaceAll(original, "\r\n", "\n")
	modified := content
	for _, re := range rawEdits {
		e, ok := re.(map[string]any)
		oldText, ok1 := e["oldText"].(string)
		newText, ok2 := e["newText"].(string)
		if !ok || !ok1 || !ok2 {
			return "", fmt.Errorf("each edit needs string oldText and newText")
		}
		oldText = strings.ReplaceAll(oldText, "\r\n", "\n")
		newText = strings.ReplaceAll(newText, "\r\n", "\n")
		if strings.Contains(modified, oldText) {
			modified = strings.Replace(modified, oldText, newText, 1)
			continue
		}
		next, ok := replaceLoose(modified, oldText, newText)
		if !ok {
			return "", fmt.Errorf("Could not find exact match for edit:\n%s", oldText) //nolint:staticcheck // exact text
		}
		modified = next
	}
	diff := unifiedDiff(p, content, modified, "original", "modified")
	fence := "```"
	for strings.Contains(diff, fence) {
		fence += "`"
	}
	if !dryRun {
		if _, err := f.client.Upload(f.ctx, p, "", strings.NewReader(modified)); err != nil {
			return "", fsErr(err, "open", p)
		}
	}
	return fence + "diff\n" + diff + fence + "\n\n", nil
}

// replaceLoose replaces the first run of lines matching oldText's lines
// up to surrounding whitespace, re-indenting newText like the match.
func replaceLoose(content, oldText, newText string) (string, bool) {
	oldLines := strings.Split(oldText, "\n")
	lines := strings.Split(content, "\n")
	for i := 0; i+len(oldLines) <= len(lines); i++ {
		match := true
		for j, ol := range oldLines {
			if strings.TrimSpace(ol) != strings.TrimSpace(lines[i+j]) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		indent := leadingSpace(lines[i])
		newLines := strings.Split(newText, "\n")
		for j, nl := range newLines {
			if j == 0 {
				newLines[j] = indent + strings.TrimLeft(nl, " \t")
				continue
			}
			if j < len(oldLines) {
				oi, ni := leadingSpace(oldLines[j]), leadingSpace(nl)
				if oi != "" && ni != "" {
					newLines[j] = indent + strings.Repeat(" ", max(0, len(ni)-len(oi))) + strings.TrimLeft(nl, " \t")
				}
			}
		}
		out := append(append(append([]string{}, lines[:i]...), newLines...), lines[i+len(oldLines):]...)
		return strings.Join(out, "\n"), true
	}
	return "", false
}

func leadingSpace(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }
