package textedit

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestUnifiedDiff(t *testing.T) {
	got := UnifiedDiff("/workspace/a.txt", "one\ntwo\nthree\n", "one\nTWO\nthree\n", "original", "modified")
	want := "Index: /workspace/a.txt\n" + strings.Repeat("=", 67) + "\n" +
		"--- /workspace/a.txt\toriginal\n+++ /workspace/a.txt\tmodified\n" +
		"@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// Far-apart changes make two hunks with 4 lines of context each.
	var a, b []string
	for i := 0; i < 30; i++ {
		a = append(a, string(rune('a'+i%26)))
	}
	b = append(b, a...)
	b[1], b[28] = "X", "Y"
	got = UnifiedDiff("f", strings.Join(a, "\n")+"\n", strings.Join(b, "\n")+"\n", "o", "m")
	if n := strings.Count(got, "@@ -"); n != 2 {
		t.Fatalf("want 2 hunks, got %d:\n%s", n, got)
	}
	if !strings.Contains(got, "@@ -1,6 +1,6 @@\n a\n-b\n+X\n") || !strings.Contains(got, "@@ -25,6 +25,6 @@\n") {
		t.Fatalf("hunk headers:\n%s", got)
	}
	// A missing final newline is marked.
	got = UnifiedDiff("f", "x", "y", "o", "m")
	if !strings.HasSuffix(got, "@@ -1,1 +1,1 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n") {
		t.Fatalf("no-newline markers:\n%s", got)
	}
	// Adding to an empty file.
	if got = UnifiedDiff("f", "", "new\n", "o", "m"); !strings.HasSuffix(got, "@@ -0,0 +1,1 @@\n+new\n") {
		t.Fatalf("empty old file:\n%s", got)
	}
}

// TestUnifiedDiffMatchesLineDiff checks the byte-trimmed diff against the
// straightforward one over all lines (the implementation before the
// trimming) on random texts with random edits.
func TestUnifiedDiffMatchesLineDiff(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"a", "b", "c", "", " a", "a ", "x\r"}
	randText := func() string {
		var lines []string
		for n := r.IntN(40); n > 0; n-- {
			lines = append(lines, words[r.IntN(len(words))])
		}
		s := strings.Join(lines, "\n")
		if r.IntN(2) == 0 && s != "" {
			s += "\n"
		}
		return s
	}
	mutate := func(s string) string {
		lines := strings.Split(s, "\n")
		for n := r.IntN(4); n > 0; n-- {
			i := r.IntN(len(lines))
			switch r.IntN(3) {
			case 0:
				lines[i] = words[r.IntN(len(words))]
			case 1:
				lines = append(lines[:i], append([]string{words[r.IntN(len(words))]}, lines[i:]...)...)
			default:
				lines = append(lines[:i], lines[i+1:]...)
				if len(lines) == 0 {
					lines = []string{""}
				}
			}
		}
		return strings.Join(lines, "\n")
	}
	for i := 0; i < 5000; i++ {
		a := randText()
		b := mutate(a)
		if r.IntN(5) == 0 {
			b = randText()
		}
		got, want := UnifiedDiff("f", a, b, "o", "m"), referenceDiff("f", a, b, "o", "m")
		if got != want {
			t.Fatalf("texts %q and %q:\ngot\n%s\nwant\n%s", a, b, got, want)
		}
	}
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	content := "def f():\n    if x:\n        return 1\n"
	// Lines match up to surrounding whitespace; new lines are indented
	// like the match plus their indent relative to the old text's.
	_, got, err := Apply(ctx, content, []Edit{{"if x:\n    return 1", "if y:\n        return 2"}})
	if err != nil || got != "def f():\n    if y:\n        return 2\n" {
		t.Fatalf("got %q %v", got, err)
	}
	var nm *NoMatchError
	if _, _, err := Apply(ctx, content, []Edit{{"absent", "x"}}); !errors.As(err, &nm) || !strings.HasPrefix(err.Error(), "Could not find exact match for edit:\nabsent") {
		t.Fatalf("absent text: %v", err)
	}
	// Exact matches first, in order, CRLF normalised.
	orig, got, err := Apply(ctx, "a\r\nb\r\na\r\n", []Edit{{"a", "A"}, {"b\r\n", "B\n"}})
	if err != nil || orig != "a\nb\na\n" || got != "A\nB\na\n" {
		t.Fatalf("exact: %q %q %v", orig, got, err)
	}
	// The last line, without a newline, matches loosely too.
	if _, got, err = Apply(ctx, "x\n  last", []Edit{{"last ", "end"}}); err != nil || got != "x\n  end" {
		t.Fatalf("last line: %q %v", got, err)
	}
	if _, _, err := Apply(ctx, content, make([]Edit, MaxEdits+1)); err == nil {
		t.Fatal("too many edits accepted")
	}
}

// TestSecurityApplyBounded: the review's edits (a 33 MB file of newlines,
// a non-matching multi-line edit; many edits) stay within memory
// proportional to the file and stop at the deadline.
func TestSecurityApplyBounded(t *testing.T) {
	content := strings.Repeat("\n", 33<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := Apply(context.Background(), content, []Edit{{"\n\n\nabsent", "x"}})
	runtime.ReadMemStats(&after)
	var nm *NoMatchError
	if !errors.As(err, &nm) {
		t.Fatalf("want no match, got %v", err)
	}
	// The line-slice version allocated ~600 MB here (16 bytes per line).
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 100<<20 {
		t.Fatalf("a non-matching edit of a 33 MB file allocated %d MiB", grown>>20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	edits := make([]Edit, MaxEdits)
	for i := range edits {
		edits[i] = Edit{"\n\n\nabsent", "x"}
	}
	if _, _, err := Apply(ctx, content, edits); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
	// A small change to a large file diffs its middle only.
	big := strings.Repeat("line\n", 4<<20)
	changed := big[:10] + "X" + big[11:]
	runtime.GC()
	runtime.ReadMemStats(&before)
	d := UnifiedDiff("f", big, changed, "o", "m")
	runtime.ReadMemStats(&after)
	if !strings.Contains(d, "@@ -1,7 +1,7 @@\n line\n line\n-line\n+Xine") {
		t.Fatalf("diff:\n%s", d)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<20 {
		t.Fatalf("diffing one changed line of a 20 MiB file allocated %d KiB", grown>>10)
	}
}

// referenceDiff is the diff over every line, as before the byte-level
// trimming.
func referenceDiff(name, oldText, newText, oldHeader, newHeader string) string {
	var b strings.Builder
	b.WriteString("Index: " + name + "\n" + strings.Repeat("=", 67) + "\n--- " + name + "\t" + oldHeader + "\n+++ " + name + "\t" + newHeader + "\n")
	a, bl := splitLines(oldText), splitLines(newText)
	pre := 0
	for pre < len(a) && pre < len(bl) && a[pre] == bl[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(bl)-pre && a[len(a)-1-suf] == bl[len(bl)-1-suf] {
		suf++
	}
	var ops []op
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	ops = append(ops, diffMiddle(a[pre:len(a)-suf], bl[pre:len(bl)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}
	for _, h := range hunks(ops, contextLines, 1) {
		b.WriteString(h)
	}
	return b.String()
}
