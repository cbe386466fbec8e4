// Package textedit applies the edits of the MCP filesystem server's
// edit_file tool to a text and renders the change as a unified diff in
// jsdiff's createTwoFilesPatch format. The sandbox's agent runs it, so the
// memory and CPU an edit of a large file costs are the sandbox's, under its
// limits, never the daemon's. Memory stays proportional to the file: no
// per-line slices of the whole text are built, however many lines it has.
package textedit

import (
	"context"
	"fmt"
	"strings"
)

// Limits of one call, beside the caller's deadline.
const (
	// MaxEdits bounds the edits of one call.
	MaxEdits = 256
	// MaxFile bounds the file an edit loads.
	MaxFile = 32 << 20
	// MaxDiff bounds the diff an edit answers; a larger change is refused
	// (a model cannot use a longer diff, and write_file replaces a file).
	MaxDiff = 8 << 20
)

// Edit replaces OldText with NewText.
type Edit struct {
	OldText string `json:"oldText"`
	NewText string `json:"newText"`
}

// Request is the body of the agent's POST /fs/edit.
type Request struct {
	Path   string `json:"path"`
	Edits  []Edit `json:"edits"`
	DryRun bool   `json:"dryRun"`
	// DiffName names the file in the diff's headers (the caller's
	// spelling of the path); the resolved path when empty.
	DiffName string `json:"diffName,omitempty"`
}

// Response is the answer of POST /fs/edit.
type Response struct {
	Diff string `json:"diff"`
}

// ReasonNoMatch is the "reason" of the error answer of POST /fs/edit for
// a NoMatchError.
const ReasonNoMatch = "no_match"

// NoMatchError is an edit whose OldText is not in the text, neither
// exactly nor line by line up to surrounding whitespace.
type NoMatchError struct{ OldText string }

func (e *NoMatchError) Error() string {
	return "Could not find exact match for edit:\n" + e.OldText
}

// checkEvery spaces the deadline checks of the line scans.
const checkEvery = 1 << 16

// Apply applies edits in order to content (CRLF line ends become LF in
// the content and the edits): each OldText is replaced at its first exact
// occurrence, or else at the first run of lines equal to its lines up to
// leading and trailing whitespace, re-indented like the match. It returns
// the normalised original and the result.
func Apply(ctx context.Context, content string, edits []Edit) (original, modified string, err error) {
	if len(edits) > MaxEdits {
		return "", "", fmt.Errorf("%d edits in one call, more than the %d allowed: split them over several calls", len(edits), MaxEdits)
	}
	original = strings.ReplaceAll(content, "\r\n", "\n")
	modified = original
	for _, e := range edits {
		if err := ctx.Err(); err != nil {
			return "", "", err
		}
		oldText := strings.ReplaceAll(e.OldText, "\r\n", "\n")
		newText := strings.ReplaceAll(e.NewText, "\r\n", "\n")
		if i := strings.Index(modified, oldText); i >= 0 {
			modified = modified[:i] + newText + modified[i+len(oldText):]
			continue
		}
		next, ok, err := replaceLoose(ctx, modified, oldText, newText)
		if err != nil {
			return "", "", err
		}
		if !ok {
			return "", "", &NoMatchError{OldText: oldText}
		}
		modified = next
	}
	return original, modified, nil
}

// replaceLoose replaces the first run of lines of content matching
// oldText's lines up to surrounding whitespace, re-indenting newText like
// the match. It walks content's lines in place.
func replaceLoose(ctx context.Context, content, oldText, newText string) (string, bool, error) {
	oldLines := strings.Split(oldText, "\n")
	first := strings.TrimSpace(oldLines[0])
	n := 0
	for start := 0; start <= len(content); {
		if n++; n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return "", false, err
			}
		}
		line, next := lineAt(content, start)
		if strings.TrimSpace(line) == first {
			if end, ok := matchFrom(content, next, oldLines[1:]); ok {
				out := content[:start] + reindent(line, oldLines, newText) + content[end:]
				return out, true, nil
			}
		}
		if next > len(content) {
			break
		}
		start = next
	}
	return "", false, nil
}

// lineAt returns the line of s starting at start (without its newline)
// and where the next line starts (len(s)+1 past the last line).
func lineAt(s string, start int) (string, int) {
	if i := strings.IndexByte(s[start:], '\n'); i >= 0 {
		return s[start : start+i], start + i + 1
	}
	return s[start:], len(s) + 1
}

// matchFrom checks that the lines of s from start match want up to
// surrounding whitespace and returns the end of the last one (before its
// newline).
func matchFrom(s string, start int, want []string) (int, bool) {
	end := start - 1 // the end of the previous line
	for _, w := range want {
		if start > len(s) {
			return 0, false
		}
		line, next := lineAt(s, start)
		if strings.TrimSpace(line) != strings.TrimSpace(w) {
			return 0, false
		}
		end, start = start+len(line), next
	}
	return end, true
}

// reindent indents newText like matched, the first matched line: its
// first line takes matched's indentation, and later lines keep their
// indentation relative to the corresponding old line.
func reindent(matched string, oldLines []string, newText string) string {
	indent := leadingSpace(matched)
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
	return strings.Join(newLines, "\n")
}

func leadingSpace(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }
