package packaging

import (
	"os"
	"os/exec"
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

// TestGoSDKGoGet: the Go module proxy tree `make release` ships
// (tools/goproxy) serves the SDK to a plain `go get` of
// github.com/agentbox/agentbox/client at its version, as
// docs/quickstart.md says, and the example program builds on it. The SDK's
// own dependencies come from the caller's module cache and proxy; the
// module version it adds to the module cache is removed after.
func TestGoSDKGoGet(t *testing.T) {
	root := repoRoot(t)
	tree := t.TempDir()
	version := strings.TrimSpace(run(t, root, nil, "go", "run", "./tools/goproxy", "-out", tree))
	if !strings.HasPrefix(version, "v0.0.0-") {
		t.Fatalf("tools/goproxy: version %q, want HEAD's pseudo-version", version)
	}
	modcache := strings.TrimSpace(run(t, root, nil, "go", "env", "GOMODCACHE"))
	t.Cleanup(func() {
		for _, p := range []string{
			filepath.Join(modcache, "github.com", "agentbox", "agentbox@"+version),
			filepath.Join(modcache, "cache", "download", "github.com", "agentbox", "agentbox", "@v"),
		} {
			_ = exec.Command("chmod", "-R", "u+w", p).Run()
			if strings.HasSuffix(p, "@v") {
				matches, _ := filepath.Glob(filepath.Join(p, version+".*"))
				for _, m := range matches {
					os.Remove(m)
				}
				continue
			}
			os.RemoveAll(p)
		}
	})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goSDKProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	proxy := strings.TrimSpace(run(t, root, nil, "go", "env", "GOPROXY"))
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=file://" + tree + "," + proxy, "GONOSUMDB=github.com/agentbox/agentbox"}
	run(t, dir, env, "go", "mod", "init", "example.com/sdkuser")
	run(t, dir, env, "go", "get", "github.com/agentbox/agentbox/client@"+version)
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "github.com/agentbox/agentbox "+version) {
		t.Errorf("go get wrote:\n%s\nwant it to require github.com/agentbox/agentbox %s", gomod, version)
	}
	run(t, dir, env, "go", "build", "-o", filepath.Join(dir, "app"), ".")
}
