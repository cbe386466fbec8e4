package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goSDKProgram is the Go SDK example of docs/quickstart.md as a program.
const goSDKProgram = `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/client"
)

func main() {
	ctx := context.Background()
	c, err := client.FromEnv() // AGENTBOX_URL, AGENTBOX_API_KEY
	if err != nil {
		panic(err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Timeout: 10 * time.Minute})
	if err != nil {
		panic(err)
	}
	defer c.Delete(ctx, sb.ID)
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"python3", "-c", "print(6*7)"}})
	if err != nil {
		panic(err)
	}
	fmt.Print(res.Stdout) // 42
}
`

// TestGoSDKDependency: another module uses the Go SDK the way
// docs/quickstart.md says (a replace to the checkout, go mod tidy) and
// builds and vets the example program.
func TestGoSDKDependency(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goSDKProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	// The module cache, proxy and build cache stay the caller's; nothing
	// of this module reaches the checkout.
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	run(t, dir, env, "go", "mod", "init", "example.com/sdkuser")
	run(t, dir, env, "go", "mod", "edit", "-replace", "github.com/agentbox/agentbox="+root)
	run(t, dir, env, "go", "mod", "tidy")
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "require github.com/agentbox/agentbox v0.0.0-00010101000000-000000000000") {
		t.Errorf("go mod tidy wrote:\n%s\nwant it to require github.com/agentbox/agentbox at the replaced version docs/quickstart.md shows", gomod)
	}
	run(t, dir, env, "go", "vet", ".")
	run(t, dir, env, "go", "build", "-o", filepath.Join(dir, "app"), ".")
	// The SDK's dependencies are few: a program using it does not link the
	// daemon's (libcontainer, Kubernetes, Docker).
	deps := run(t, dir, env, "go", "list", "-deps", "-f", "{{.ImportPath}}", ".")
	for _, heavy := range []string{"github.com/opencontainers/runc", "k8s.io/client-go", "github.com/moby/moby", "github.com/agentbox/agentbox/internal/"} {
		if strings.Contains(deps, heavy) {
			t.Errorf("a program using the Go SDK links %s", heavy)
		}
	}
}
