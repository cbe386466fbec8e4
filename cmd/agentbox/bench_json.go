package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
)

// rowOptions sets how many samples and how long the scenarios of
// `agentbox bench --json` / `--quick` run.
type rowOptions struct {
	n       int
	tput    time.Duration
	clients int
	docker  string
	json    bool
}

// runBenchRows measures the scenarios of bench.Scenarios for agentbox, the
// bare fork/exec baseline and Docker (when an engine answers), and prints
// them as one JSON array (opts.json) or a table. Progress goes to stderr.
func runBenchRows(ctx context.Context, out io.Writer, tmp, agentPath string, opts rowOptions) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var rows []bench.Row
	add := func(scenario, target string, samples []time.Duration, rate float64, err error) error {
		if err != nil {
			return fmt.Errorf("%s (%s): %w", scenario, target, err)
		}
		r := bench.NewRow(scenario, target, samples, rate)
		rows = append(rows, r)
		extra := ""
		if r.OpsPerS != nil {
			extra = fmt.Sprintf("  %.1f ops/s", *r.OpsPerS)
		}
		fmt.Fprintf(os.Stderr, "  %-18s %-9s n=%-4d p50 %8.2f ms  p99 %8.2f ms%s\n", scenario, target, r.N, r.P50ms, r.P99ms, extra)
		return nil
	}

	// cold_create_exec: the native backend directly (no daemon in between),
	// as `agentbox run` and a pool refill use it.
	b, err := native.New(native.Config{Root: filepath.Join(tmp, "native"), AgentPath: agentPath, Logger: quiet})
	if err != nil {
		return err
	}
	samples, err := bench.Measure(opts.n, 2, func() error { return bench.ColdCreateExecDestroy(ctx, b, bench.PythonPrint) })
	b.Close()
	if err := add(bench.ScenarioColdCreateExec, bench.TargetAgentbox, samples, 0, err); err != nil {
		return err
	}
	samples, err = bench.Measure(opts.n, 2, func() error { return bench.BareExec(bench.PythonPrint) })
	if err := add(bench.ScenarioColdCreateExec, bench.TargetBaseline, samples, 0, err); err != nil {
		return err
	}
	// run: `agentbox run` of this binary as a whole process, no server.
	run := selfProcess([]string{"AGENT_PATH=" + agentPath, "AGENTBOX_URL="},
		append([]string{"run", "--data-dir", filepath.Join(tmp, "run"), "--no-stdin", "--"}, bench.PythonPrint...)...)
	samples, err = bench.Measure(opts.n, 2, run)
	if err := add(bench.ScenarioRun, bench.TargetAgentbox, samples, 0, err); err != nil {
		return err
	}
	samples, err = bench.Measure(opts.n, 2, func() error { return bench.BareExec(bench.PythonPrint) })
	if err := add(bench.ScenarioRun, bench.TargetBaseline, samples, 0, err); err != nil {
		return err
	}

	// The rest as a client sees it: through the HTTP API of a daemon.
	if err := benchAPIRows(ctx, tmp, agentPath, opts, quiet, add); err != nil {
		return err
	}
	samples, err = bench.Measure(opts.n*5, 5, func() error { return bench.BareExec([]string{"true"}) })
	if err := add(bench.ScenarioExecRTT, bench.TargetBaseline, samples, 0, err); err != nil {
		return err
	}
	rate, samples, err := bench.ParallelThroughput(ctx, opts.clients, opts.tput, func(context.Context) error { return bench.BareExec([]string{"true"}) })
	if err := add(bench.ScenarioCycleThroughput, bench.TargetBaseline, samples, rate, err); err != nil {
		return err
	}

	if opts.docker == "on" || (opts.docker == "auto" && bench.DockerAvailable()) {
		if err := bench.EnsureDockerImage(ctx); err != nil {
			return err
		}
		samples, err = bench.Measure(max(opts.n/4, 5), 1, func() error { return bench.DockerRun(ctx, bench.PythonPrint) })
		if err := add(bench.ScenarioColdCreateExec, bench.TargetDocker, samples, 0, err); err != nil {
			return err
		}
		dc, err := bench.StartDockerContainer(ctx)
		if err != nil {
			return err
		}
		samples, err = bench.Measure(max(opts.n, 10), 2, func() error { return dc.Exec(ctx, []string{"true"}) })
		_ = dc.Remove(ctx)
		if err := add(bench.ScenarioExecRTT, bench.TargetDocker, samples, 0, err); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(os.Stderr, "  (no Docker engine: Docker rows skipped)")
	}

	if opts.json {
		enc := json.NewEncoder(out)
		return enc.Encode(rows)
	}
	fmt.Fprintln(out, "| scenario | target | n | p50 ms | p99 ms | ops/s |\n|---|---|---:|---:|---:|---:|")
	for _, r := range rows {
		ops := ""
		if r.OpsPerS != nil {
			ops = fmt.Sprintf("%.1f", *r.OpsPerS)
		}
		fmt.Fprintf(out, "| %s | %s | %d | %.2f | %.2f | %s |\n", r.Scenario, r.Target, r.N, r.P50ms, r.P99ms, ops)
	}
	return nil
}

