package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/textedit"
)

// TestEditFile: POST /fs/edit applies edit_file's edits in the agent and
// answers the diff; a dry run writes nothing; failures keep the file.
func TestEditFile(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	p := filepath.Join(a.Workdir, "f.py")
	if err := os.WriteFile(p, []byte("def f():\n    return 1\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	req := textedit.Request{Path: p, Edits: []textedit.Edit{{OldText: "return 1", NewText: "return 2"}}, DryRun: true, DiffName: "f.py"}
	diff, err := c.EditFile(ctx, "", req)
	if err != nil || !strings.HasPrefix(diff, "Index: f.py\n") || !strings.Contains(diff, "-    return 1\n+    return 2\n") {
		t.Fatalf("dry run: %v\n%s", err, diff)
	}
	if b, _ := os.ReadFile(p); string(b) != "def f():\n    return 1\n" {
		t.Fatalf("a dry run wrote %q", b)
	}
	req.DryRun = false
	if _, err := c.EditFile(ctx, "", req); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "def f():\n    return 2\n" {
		t.Fatalf("after the edit: %q", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after the edit %v", fi.Mode())
	}

	var noMatch *textedit.NoMatchError
	if _, err := c.EditFile(ctx, "", textedit.Request{Path: p, Edits: []textedit.Edit{{OldText: "absent\ntext", NewText: "x"}}}); !errors.As(err, &noMatch) || noMatch.OldText != "absent\ntext" {
		t.Errorf("no match: %v", err)
	}
	if _, err := c.EditFile(ctx, "", textedit.Request{Path: filepath.Join(a.Workdir, "missing")}); !sandbox.IsNotFound(err) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := c.EditFile(ctx, "", textedit.Request{Path: a.Workdir}); sandbox.ClassOf(err) != sandbox.ClassInvalid || !strings.Contains(err.Error(), "EISDIR") {
		t.Errorf("directory: %v", err)
	}
	big := filepath.Join(a.Workdir, "big")
	if err := os.WriteFile(big, make([]byte, textedit.MaxFile+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EditFile(ctx, "", textedit.Request{Path: big}); sandbox.ClassOf(err) != sandbox.ClassTooLarge {
		t.Errorf("file over the limit: %v", err)
	}
}

// TestSecurityEditFileDoesNotFollowFinalLink: a link swapped in for the
// file the daemon resolved is refused, not followed out.
func TestSecurityEditFileDoesNotFollowFinalLink(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(a.Workdir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	_, err := c.EditFile(ctx, "", textedit.Request{Path: link, Edits: []textedit.Edit{{OldText: "secret", NewText: "x"}}})
	if err == nil {
		t.Fatal("an edit followed a final symbolic link")
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Errorf("the link's target changed: %q", b)
	}
}
