package textedit

import (
	"fmt"
	"strings"
)

// contextLines is jsdiff's default context around a change.
const contextLines = 4

// maxTable bounds the dynamic-programming table of a changed middle; a
// middle larger than that is shown as removed and added wholesale.
const maxTable = 4_000_000

// UnifiedDiff renders a git-style unified diff of two texts the way
// jsdiff's createTwoFilesPatch does (the MCP filesystem server's edit_file
// output): an Index header, "---"/"+++" lines with headers, hunks with 4
// lines of context, and "\ No newline at end of file" markers.
//
// The common head and tail are found on bytes and never split into lines,
// so diffing a large file with a small change costs a scan of it, not a
// slice of its lines.
func UnifiedDiff(name, oldText, newText, oldHeader, newHeader string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Index: %s\n%s\n--- %s\t%s\n+++ %s\t%s\n", name, strings.Repeat("=", 67), name, oldHeader, name, newHeader)
	head, tail := commonLines(oldText, newText)
	// Context: the last lines of the head and the first of the tail.
	before := lastLines(oldText[:head], contextLines)
	after := firstLines(oldText[len(oldText)-tail:], contextLines)
	var ops []op
	for _, l := range splitLines(before) {
		ops = append(ops, op{' ', l})
	}
	ops = append(ops, diffMiddle(splitLines(oldText[head:len(oldText)-tail]), splitLines(newText[head:len(newText)-tail]))...)
	for _, l := range splitLines(after) {
		ops = append(ops, op{' ', l})
	}
	firstLine := strings.Count(oldText[:head], "\n") - strings.Count(before, "\n") + 1
	for _, h := range hunks(ops, contextLines, firstLine) {
		b.WriteString(h)
	}
	return b.String()
}

// commonLines returns the byte lengths of the longest head and tail of
// whole lines a and b share, not overlapping.
func commonLines(a, b string) (head, tail int) {
	n := min(len(a), len(b))
	for head < n && a[head] == b[head] {
		head++
	}
	// Back to the end of the last whole shared line.
	head = strings.LastIndexByte(a[:head], '\n') + 1
	limit := min(len(a), len(b)) - head
	for tail < limit && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	// Forward to the start of the first whole shared line: the byte before
	// the tail must be a newline in both texts.
	for tail > 0 && !(lineStart(a, len(a)-tail) && lineStart(b, len(b)-tail)) {
		tail--
	}
	return head, tail
}

// lineStart reports whether a line of s starts at i.
func lineStart(s string, i int) bool { return i == 0 || s[i-1] == '\n' }

// lastLines returns the last n lines of s, which ends with a newline or is
// empty.
func lastLines(s string, n int) string {
	i := len(s)
	for ; n > 0 && i > 0; n-- {
		i = strings.LastIndexByte(s[:i-1], '\n') + 1
	}
	return s[i:]
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return s
		}
		i += j + 1
	}
	return s[:i]
}

// noEOL marks a last line that has no newline, so it differs from the
// same text with one.
const noEOL = "\x00noeol"

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if strings.HasSuffix(l, "\n") {
			lines[i] = l[:len(l)-1]
		} else {
			lines[i] = l + noEOL
		}
	}
	return lines
}

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	text string
}

// diffMiddle computes a shortest edit script of two texts that share no
// first or last line; a pair too large for the quadratic table is
// replaced wholesale.
func diffMiddle(a, b []string) []op {
	if len(a)*len(b) > maxTable {
		out := make([]op, 0, len(a)+len(b))
		for _, l := range a {
			out = append(out, op{'-', l})
		}
		for _, l := range b {
			out = append(out, op{'+', l})
		}
		return out
	}
	return lcsOps(a, b)
}

// lcsOps is the classic dynamic-programming LCS edit script; removals come
// before additions within a change, as in jsdiff.
func lcsOps(a, b []string) []op {
	n, m := len(a), len(b)
	t := make([][]int32, n+1)
	for i := range t {
		t[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				t[i][j] = t[i+1][j+1] + 1
			} else {
				t[i][j] = max(t[i+1][j], t[i][j+1])
			}
		}
	}
	var out []op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, op{' ', a[i]})
			i++
			j++
		case j >= m || (i < n && t[i+1][j] >= t[i][j+1]):
			out = append(out, op{'-', a[i]})
			i++
		default:
			out = append(out, op{'+', b[j]})
			j++
		}
	}
	return out
}

// hunks groups an edit script into unified-diff hunks with ctx lines of
// context; the script's first line is line first of both texts.
func hunks(ops []op, ctx, first int) []string {
	var out []string
	oldNo, newNo := make([]int, len(ops)+1), make([]int, len(ops)+1)
	o, n := first, first
	for i, x := range ops {
		oldNo[i], newNo[i] = o, n
		if x.kind != '+' {
			o++
		}
		if x.kind != '-' {
			n++
		}
	}
	oldNo[len(ops)], newNo[len(ops)] = o, n
	i := 0
	for i < len(ops) {
		for i < len(ops) && ops[i].kind == ' ' {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(0, i-ctx)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		var body strings.Builder
		oldLen, newLen := 0, 0
		for _, x := range ops[start:end] {
			text, eol := strings.CutSuffix(x.text, noEOL)
			body.WriteByte(x.kind)
			body.WriteString(text)
			body.WriteByte('\n')
			if eol {
				body.WriteString("\\ No newline at end of file\n")
			}
			if x.kind != '+' {
				oldLen++
			}
			if x.kind != '-' {
				newLen++
			}
		}
		os, ns := oldNo[start], newNo[start]
		if oldLen == 0 {
			os--
		}
		if newLen == 0 {
			ns--
		}
		out = append(out, fmt.Sprintf("@@ -%d,%d +%d,%d @@\n%s", os, oldLen, ns, newLen, body.String()))
		i = end
	}
	return out
}
