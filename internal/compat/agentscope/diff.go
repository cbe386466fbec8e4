package agentscope

import (
	"fmt"
	"strings"
)

// unifiedDiff renders a git-style unified diff of two texts the way jsdiff's
// createTwoFilesPatch does (the MCP filesystem server's edit_file output):
// an Index header, "---"/"+++" lines with headers, hunks with 4 lines of
// context, and "\ No newline at end of file" markers.
func unifiedDiff(name, oldText, newText, oldHeader, newHeader string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Index: %s\n%s\n--- %s\t%s\n+++ %s\t%s\n", name, strings.Repeat("=", 67), name, oldHeader, name, newHeader)
	a, bl := splitLines(oldText), splitLines(newText)
	for _, h := range hunks(diffLines(a, bl), 4) {
		b.WriteString(h)
	}
	return b.String()
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

// diffLines computes a shortest edit script. The common prefix and suffix
// are trimmed first, so typical edits diff a small middle; a middle too
// large for the quadratic table is replaced wholesale.
func diffLines(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []op
	for _, l := range a[:pre] {
		out = append(out, op{' ', l})
	}
	am, bm := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(am)*len(bm) > 4_000_000 {
		for _, l := range am {
			out = append(out, op{'-', l})
		}
		for _, l := range bm {
			out = append(out, op{'+', l})
		}
	} else {
		out = append(out, lcsOps(am, bm)...)
	}
	for _, l := range a[len(a)-suf:] {
		out = append(out, op{' ', l})
	}
	return out
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
// context.
func hunks(ops []op, ctx int) []string {
	var out []string
	oldNo, newNo := make([]int, len(ops)+1), make([]int, len(ops)+1)
	o, n := 1, 1
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