// benchDaemon starts an in-process daemon (data under dir, settings on top
// of the defaults) and returns a client of it and its stop function.
func benchDaemon(ctx context.Context, dir, agentPath string, settings map[string]string, log *slog.Logger) (*client.Client, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	env := map[string]string{
		"AGENTBOX_DATA_DIR": dir, "AGENT_PATH": agentPath,
		"AUTO_CLEANUP": "true", "PORT": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
	}
	for k, v := range settings {
		env[k] = v
	}
	cfg, err := config.Load("", nil, env)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, daemon.Options{Config: cfg, Logger: log, Listener: ln, Ready: ready})
	}()
	var once sync.Once
	stopAll := func() { once.Do(func() { stop(); <-done }) } //nolint:errcheck // waits for the sampler to stop
	select {
	case <-ready:
	case err := <-done:
		stop()
		return nil, nil, err
	}
	c, err := client.New("http://" + ln.Addr().String())
	if err != nil {
		stopAll()
		return nil, nil, err
	}
	return c, stopAll, nil
}

// waitPoolOf returns a func waiting (at most a minute) until the host
// pool of c's daemon holds at least size sandboxes.
func waitPoolOf(ctx context.Context, c *client.Client, size int) func() error {
	return func() error {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			if info.Pools["host"] >= size {
				return nil
			}
			time.Sleep(2 * time.Millisecond)
		}
		return fmt.Errorf("pool did not refill within a minute")
	}
}

// benchAPIRows starts an in-process daemon (warm pool of 2) and measures
// pool_create, exec_rtt and cycle_throughput through its API, then one
// whose pool recycles (POOL_MAX_USES) for the recycle row.
func benchAPIRows(ctx context.Context, tmp, agentPath string, opts rowOptions, log *slog.Logger,
	add func(string, string, []time.Duration, float64, error) error) error {
	const poolSize = 2
	c, stop, err := benchDaemon(ctx, filepath.Join(tmp, "api"), agentPath, map[string]string{"POOL_SIZE": strconv.Itoa(poolSize)}, log)
	if err != nil {
		return err
	}
	defer stop()
	waitPool := waitPoolOf(ctx, c, poolSize)
	samples, err := bench.APIPoolHitCreate(ctx, c, opts.n, waitPool)
	if err := add(bench.ScenarioPoolCreate, bench.TargetAgentbox, samples, 0, err); err != nil {
		return err
	}

	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		return err
	}
	samples, err = bench.APIExecRoundTrip(ctx, c, sb.ID, []string{"true"}, opts.n*5)
	if err := add(bench.ScenarioExecRTT, bench.TargetAgentbox, samples, 0, err); err != nil {
		_ = c.Delete(ctx, sb.ID) // best effort: the measured error is the one to report
		return err
	}
	_ = c.Delete(ctx, sb.ID) // best effort, as above

	rate, samples, err := bench.ParallelThroughput(ctx, opts.clients, opts.tput, func(ctx context.Context) error { return bench.Cycle(ctx, c) })
	if err := add(bench.ScenarioCycleThroughput, bench.TargetAgentbox, samples, rate, err); err != nil {
		return err
	}
	stop()

	// recycle: a pool of 1 whose sandboxes serve (nearly) unlimited users.
	rc, rstop, err := benchDaemon(ctx, filepath.Join(tmp, "recycle"), agentPath,
		map[string]string{"POOL_SIZE": "1", "POOL_MAX_USES": "1000000"}, log)
	if err != nil {
		return err
	}
	defer rstop()
	samples, err = bench.APIRecycle(ctx, rc, opts.n, waitPoolOf(ctx, rc, 1))
	if err := add(bench.ScenarioRecycle, bench.TargetAgentbox, samples, 0, err); err != nil {
		return err
	}
	// run_server: `agentbox run --url` of this binary against that daemon.
	runServer := selfProcess(nil, append([]string{"run", "--url", rc.BaseURL(), "--no-stdin", "--"}, bench.PythonPrint...)...)
	samples, err = bench.Measure(opts.n, 2, runServer)
	if err := add(bench.ScenarioRunServer, bench.TargetAgentbox, samples, 0, err); err != nil {
		return err
	}
	rstop()

	// cycle_throughput_recycled: the cycle of cycle_throughput against a
	// pool as large as the number of clients whose sandboxes are recycled.
	pc, pstop, err := benchDaemon(ctx, filepath.Join(tmp, "recycle-cycle"), agentPath,
		map[string]string{"POOL_SIZE": strconv.Itoa(opts.clients), "POOL_MAX_USES": "1000000"}, log)
	if err != nil {
		return err
	}
	defer pstop()
	if err := waitPoolOf(ctx, pc, opts.clients)(); err != nil {
		return err
	}
	rate, samples, err = bench.ParallelThroughput(ctx, opts.clients, opts.tput, func(ctx context.Context) error { return bench.Cycle(ctx, pc) })
	return add(bench.ScenarioCycleRecycled, bench.TargetAgentbox, samples, rate, err)
}

// runBenchScenarios sets up what runBenchRows needs (agent, scratch dir,
// Ctrl-C handling) the way runBench does.
func runBenchScenarios(ctx context.Context, out io.Writer, opts rowOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	agentPath, err := daemon.FindAgent(os.Getenv("AGENT_PATH"))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "abx-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	_ = os.Chmod(tmp, 0o711)
	fmt.Fprintf(os.Stderr, "agentbox bench: %d samples, %d clients for %s, %d CPUs\n", opts.n, opts.clients, opts.tput, runtime.NumCPU())
	return runBenchRows(ctx, out, tmp, agentPath, opts)
}

// selfProcess returns a func that runs this binary with args (env added
// to this process's environment), its output discarded; a failure carries
// its stderr.
func selfProcess(env []string, args ...string) func() error {
	return func() error {
		self, err := native.Executable()
		if err != nil {
			return err
		}
		c := exec.Command(self, args...)
		c.Env = append(os.Environ(), env...)
		var stderr strings.Builder
		c.Stderr = &stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("agentbox %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		}
		return nil
	}
}
