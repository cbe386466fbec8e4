package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// The pinned Daytona SDK of test/compat/daytona/package.json.
const daytonaPackage, daytonaVersion = "@daytonaio/sdk", "0.218.0"

// daytonaSDK returns a directory whose node_modules holds the pinned
// Daytona SDK: AGENTBOX_DAYTONA_SDK (scripts/test.sh installs it there),
// else one in the test cache, installed from npm when missing.
func daytonaSDK(t *testing.T, ctx context.Context) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("needs node (apt-get install nodejs npm) to run the Daytona SDK suite")
	}
	dir := os.Getenv("AGENTBOX_DAYTONA_SDK")
	if dir == "" {
		dir = filepath.Join(testCache(t), "daytona-sdk")
	}
	installed := func() bool {
		data, err := os.ReadFile(filepath.Join(dir, "node_modules", "@daytonaio", "sdk", "package.json"))
		return err == nil && strings.Contains(string(data), `"version": "`+daytonaVersion+`"`)
	}
	if installed() {
		return dir
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("needs npm to install the pinned Daytona SDK")
	}
	lockCache(t, ctx, dir+".lock")
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", daytonaPackage+"@"+daytonaVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s@%s: %v\n%s", daytonaPackage, daytonaVersion, err, out)
	}
	if !installed() {
		t.Fatalf("npm installed %s@%s in %s but not the pinned version", daytonaPackage, daytonaVersion, dir)
	}
	return dir
}

// TestDaytonaSDK runs test/compat/daytona (node's test runner) with the
// unmodified @daytonaio/sdk against a real daemon, configured by nothing
// but DAYTONA_API_URL and DAYTONA_API_KEY, on the built-in templates of
// the test cache's template store.
func TestDaytonaSDK(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := waitCtx(t, 10*time.Minute)
	sdk := daytonaSDK(t, ctx)
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	const key, otherKey = "dtn_0a1b2c3d4e5f60718293a4b5c6d7e8f9", "dtn_ffeeddccbbaa99887766554433221100"
	d := startDaemon(t, "API_KEYS="+key+":alice,"+otherKey+":bob", "TEMPLATE_DIR="+tmplDir, "TEMPLATE_ADMIN_USERS=alice")
	ensureBuiltinTemplates(t, ctx, d, key)

	bin, _ := binaries(t)
	out, err := exec.CommandContext(ctx, bin, "daytona", "env", "--url", d.url, "--api-key", key).Output()
	if err != nil {
		t.Fatalf("agentbox daytona env: %v", err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NODE_PATH=" + filepath.Join(sdk, "node_modules"),
		"DAYTONA_OTHER_API_KEY=" + otherKey}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		env = append(env, k+"="+strings.Trim(v, "'"))
	}
	t.Logf("environment: %s", strings.Join(env[4:], " "))

	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(root, "test", "compat", "daytona")
	files, _ := filepath.Glob(filepath.Join(suite, "*.test.cjs"))
	if f := os.Getenv("DAYTONA_SUITE"); f != "" {
		files = []string{filepath.Join(suite, f)}
	}
	node := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-concurrency=2", "--test-reporter=spec"}, files...)...)
	node.Dir = suite
	node.Env = env
	res, err := node.CombinedOutput()
	t.Logf("node --test:\n%s", res)
	if err != nil {
		t.Fatalf("the Daytona SDK suite failed: %v", err)
	}
}
