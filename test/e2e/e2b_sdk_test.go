package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// The pinned E2B SDKs of test/compat/e2b/package.json.
var e2bPackages = []string{"e2b@2.51.0", "@e2b/code-interpreter@2.8.0"}

// e2bSDK returns a directory whose node_modules holds the pinned E2B SDKs:
// AGENTBOX_E2B_SDK (scripts/test.sh installs them there), else one in the
// test cache, installed from npm when missing (npmPackages).
func e2bSDK(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := os.Getenv("AGENTBOX_E2B_SDK")
	if dir == "" {
		dir = filepath.Join(testCache(t), "e2b-sdk")
	}
	return npmPackages(t, ctx, dir, e2bPackages...)
}

// The pinned E2B CLI (test/compat/e2b/cli.test.cjs).
const e2bCLIPackage = "@e2b/cli@2.19.0"

// e2bCLI returns the path of the pinned E2B CLI, installed from npm into
// the test cache once.
func e2bCLI(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := npmPackages(t, ctx, filepath.Join(testCache(t), "e2b-cli-"+e2bCLIPackage[strings.LastIndex(e2bCLIPackage, "@")+1:]), e2bCLIPackage)
	return filepath.Join(dir, "node_modules", ".bin", "e2b")
}

// TestE2BSDK runs test/compat/e2b (node's test runner) with the unmodified
// e2b and @e2b/code-interpreter SDKs against a real daemon, configured by
// nothing but the environment variables `agentbox e2b env` prints. The
// daemon serves the built-in templates (base, code-interpreter) from the
// test cache's template store, built as TestBuiltinTemplates builds them.
func TestE2BSDK(t *testing.T) {
	runE2BSuite(t, nil, nil, nil)
}

// TestE2BSDKGVisor runs the E2B SDK suite with the built-in templates at
// isolation gvisor (TEMPLATE_ISOLATION): the files of the suite that drive
// one sandbox's data plane and lifecycle (commands with their PTY, code
// contexts, files with a 200 MB transfer, the data plane's token,
// lifecycle and tenancy, E2B's documented behaviours), every test of them
// but those whose feature Capabilities.gvisor declares missing, which the
// suite skips naming the capability (previews: no_ports; root on request:
// no_root_on_request). Every sandbox checks it runs on gVisor's kernel.
// Left out, as wholly outside the level: pause.test.cjs (no_pause),
// volumes.test.cjs (volumes, snapshots, fork), template.test.cjs (a build
// runs its steps as root), and the control-plane and CLI files, which do
// not depend on the isolation level.
func TestE2BSDKGVisor(t *testing.T) {
	runsc := testutil.Runsc(t)
	files := []string{"commands.test.cjs", "code.test.cjs", "files.test.cjs", "dataplane.test.cjs", "lifecycle.test.cjs", "parity.test.cjs"}
	runE2BSuite(t, []string{"RUNSC_PATH=" + runsc, `TEMPLATE_ISOLATION={"base":"gvisor","code-interpreter":"gvisor","code-interpreter-v1":"gvisor"}`},
		files, func(d *daemon, key string) []string {
			return []string{"AGENTBOX_KERNEL=gvisor", "AGENTBOX_LACKS=" + strings.Join(gvisorLacks(t, d, key), ",")}
		})
}

// gvisorLacks lists the features /v1/info's capabilities.gvisor declares
// missing (its true flags, by JSON name): the E2B suite skips what needs
// them (helpers.cjs lacks).
func gvisorLacks(t *testing.T, d *daemon, key string) []string {
	t.Helper()
	_, data := d.call(t, "GET", "/v1/info", key, nil)
	caps, _ := mustJSON(t, data)["capabilities"].(map[string]any)
	g, _ := caps["gvisor"].(map[string]any)
	if g == nil {
		t.Fatalf("/v1/info has no capabilities.gvisor: %s", data)
	}
	var lacks []string
	for k, v := range g {
		if v == true {
			lacks = append(lacks, k)
		}
	}
	sort.Strings(lacks)
	t.Logf("capabilities.gvisor: %v", lacks)
	return lacks
}

