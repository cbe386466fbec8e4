package sandbox

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// errTextAllowed are the places that still classify an error by its text,
// each because the library that makes it exposes no type or value to test
// for: file, then the reason.
var errTextAllowed = map[string]string{
	"cmd/agentbox/main.go": "cobra's unknown-command error is a plain fmt.Errorf",
	// Not a classification: the conformance suite first classifies by
	// sandbox.ClassOf, then holds that the message tells the user why.
	"internal/backend/backendtest/security_root.go": "asserts the wording a user reads after ClassOf has classified the error",
	"internal/httpapi/server.go":                    `encoding/json's DisallowUnknownFields error is errors.New("json: unknown field ...")`,
	"internal/template/pull.go":                     "go-containerregistry's missing-platform error is a plain fmt.Errorf",
}

// TestNoErrorClassifiedByText: no non-test source of the module decides
// what an error is by matching its message — strings.Contains, HasPrefix,
// HasSuffix, EqualFold or Index of X.Error(), or X.Error() compared with
// == or != — but with errors.Is and errors.As on sentinels and types
// (agentclient.ErrExecutableNotFound, http.MaxBytesError, ...). Messages
// change; types are the contract.
func TestNoErrorClassifiedByText(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "web", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		ast.Inspect(f, func(n ast.Node) bool {
			var hit bool
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isIdent(sel.X, "strings") {
					switch sel.Sel.Name {
					case "Contains", "HasPrefix", "HasSuffix", "EqualFold", "Index", "TrimPrefix":
						for _, a := range n.Args {
							hit = hit || isErrorCall(a)
						}
					}
				}
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					hit = isErrorCall(n.X) || isErrorCall(n.Y)
				}
			}
			if hit {
				found[rel] = true
				if _, ok := errTextAllowed[rel]; !ok {
					t.Errorf("%s: an error classified by its message; use errors.Is or errors.As (or allow the file, saying why)", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for file := range errTextAllowed {
		if !found[file] {
			t.Errorf("%s is allowed to match error text but no longer does: drop it from errTextAllowed", file)
		}
	}
}

// isErrorCall reports whether e is X.Error() with no arguments.
func isErrorCall(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 0 {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Error"
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
