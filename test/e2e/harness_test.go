// Package e2e drives a real agentbox daemon process (native backend, real
// sandboxes) through raw HTTP and the Go SDK only.
package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	if err := setUpSpecCheck(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if binDir != "" && os.Getenv("AGENTBOX_BIN") == "" {
		os.RemoveAll(binDir)
	}
	testutil.Cleanup()
	os.Exit(code)
}

// binaries returns the daemon binary and the agent binary: the ones named
// by AGENTBOX_BIN / AGENTBOX_AGENT_PATH (set by the Makefile), or freshly
// built ones.
func binaries(t *testing.T) (daemonBin, agentBin string) {
	t.Helper()
	agentBin = testutil.AgentBinary(t)
	if p := os.Getenv("AGENTBOX_BIN"); p != "" {
		return p, agentBin
	}
	buildOnce.Do(func() {
		root, err := testutil.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		binDir, buildErr = os.MkdirTemp("", "agentbox-e2e-")
		if buildErr != nil {
			return
		}
		// As make build: bin/agentbox without Kubernetes support, which
		// hands it to agentbox-kube beside it.
		for _, b := range [][]string{{"-tags", "nokube", "-o", filepath.Join(binDir, "agentbox")}, {"-o", filepath.Join(binDir, "agentbox-kube")}} {
			cmd := exec.Command("go", append(append([]string{"build"}, b...), "./cmd/agentbox")...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("build daemon: %v: %s", err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "agentbox"), agentBin
}

// daemon is a running `agentbox serve`.
type daemon struct {
	t       *testing.T
	url     string
	dataDir string
	env     []string
	args    []string // after "serve"
	cmd     *exec.Cmd
	logs    *testutil.SyncBuffer
	done    chan struct{}
	spec    *specLog // what its API did against api/openapi.yaml (spec_harness_test.go)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startDaemon starts a daemon with settings (NAME=VALUE) on a fresh data
// dir and waits until it is ready. It is stopped (SIGTERM) at cleanup.
func startDaemon(t *testing.T, settings ...string) *daemon {
	t.Helper()
	testutil.RequireRoot(t)
	return startDaemonIn(t, testutil.ShortTempDir(t), settings...)
}

// startDaemonIn is startDaemon on a data dir the test made (a small
// filesystem of its own, say).
func startDaemonIn(t *testing.T, dataDir string, settings ...string) *daemon {
	t.Helper()
	return startDaemonArgs(t, dataDir, nil, settings...)
}

// startDaemonArgs is startDaemonIn with arguments after "serve".
func startDaemonArgs(t *testing.T, dataDir string, args []string, settings ...string) *daemon {
	t.Helper()
	testutil.RequireRoot(t)
	lockCachedTemplates(t, settings)
	d := &daemon{t: t, dataDir: dataDir, args: args}
	d.env = append([]string{"HOST=127.0.0.1", "AGENTBOX_DATA_DIR=" + d.dataDir, "LOG_LEVEL=debug"}, settings...)
	d.env = withSharedSecretsKey(d.env)
	d.start()
	t.Cleanup(func() {
		d.stop()
		d.specReport(t)
		if t.Failed() {
			t.Logf("daemon log (last lines):\n%s", lastLines(d.logs.String(), 150))
		}
		assertNoLeftovers(t, d.dataDir)
	})
	return d
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// start (re)starts the daemon process on a new port with d's settings.
func (d *daemon) start() {
	t := d.t
	t.Helper()
	daemonBin, agentBin := binaries(t)
	port := freePort(t)
	d.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	d.specWatch()
	d.logs = &testutil.SyncBuffer{}
	d.cmd = exec.Command(daemonBin, append([]string{"serve"}, d.args...)...)
	d.cmd.Env = append(append(cleanEnv(), "AGENT_PATH="+agentBin, fmt.Sprintf("PORT=%d", port)), d.env...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(d.cmd, d.done)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(d.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-d.done:
			t.Fatalf("daemon exited during start:\n%s", d.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			t.Fatalf("daemon not ready after 60s:\n%s", d.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanEnv is the test's environment minus settings the daemon would read.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOST", "PORT", "BEARER_TOKEN", "API_KEYS", "POOL_SIZE", "DEFAULT_SANDBOX_TYPE", "AUTO_CLEANUP", "AGENTBOX_URL", "AGENTBOX_API_KEY", "TEMPLATE_AUTO_BUILD",
			"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS":
			continue
		}
		out = append(out, kv)
	}
	// Daemons of the tests build no built-in template at start (two cores
	// would spend minutes on each): TestAutoBuildTemplates turns it on.
	return append(out, "TEMPLATE_AUTO_BUILD=off")
}

// stop sends SIGTERM and waits for a graceful exit.
func (d *daemon) stop() {
	if d.cmd == nil || d.cmd.ProcessState != nil {
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(2 * time.Minute):
		d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("daemon did not stop within 2 minutes:\n%s", d.logs.String())
	}
}

// kill sends SIGKILL: no cleanup at all.
func (d *daemon) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// sdk returns a Go SDK client for the daemon.
func (d *daemon) sdk(t *testing.T, apiKey string) *client.Client {
	t.Helper()
	opts := []client.Option{client.WithHTTPClient(specHTTPClient())}
	if apiKey != "" {
		opts = append(opts, client.WithAPIKey(apiKey))
	}
	c, err := client.New(d.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// call does a raw HTTP request and returns status and body.
func (d *daemon) call(t *testing.T, method, path, key string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1] // net/http takes the Host header from here
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// mustJSON decodes body into a map, failing the test on bad JSON.
func mustJSON(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("bad JSON %q: %v", body, err)
	}
	return m
}

// assertNoLeftovers checks that the daemon's data dir holds no mounts and no
// sandbox directories once everything was destroyed (AUTO_CLEANUP), and no
// sandbox processes remain.
func assertNoLeftovers(t *testing.T, dataDir string) {
	t.Helper()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, dataDir+"/") {
			t.Errorf("mount left behind: %s", line)
		}
	}
	// The backend's cgroup (agentbox/<hash of its state dir>) in every hierarchy.
	sum := sha256.Sum256([]byte(filepath.Join(dataDir, "native")))
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/" + hex.EncodeToString(sum[:6])); len(dirs) > 0 {
		t.Errorf("cgroups left behind: %v", dirs)
	}
	for _, sub := range []string{"native/state/sb", "native/disks", "docker/sb"} {
		entries, _ := os.ReadDir(filepath.Join(dataDir, sub))
		for _, e := range entries {
			t.Errorf("%s left behind: %s", sub, e.Name())
		}
	}
}

// execCommand prepares bin with the cleaned test environment.
func execCommand(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	return cmd
}

// testSecretsKey is the secrets key of test daemons on a shared (Redis)
// store, which refuse to start without one (docs/secrets.md).
var testSecretsKey = strings.Repeat("a7", 32)

// withSharedSecretsKey gives env the test secrets key when it puts the
// daemon on Redis and names no key of its own.
func withSharedSecretsKey(env []string) []string {
	redis := false
	for _, kv := range env {
		if strings.HasPrefix(kv, "SECRETS_KEY") {
			return env
		}
		if v, ok := strings.CutPrefix(kv, "REDIS_ENABLED="); ok {
			redis = strings.EqualFold(v, "true") || v == "1"
		}
	}
	if !redis {
		return env
	}
	return append(env, "SECRETS_KEY="+testSecretsKey)
}
