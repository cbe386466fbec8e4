package agentscope

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		glob, path string
		want       bool
	}{
		{"**/*.py", "a.py", true}, {"**/*.py", "x/y/a.py", true}, {"*.py", "x/a.py", false},
		{"*.py", "a.py", true}, {"**/node_modules/**", "node_modules/a", true},
		{"**/node_modules/**", "x/node_modules", true}, {"**/lib/**", "src/lib/u.py", true},
		{"a?c", "abc", true}, {"a?c", "a/c", false}, {"*.txt", ".hidden.txt", true},
		// minimatch's classes and alternatives; ** only as a whole segment.
		{"*.{py,go}", "m.go", true}, {"[ab].txt", "b.txt", true}, {"a**b", "a/x/b", false},
	}
	for _, c := range cases {
		if got := globMatch(c.glob, c.path); got != c.want {
			t.Errorf("glob %q vs %q: got %v want %v", c.glob, c.path, got, c.want)
		}
	}
}

func TestResolveWorkspacePath(t *testing.T) {
	cases := []struct {
		in, out string
		ok      bool
	}{
		{"a.txt", "/workspace/a.txt", true}, {".", "/workspace", true}, {"/workspace/x/../y", "/workspace/y", true},
		{"../etc/passwd", "/etc/passwd", false}, {"/etc", "/etc", false}, {"/workspacefoo", "/workspacefoo", false},
		{"a/../../x", "/x", false},
	}
	for _, c := range cases {
		out, ok := resolveWorkspacePath(c.in)
		if out != c.out || ok != c.ok {
			t.Errorf("%q: got %q %v, want %q %v", c.in, out, ok, c.out, c.ok)
		}
	}
}

func TestDecodeArgs(t *testing.T) {
	m := method{name: "call_tool", params: []string{"identity", "tool_name", "arguments"}, required: 1}
	decode := func(body string) (map[string]json.RawMessage, error) {
		r := httptest.NewRequest("POST", "/call_tool", strings.NewReader(body))
		args, raw, err := decodeArgs(httptest.NewRecorder(), r, m)
		if string(raw) != body {
			t.Fatalf("body kept as %q, sent %q", raw, body)
		}
		return args, err
	}
	args, err := decode(`{"args": ["id1", "run_shell_command", {"command": "ls"}]}`)
	if err != nil || string(args["identity"]) != `"id1"` || string(args["tool_name"]) != `"run_shell_command"` {
		t.Fatalf("positional list: %v %v", args, err)
	}
	if args, err = decode(`{"args": "id2", "kwargs": {"tool_name": "t"}}`); err != nil || string(args["identity"]) != `"id2"` || string(args["tool_name"]) != `"t"` {
		t.Fatalf("single positional + kwargs: %v %v", args, err)
	}
	if _, err = decode(`{"bogus": 1, "identity": "x"}`); err == nil || err.Error() != "call_tool() got an unexpected keyword argument 'bogus'" {
		t.Fatalf("unexpected kwarg: %v", err)
	}
	if _, err = decode(`{}`); err == nil || err.Error() != "call_tool() missing 1 required positional argument: 'identity'" {
		t.Fatalf("missing: %v", err)
	}
	if _, err = decode(``); err == nil {
		t.Fatal("empty body must still miss identity")
	}
	if _, err = decode(`[1]`); err == nil {
		t.Fatal("a non-object body must fail")
	}
}

func TestSplitPatch(t *testing.T) {
	patch := "diff --git a/x.txt b/x.txt\nindex 1..2\n--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n+b\n" +
		"diff --git a/dir/with space.txt b/dir/with space.txt\nnew file mode 100644\n"
	got := splitPatch(patch)
	if len(got) != 2 || !strings.HasSuffix(got["x.txt"], "+b\n") || !strings.HasPrefix(got["dir/with space.txt"], "diff --git") {
		t.Fatalf("got %q", got)
	}
	if p := patchPath(`diff --git "a/t\tab" "b/t\tab"`); p != `t\tab` {
		t.Fatalf("quoted path: %q", p)
	}
}

func TestRegistry(t *testing.T) {
	ctx := context.Background()
	g := newRegistry(store.NewMemory(), slog.Default())
	g.terminal = 100 * time.Millisecond
	now := time.Now()
	for _, r := range []*record{
		{Name: "p-b", Owner: "u", Session: "s", State: stateRunning, CreatedAt: now.Add(time.Second), UpdatedAt: now},
		{Name: "p-a", Owner: "u", Session: "s", State: stateRunning, CreatedAt: now, UpdatedAt: now},
		{Name: "p-c", Owner: "other", Session: "s", State: stateRunning, CreatedAt: now, UpdatedAt: now},
	} {
		if err := g.put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := g.session(ctx, "u", "s"); err != nil || len(got) != 2 || got[0].Name != "p-a" || got[1].Name != "p-b" {
		t.Fatalf("session order: %v %v", got, err)
	}
	if g.find(ctx, "u", "p-", "a") == nil || g.find(ctx, "other", "p-", "a") != nil {
		t.Fatal("find by short name, per owner")
	}
	if all, err := g.all(ctx, "u"); err != nil || len(all) != 2 {
		t.Fatalf("u's records %v %v", all, err)
	}
	if u := g.update(ctx, "p-a", func(r *record) { r.State, r.Session = stateReleased, "" }); u == nil || u.State != stateReleased {
		t.Fatalf("update: %+v", u)
	}
	if g.update(ctx, "p-none", func(r *record) {}) != nil {
		t.Fatal("update of a missing record")
	}
	if got, _ := g.session(ctx, "u", "s"); len(got) != 1 {
		t.Fatalf("released record still mapped: %v", got)
	}
	// Adopting keeps a record that is there.
	if r := g.adopt(ctx, &record{Name: "p-a", Owner: "u", State: stateRunning}); r == nil || r.State != stateReleased {
		t.Fatalf("adopt replaced an existing record: %+v", r)
	}
	// Terminal records expire after their TTL; live ones stay.
	deadline := time.Now().Add(10 * time.Second)
	for g.find(ctx, "u", "p-", "p-a") != nil {
		if time.Now().After(deadline) {
			t.Fatal("expired released record still answers")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g.find(ctx, "u", "p-", "p-b") == nil {
		t.Fatal("live record pruned")
	}
}

func TestTreeJSON(t *testing.T) {
	root := []*treeNode{{Name: "d", Type: "directory", isDir: true}, {Name: "f", Type: "file"}}
	data, _ := json.Marshal(root)
	if string(data) != `[{"name":"d","type":"directory","children":[]},{"name":"f","type":"file"}]` {
		t.Fatalf("got %s", data)
	}
}

func TestModelVersionNamesType(t *testing.T) {
	for _, typ := range knownTypes {
		r := &record{Name: "n", Type: typ, State: stateWarm}
		if v := r.model("http://h:1", 1, time.Hour)["version"].(string); !strings.Contains(v, typ) {
			t.Errorf("version %q does not contain %q", v, typ)
		}
	}
}
