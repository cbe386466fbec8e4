package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// The pinned Daytona SDK of test/compat/daytona/package.json.
const daytonaPackage = "@daytonaio/sdk@0.218.0"

// daytonaSDK returns a directory whose node_modules holds the pinned
// Daytona SDK: AGENTBOX_DAYTONA_SDK (scripts/test.sh installs it there),
// else one in the test cache, installed from npm when missing.
func daytonaSDK(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := os.Getenv("AGENTBOX_DAYTONA_SDK")
	if dir == "" {
		dir = filepath.Join(testCache(t), "daytona-sdk")
	}
	return npmPackages(t, ctx, dir, daytonaPackage)
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
	d := startDaemon(t, "API_KEYS="+key+":alice,"+otherKey+":bob", "TEMPLATE_DIR="+tmplDir, "TEMPLATE_ADMIN_USERS=alice",
		// A build step asks for a MAX_DISK disk (default 20 GiB) next to the
		// suite's own sandboxes: on a small disk every build was refused.
		"MAX_DISK=8G")
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

// daytonaEnv is the environment of the Daytona SDK suite against the
// daemon at url: what `agentbox daytona env` prints.
func daytonaEnv(t *testing.T, ctx context.Context, sdk, url, key string, more ...string) []string {
	t.Helper()
	bin, _ := binaries(t)
	out, err := exec.CommandContext(ctx, bin, "daytona", "env", "--url", url, "--api-key", key).Output()
	if err != nil {
		t.Fatalf("agentbox daytona env: %v", err)
	}
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NODE_PATH=" + filepath.Join(sdk, "node_modules")}, more...)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		env = append(env, k+"="+strings.Trim(v, "'"))
	}
	return env
}

