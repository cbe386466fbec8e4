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
