package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/loadtest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// loadEnv reads an int or duration knob of the load and soak tests.
func loadEnv(t *testing.T, name string, def string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func loadInt(t *testing.T, name string, def int) int {
	t.Helper()
	n, err := strconv.Atoi(loadEnv(t, name, strconv.Itoa(def)))
	if err != nil || n <= 0 {
		t.Fatalf("%s: want a positive integer", name)
	}
	return n
}

func loadDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(loadEnv(t, name, def.String()))
	if err != nil || d <= 0 {
		t.Fatalf("%s: want a duration such as 2m", name)
	}
	return d
}

// loadMetricsToken reads the daemon's /metrics in the load and soak tests.
const loadMetricsToken = "load-metrics"

// loadDaemon starts a daemon for load: a warm pool, the agentscope routes,
// sandbox networking on a bridge and subnet of its own (so the veth and
// nftables checks see only this daemon's), and a TMPDIR of its own (so the
// temp-file check sees only its files).
func loadDaemon(t *testing.T, subnet string, settings ...string) (*daemon, loadtest.Target) {
	t.Helper()
	bridge := "abxl" + string(sandbox.NewID())[:6]
	tmp := loadTempDir(t)
	all := append([]string{"POOL_SIZE=2", "BEARER_TOKEN=" + asToken, "NETWORK=on", "NETWORK_BRIDGE=" + bridge,
		"NETWORK_SUBNET=" + subnet, "TMPDIR=" + tmp, "LOG_LEVEL=info", "METRICS_TOKEN=" + loadMetricsToken}, settings...)
	d := startDaemon(t, all...)
	return d, loadtest.Target{URL: d.url, PID: d.cmd.Process.Pid, DataDir: d.dataDir, Bridge: bridge, TempDir: tmp, MetricsToken: loadMetricsToken}
}

// loadTempDir is a directory for the daemon's TMPDIR, removed at
// cleanup (after the daemon stopped: cleanups run last-in first-out).
func loadTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "abx-load-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Clean(dir)
}

// waitPool waits (bounded) for the warm pool to be full, so the baseline
// snapshot includes its sandboxes.
func waitPool(t *testing.T, tg loadtest.Target, want int) loadtest.Snapshot {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s, err := loadtest.Take(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Sandboxes) >= want || time.Now().After(deadline) {
			return s
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLoad runs concurrent clients against a daemon with a warm pool
// (native API and agentscope routes: create, shell, Python cells, files of
// 1 KiB to 50 MiB, destroy), then checks that every error was a documented
// quota or capacity error and that nothing leaked: daemon fds, goroutines
// and RSS within loadtest.DefaultBounds of the baseline, and on the host no
// cgroup, mount, loop device, veth, nftables rule, sandbox process or temp
// file beyond the baseline's. Short by default (8 clients, 20 s);
// `make load` runs the long form (LOAD_CLIENTS=32, LOAD_DURATION=2m).
func TestLoad(t *testing.T) {
	clients := loadInt(t, "LOAD_CLIENTS", 8)
	duration := loadDuration(t, "LOAD_DURATION", 20*time.Second)
	d, tg := loadDaemon(t, "10.84.0.0/16", fmt.Sprintf("MAX_SANDBOXES_PER_USER=%d", max(2, clients*3/4)))
	before := waitPool(t, tg, 2)
	t.Logf("baseline: %s", before)

	// Peak figures during the run show what the leak checks had to see
	// go away.
	var peak struct {
		sync.Mutex
		sandboxes, veths, mounts, fds int
	}
	sctx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		loadtest.Sample(sctx, func() loadtest.Target { return tg }, 2*time.Second, func(s loadtest.Snapshot) {
			peak.Lock()
			defer peak.Unlock()
			peak.sandboxes = max(peak.sandboxes, len(s.Sandboxes))
			peak.veths = max(peak.veths, len(s.Veths))
			peak.mounts = max(peak.mounts, len(s.Mounts))
			peak.fds = max(peak.fds, s.FDs)
		})
	}()
	res, err := loadtest.Run(context.Background(), loadtest.Config{URL: d.url, APIKey: asToken, AgentscopeToken: asToken,
		Clients: clients, Duration: duration, Interval: 5 * time.Second, Out: testWriter{t}, Seed: 19})
	if err != nil {
		t.Fatal(err)
	}
	stopSampling()
	<-sampled
	res.Report(testWriter{t})
	t.Logf("peak during the run: %d sandboxes, %d veths, %d mounts, %d daemon fds", peak.sandboxes, peak.veths, peak.mounts, peak.fds)
	ops, _ := res.Total()
	if ops == 0 || res.Ops["create"] == nil || res.Ops["create"].Count == res.Ops["create"].Errors {
		t.Fatalf("no sandbox was created under load")
	}
	if n := res.Unexpected(); n > 0 {
		t.Errorf("%d unexpected errors (see samples above)", n)
	}
	// The daemon times every step of the native backend's creates and
	// destroys in /metrics (the soak reports them per segment).
	phases, err := loadtest.TakePhases(context.Background(), d.url, loadMetricsToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("native backend steps:\n%s", loadtest.PhaseTable([]loadtest.PhaseTotals{phases}))
	for _, step := range []string{"create: container.Run", "destroy: SIGKILL init"} {
		var found bool
		for name, p := range phases {
			if strings.HasPrefix(name, step) && p.Count > 0 && p.Sum > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("no %q step timed in agentbox_backend_phase_seconds: %v", step, phases.Names())
		}
	}
	after, leaks, err := loadtest.Settle(context.Background(), tg, before, loadtest.DefaultBounds, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after:    %s", after)
	for _, l := range leaks {
		t.Errorf("leak: %s", l)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-min(1, len(p))]))
	return len(p), nil
}