// runDaytonaSuite runs files of test/compat/daytona with node's test
// runner in env.
func runDaytonaSuite(t *testing.T, ctx context.Context, env []string, files ...string) {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(root, "test", "compat", "daytona")
	for i, f := range files {
		files[i] = filepath.Join(suite, f)
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

// TestDaytonaSDKNetwork: the unmodified Daytona SDK's network settings
// (networkAllowList, domainAllowList, networkBlockAll at create and
// through updateNetworkSettings) enforced by agentbox's egress policy:
// test/compat/daytona/network.egress.cjs fetches hosts of the test's own
// internet from inside the sandboxes.
func TestDaytonaSDKNetwork(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := waitCtx(t, 10*time.Minute)
	sdk := daytonaSDK(t, ctx)
	inet := newTestInternet(t, map[string]string{"api.test": "198.18.77.1", "evil.test": "198.18.77.3"})
	suffix := inet.hostIf[len(inet.hostIf)-6:]
	const key = "dtn_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	d := startDaemon(t, "NETWORK=on", "NETWORK_BRIDGE=abxb"+suffix, "NETWORK_DNS="+inet.addr, "API_KEYS="+key+":alice")
	runDaytonaSuite(t, ctx, daytonaEnv(t, ctx, sdk, d.url, key), "network.egress.cjs")
}

// TestDaytonaSDKAutoStop: a sandbox's auto-stop pauses it on the native
// backend (Daytona's stop that keeps the sandbox), and start resumes it
// with its memory: test/compat/daytona/autostop.short.cjs against a
// daemon whose MAX_TIMEOUT is five seconds.
func TestDaytonaSDKAutoStop(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := waitCtx(t, 5*time.Minute)
	sdk := daytonaSDK(t, ctx)
	const key = "dtn_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	d := startDaemon(t, "API_KEYS="+key+":alice", "MAX_TIMEOUT=5", "DEFAULT_TIMEOUT=5")
	runDaytonaSuite(t, ctx, daytonaEnv(t, ctx, sdk, d.url, key), "autostop.short.cjs")
}

// TestDaytonaSDKTwoReplicas: the Daytona SDK suite through a round-robin
// balancer over two replicas on one Redis: creates are placed on either,
// and the control plane (by ID and by name), the toolbox and its
// sessions of a sandbox reach the replica that runs it from either.
func TestDaytonaSDKTwoReplicas(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := waitCtx(t, 20*time.Minute)
	sdk := daytonaSDK(t, ctx)
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	const key, otherKey = "dtn_0a1b2c3d4e5f60718293a4b5c6d7e8f9", "dtn_ffeeddccbbaa99887766554433221100"
	{
		d := startDaemon(t, "API_KEYS="+key+":alice", "TEMPLATE_DIR="+tmplDir, "TEMPLATE_ADMIN_USERS=alice")
		ensureBuiltinTemplates(t, ctx, d, key)
		d.stop()
	}
	copyDir := filepath.Join(testutil.ShortTempDir(t), "templates")
	if out, err := exec.CommandContext(ctx, "cp", "-al", tmplDir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("hard-link copy of the template store: %v %s", err, out)
	}
	if err := os.Remove(filepath.Join(copyDir, "lock")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	srv := testutil.StartRedis(t)
	settings := []string{"REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port),
		"API_KEYS=" + key + ":alice," + otherKey + ":bob,ko:ops", "TEMPLATE_ADMIN_USERS=ops", "CLUSTER_SECRET=" + clusterSecret, "NETWORK=off"}
	a := startDaemon(t, append(settings, "NODE_ID=r0", "TEMPLATE_DIR="+tmplDir)...)
	b := startDaemon(t, append(settings, "NODE_ID=r1", "TEMPLATE_DIR="+copyDir)...)
	waitNodes(t, a, 2)
	waitNodes(t, b, 2)
	url, served := roundRobin(t, []*daemon{a, b})
	// Not lifecycle.test.cjs: a local volume lives on one replica, and
	// its sandboxes must be made there (docs/volumes.md). Nor
	// image.test.cjs: a build's state and log, and the context upload
	// credentials, are the replica's that took them (docs/daytona.md).
	runDaytonaSuite(t, ctx, daytonaEnv(t, ctx, sdk, url, key, "DAYTONA_OTHER_API_KEY="+otherKey),
		"sandbox.test.cjs", "sessions.test.cjs", "pty.test.cjs", "interpreter.test.cjs")
	if n0, n1 := served[0].Load(), served[1].Load(); n0 < 50 || n1 < 50 {
		t.Fatalf("the balancer sent %d and %d requests to the replicas", n0, n1)
	}
	for _, d := range []*daemon{a, b} {
		if !strings.Contains(d.logs.String(), "serving a forwarded request") {
			t.Fatalf("%s served no forwarded request", d.url)
		}
	}
}

// BenchmarkDaytonaSDK: the Daytona SDK's create, executeCommand('true')
// and codeRun next to the E2B SDK's create and commands.run('true'),
// against one daemon on the built-in templates of the test cache (run
// TestDaytonaSDK and TestE2BSDK first). b.N is ignored:
// test/compat/daytona/bench.cjs runs DAYTONA_BENCH_N (default 50) of each
// and reports p50/p99 in milliseconds.
//
//	go test -run '^$' -bench DaytonaSDK -benchtime 1x ./test/e2e/
func BenchmarkDaytonaSDK(b *testing.B) {
	cache := os.Getenv("AGENTBOX_TEST_CACHE")
	if cache == "" {
		home, _ := os.UserCacheDir()
		cache = filepath.Join(home, "agentbox-test")
	}
	dsdk, esdk := filepath.Join(cache, "daytona-sdk"), filepath.Join(cache, "e2b-sdk")
	if d := os.Getenv("AGENTBOX_DAYTONA_SDK"); d != "" {
		dsdk = d
	}
	if d := os.Getenv("AGENTBOX_E2B_SDK"); d != "" {
		esdk = d
	}
	if !npmInstalled(esdk, e2bPackages) {
		b.Skipf("the pinned E2B SDKs are not in %s (run TestE2BSDK)", esdk)
	}
	if !npmInstalled(dsdk, []string{daytonaPackage}) {
		b.Skipf("the pinned Daytona SDK is not in %s (run TestDaytonaSDK)", dsdk)
	}
	url := startBenchDaemon(b, "TEMPLATE_DIR="+filepath.Join(cache, "templates"))
	root, err := testutil.ModuleRoot()
	if err != nil {
		b.Fatal(err)
	}
	node := exec.Command("node", "bench.cjs")
	node.Dir = filepath.Join(root, "test", "compat", "daytona")
	port := url[strings.LastIndex(url, ":")+1:]
	node.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.TempDir(),
		"NODE_PATH=" + filepath.Join(dsdk, "node_modules") + ":" + filepath.Join(esdk, "node_modules"),
		"DAYTONA_API_URL=" + url + "/api", "DAYTONA_API_KEY=keyless",
		"E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_DOMAIN=localhost:" + port, "E2B_API_KEY=e2b_00000000000000000000000000000000",
		"DAYTONA_BENCH_N=" + os.Getenv("DAYTONA_BENCH_N")}
	var stderr testutil.SyncBuffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		b.Fatalf("bench.cjs: %v\n%s%s", err, out, stderr.String())
	}
	var res map[string]struct {
		N        int
		P50, P99 float64
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
		b.Logf("%-44s n=%-4d p50 %8.2f ms   p99 %8.2f ms", k, v.N, v.P50, v.P99)
	}
}