// runE2BSuite starts a daemon (with daemonEnv more) serving the built-in
// templates and runs the suite's files (all when nil) with the E2B
// environment and, when suiteEnv is set, the variables it returns.
func runE2BSuite(t *testing.T, daemonEnv, only []string, suiteEnv func(d *daemon, key string) []string) {
	testutil.RequireRoot(t)
	ctx := waitCtx(t, 20*time.Minute)
	sdk := e2bSDK(t, ctx)
	cli := e2bCLI(t, ctx)
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	const key, otherKey, thirdKey = "e2b_0a1b2c3d4e5f60718293a4b5c6d7e8f9", "e2b_ffeeddccbbaa99887766554433221100", "e2b_00112233445566778899aabbccddeeff"
	d := startDaemon(t, append([]string{"API_KEYS=" + key + ":alice," + otherKey + ":bob," + thirdKey + ":carol", "TEMPLATE_DIR=" + tmplDir, "TEMPLATE_ADMIN_USERS=alice"}, daemonEnv...)...)
	ensureBuiltinTemplates(t, ctx, d, key)

	bin, _ := binaries(t)
	envCmd := exec.CommandContext(ctx, bin, "e2b", "env", "--url", d.url, "--api-key", key)
	out, err := envCmd.Output()
	if err != nil {
		t.Fatalf("agentbox e2b env: %v", err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NODE_PATH=" + filepath.Join(sdk, "node_modules"),
		"E2B_OTHER_API_KEY=" + otherKey, "E2B_THIRD_API_KEY=" + thirdKey, "E2B_CLI=" + cli}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		kv := strings.TrimPrefix(line, "export ")
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, k+"="+strings.Trim(v, "'"))
	}
	t.Logf("environment: %s", strings.Join(env[6:], " "))
	if suiteEnv != nil {
		env = append(env, suiteEnv(d, key)...)
	}

	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(root, "test", "compat", "e2b")
	files, _ := filepath.Glob(filepath.Join(suite, "*.test.cjs"))
	if only != nil {
		files = files[:0]
		for _, f := range only {
			files = append(files, filepath.Join(suite, f))
		}
	}
	if f := os.Getenv("E2B_SUITE"); f != "" {
		files = []string{filepath.Join(suite, f)}
	}
	args := append([]string{"--test", "--test-concurrency=2", "--test-reporter=spec"}, files...)
	node := exec.CommandContext(ctx, "node", args...)
	node.Dir = suite
	node.Env = env
	res, err := node.CombinedOutput()
	t.Logf("node --test:\n%s", res)
	if err != nil {
		t.Fatalf("the E2B SDK suite failed: %v", err)
	}
}

// ensureBuiltinTemplates builds templates/base and templates/code-
// interpreter into d's template store: the suite runs on the templates of
// this checkout (an unchanged build is all cache hits). Without mmdebstrap
// a store that has them is used as it is.
func ensureBuiltinTemplates(t *testing.T, ctx context.Context, d *daemon, key string) {
	t.Helper()
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if getTemplateStatus(t, d, key, "base:latest") && getTemplateStatus(t, d, key, "code-interpreter:latest") {
			return
		}
		t.Skip("needs mmdebstrap (apt-get install mmdebstrap) to bootstrap the built-in templates")
	}
	bin, _ := binaries(t)
	run := func(args ...string) {
		root, _ := testutil.ModuleRoot()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = root
		cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+key)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agentbox %s: %v\n%s", strings.Join(args, " "), err, lastLines(string(out), 40))
		}
	}
	run("template", "bootstrap", "debian:bookworm")
	for _, name := range []string{"base", "code-interpreter"} {
		run(append(append([]string{"template", "build", "-t", name}, builtinSecrets()...), "templates/"+name)...)
	}
}

func getTemplateStatus(t *testing.T, d *daemon, key, ref string) bool {
	status, _ := d.call(t, "GET", "/v1/templates/"+ref, key, nil)
	return status == 200
}

// BenchmarkE2BSDK: the E2B SDKs' round trips through the daemon (create,
// commands.run('true'), runCode('1+1'), pause and resume), each next to
// the native API's same operation from the same Node process, on the
// built-in templates of the test cache (run TestE2BSDK or make templates
// first). b.N is ignored: test/compat/e2b/bench.cjs runs E2B_BENCH_N
// (default 20) of each and reports p50/p90 in milliseconds.
//
//	go test -run '^$' -bench E2BSDK -benchtime 1x ./test/e2e/
func BenchmarkE2BSDK(b *testing.B) {
	dir := os.Getenv("AGENTBOX_E2B_SDK")
	if dir == "" {
		home, _ := os.UserCacheDir()
		dir = filepath.Join(home, "agentbox-test", "e2b-sdk")
		if c := os.Getenv("AGENTBOX_TEST_CACHE"); c != "" {
			dir = filepath.Join(c, "e2b-sdk")
		}
	}
	if !npmInstalled(dir, e2bPackages) {
		b.Skipf("the pinned E2B SDKs are not in %s (run TestE2BSDK or scripts/test.sh)", dir)
	}
	tmplDir := filepath.Join(filepath.Dir(dir), "templates")
	url := startBenchDaemon(b, "TEMPLATE_DIR="+tmplDir)
	root, err := testutil.ModuleRoot()
	if err != nil {
		b.Fatal(err)
	}
	node := exec.Command("node", "bench.cjs")
	node.Dir = filepath.Join(root, "test", "compat", "e2b")
	port := url[strings.LastIndex(url, ":")+1:]
	node.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir(), "NODE_PATH=" + filepath.Join(dir, "node_modules"),
		"E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_DOMAIN=localhost:" + port, "E2B_API_KEY=e2b_00000000000000000000000000000000",
		"E2B_BENCH_N=" + os.Getenv("E2B_BENCH_N")}
	var stderr testutil.SyncBuffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		b.Fatalf("bench.cjs: %v\n%s%s", err, out, stderr.String())
	}
	var res map[string]struct {
		N        int
		P50, P90 float64
	}
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("bench.cjs output %q: %v", out, err)
	}
	names := make([]string, 0, len(res))
	for k := range res {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := res[k]
		b.Logf("%-52s n=%-4d p50 %8.2f ms   p90 %8.2f ms", k, v.N, v.P50, v.P90)
	}
}
