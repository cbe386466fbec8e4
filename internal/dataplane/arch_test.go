package dataplane_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFrontEndsHoldNoAgentClient keeps the data plane the one door into a
// sandbox: no front end imports the agent's client (or the manager's
// exec, which is gone): they open a dataplane.Request.
func TestFrontEndsHoldNoAgentClient(t *testing.T) {
	frontEnds := []string{"httpapi", "compat", "mcpserver", "tools", "computer", "console"}
	const forbidden = "github.com/agentbox/agentbox/internal/agent/agentclient"
	fset := token.NewFileSet()
	for _, dir := range frontEnds {
		err := filepath.WalkDir(filepath.Join("..", dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				if path, _ := strconv.Unquote(imp.Path.Value); path == forbidden {
					t.Errorf("%s imports the agent client; front ends work in sandboxes through package dataplane", p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRooms keeps the layers of docs/architecture.md apart: the doors
// (protocol front ends) reach sandboxes only through the data plane and
// the manager, never a backend; nothing below the doors imports one of
// them; one protocol's front end does not import another's.
func TestRooms(t *testing.T) {
	const mod = "github.com/agentbox/agentbox/internal/"
	doors := []string{"httpapi", "compat", "mcpserver", "tools", "computer", "console"}
	below := []string{"dataplane", "admission", "manager", "pool", "store", "cluster", "backend", "agent", "netpolicy", "template", "sandbox"}
	rules := []struct {
		dirs      []string
		forbidden []string
		why       string
	}{
		{doors, []string{"backend", "agent/agentclient"}, "doors reach sandboxes through dataplane and manager"},
		{below, doors, "the layers below the doors know no protocol"},
		{[]string{"compat/e2b"}, []string{"compat/agentscope"}, "one protocol's front end does not lean on another's"},
		{[]string{"compat/agentscope"}, []string{"compat/e2b"}, "one protocol's front end does not lean on another's"},
	}
	fset := token.NewFileSet()
	for _, r := range rules {
		for _, dir := range r.dirs {
			err := filepath.WalkDir(filepath.Join("..", dir), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
					return err
				}
				// Test helpers of a layer (backendtest, agenttest) may
				// drive what they test.
				if strings.Contains(p, "test"+string(filepath.Separator)) {
					return nil
				}
				f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
				if err != nil {
					return err
				}
				for _, imp := range f.Imports {
					path, _ := strconv.Unquote(imp.Path.Value)
					for _, bad := range r.forbidden {
						if path == mod+bad || strings.HasPrefix(path, mod+bad+"/") {
							t.Errorf("%s imports %s: %s", p, path, r.why)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
