package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// npmPackages returns dir once its node_modules holds every package of
// pkgs ("name@version", scoped names included) at exactly that version,
// installing them from npm under the cache lock of dir when it does not:
// the one installer of the pinned npm packages the suites drive. Without
// node or npm the test is skipped (failed in CI, failOrSkip), since a
// machine without them cannot run the suite; with them, a failed or short
// install fails it.
func npmPackages(t *testing.T, ctx context.Context, dir string, pkgs ...string) string {
	t.Helper()
	if npmInstalled(dir, pkgs) {
		return dir
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			failOrSkip(t, "needs %s (apt-get install nodejs npm) for %v: %v", tool, pkgs, err)
		}
	}
	lockCache(t, ctx, dir+".lock")
	if npmInstalled(dir, pkgs) { // another test installed them while this one waited
		return dir
	}
	args := append([]string{"install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error"}, pkgs...)
	if out, err := exec.CommandContext(ctx, "npm", args...).CombinedOutput(); err != nil {
		t.Fatalf("npm install %v: %v\n%s", pkgs, err, out)
	}
	if !npmInstalled(dir, pkgs) {
		t.Fatalf("npm installed %v in %s but not the pinned versions", pkgs, dir)
	}
	return dir
}

// npmInstalled reports whether dir's node_modules holds each of pkgs at
// its pinned version.
func npmInstalled(dir string, pkgs []string) bool {
	for _, p := range pkgs {
		i := strings.LastIndex(p, "@")
		if i <= 0 {
			return false
		}
		data, err := os.ReadFile(filepath.Join(dir, "node_modules", p[:i], "package.json"))
		if err != nil {
			return false
		}
		var manifest struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(data, &manifest) != nil || manifest.Version != p[i+1:] {
			return false
		}
	}
	return true
}
