package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

func newBenchCmd() *cobra.Command {
	var (
		n          int
		docker     string
		throughput time.Duration
		clients    int
		quick      bool
		asJSON     bool
		idle       int
		backends   bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure sandbox latency and memory against bare fork/exec and Docker (needs root)",
		Long: `Runs the benchmarks of docs/benchmarks.md on this machine and prints a
Markdown table: the native backend directly (cold create+exec+destroy, exec
round trip, idle memory), the HTTP API of an in-process server (pool-hit and
cold create, exec round trip, create+exec+destroy throughput), and the same
operations with bare fork/exec and Docker as references.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if backends {
				return runBackendsBench(cmd.Context(), cmd.OutOrStdout(), n)
			}
			if idle > 0 {
				return runBenchIdle(cmd.Context(), cmd.OutOrStdout(), idle, min(n, 20))
			}
			if quick || asJSON {
				opts := rowOptions{n: n, tput: throughput, clients: clients, docker: docker, json: asJSON}
				if quick {
					// Under a minute in all, Docker included.
					if !cmd.Flags().Changed("n") {
						opts.n = 20
					}
					if !cmd.Flags().Changed("throughput-duration") {
						opts.tput = 3 * time.Second
					}
				}
				return runBenchScenarios(cmd.Context(), cmd.OutOrStdout(), opts)
			}
			return runBench(cmd.Context(), cmd.OutOrStdout(), n, docker, throughput, clients)
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 100, "samples per latency measurement")
	cmd.Flags().StringVar(&docker, "docker", "auto", "Docker reference: auto (when an engine answers), on, off")
	cmd.Flags().DurationVar(&throughput, "throughput-duration", 10*time.Second, "how long the throughput run lasts")
	cmd.Flags().IntVar(&clients, "clients", 8, "concurrent clients of the throughput run")
	cmd.Flags().IntVar(&idle, "idle", 0, "instead: fill a daemon with this many idle sandboxes and print (JSON) create and exec latency with none and with them, and their cost")
	cmd.Flags().BoolVar(&quick, "quick", false, "the scenarios of --json with few samples: finishes in under a minute")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print one JSON array of {"scenario","target","n","p50_ms","p99_ms"[,"ops_per_s"]} (scenarios cold_create_exec, exec_rtt, pool_create, recycle, cycle_throughput, cycle_throughput_recycled; targets agentbox, baseline, docker)`)
	cmd.Flags().BoolVar(&backends, "backends", false, "only compare the native and the Docker backend (cold create, pool hit, exec) through one server")
	return cmd
}

func runBench(ctx context.Context, out io.Writer, n int, docker string, tput time.Duration, clients int) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// Ctrl-C ends the run through the normal path, which destroys every
	// sandbox and removes the temporary state.
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
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	var results []bench.Result
	add := func(name, note string, samples []time.Duration, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r := bench.Summarize(name, samples)
		r.Comment = note
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "  %-48s p50 %8.2f ms  p99 %8.2f ms\n", name, float64(r.P50.Microseconds())/1000, float64(r.P99.Microseconds())/1000)
		return nil
	}
	fmt.Fprintf(os.Stderr, "agentbox bench: %d samples each, %d CPUs, %s\n", n, runtime.NumCPU(), runtime.Version())

	// The native backend, directly.
	b, err := native.New(native.Config{Root: filepath.Join(tmp, "native"), AgentPath: agentPath, Logger: quiet})
	if err != nil {
		return err
	}
	defer b.Close() // unmounts the backend's state tmpfs, so tmp can go
	samples, err := bench.Measure(n, 3, func() error { return bench.ColdCreateExecDestroy(ctx, b, bench.PythonPrint) })
	if err := add("native: create + python3 -c 'print(1)' + destroy", "target ≤ 30 ms p50", samples, err); err != nil {
		return err
	}
	samples, err = bench.Measure(n, 3, func() error { return bench.BareExec(bench.PythonPrint) })
	if err := add("bare fork/exec: python3 -c 'print(1)'", "reference", samples, err); err != nil {
		return err
	}
	id := sandbox.NewID()
	info, err := b.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()})
	if err != nil {
		return err
	}
	ac := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
	samples, err = bench.Measure(n*5, 10, func() error { return bench.ExecRoundTrip(ctx, ac, []string{"true"}) })
	ac.Close()
	_ = b.Destroy(ctx, id)
	if err := add("native: exec `true` in a running sandbox", "target ≤ 2 ms p50", samples, err); err != nil {
		return err
	}
	samples, err = bench.Measure(n*5, 10, func() error { return bench.BareExec([]string{"true"}) })
	if err := add("bare fork/exec: true", "reference", samples, err); err != nil {
		return err
	}
	mem, err := idleMemory(ctx, b, 10)
	if err != nil {
		return err
	}

	// The HTTP API of an in-process server.
	apiResults, err := benchAPI(ctx, tmp, agentPath, n, tput, clients, quiet, add)
	if err != nil {
		return err
	}

	// Networking: what egress adds to a create, and preview URLs.
	if err := benchNetwork(ctx, tmp, agentPath, n, quiet, add); err != nil {
		return err
	}

	// Docker, when there is an engine.
	if docker == "on" || (docker == "auto" && bench.DockerAvailable()) {
		if err := bench.EnsureDockerImage(ctx); err != nil {
			return err
		}
		samples, err = bench.Measure(max(n/4, 10), 1, func() error { return bench.DockerRun(ctx, bench.PythonPrint) })
		if err := add("docker run --rm: python3 -c 'print(1)'", "reference", samples, err); err != nil {
			return err
		}
		dc, err := bench.StartDockerContainer(ctx)
		if err != nil {
			return err
		}
		samples, err = bench.Measure(n, 3, func() error { return dc.Exec(ctx, []string{"true"}) })
		_ = dc.Remove(ctx)
		if err := add("docker exec: true", "reference", samples, err); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(os.Stderr, "  (no Docker engine: Docker reference skipped)")
	}

	fmt.Fprint(out, bench.Markdown(results))
	fmt.Fprintf(out, "\nIdle sandbox memory (10 sandboxes, average): agent RSS %.1f MiB (PSS %.1f MiB, the agent binary's pages are shared), cgroup charge %.1f MiB — target ≤ 8 MiB.\n",
		mem.rss, mem.pss, mem.cgroup)
	fmt.Fprintf(out, "Throughput, %d clients for %s, create+exec `true`+destroy through the API: %.1f cycles/s — target ≥ 100/s.\n",
		clients, tput, apiResults.throughput)
	return nil
}

type memResult struct{ rss, pss, cgroup float64 }

func idleMemory(ctx context.Context, b *native.Backend, count int) (memResult, error) {
	var ids []sandbox.ID
	defer func() {
		for _, id := range ids {
			_ = b.Destroy(ctx, id)
		}
	}()
	for i := 0; i < count; i++ {
		id := sandbox.NewID()
		if _, err := b.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
			return memResult{}, err
		}
		ids = append(ids, id)
	}
	time.Sleep(time.Second)
	var m memResult
	for _, id := range ids {
		im, err := bench.SandboxMemory(ctx, b, id)
		if err != nil {
			return m, err
		}
		m.rss += float64(im.RSSBytes) / (1 << 20) / float64(count)
		m.pss += float64(im.PSSBytes) / (1 << 20) / float64(count)
		m.cgroup += float64(im.CgroupBytes) / (1 << 20) / float64(count)
	}
	return m, nil
}

type apiResult struct{ throughput float64 }

func benchAPI(ctx context.Context, tmp, agentPath string, n int, tput time.Duration, clients int, log *slog.Logger,
	add func(string, string, []time.Duration, error) error) (apiResult, error) {
	var res apiResult
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	cfg, err := config.Load("", nil, map[string]string{
		"AGENTBOX_DATA_DIR": filepath.Join(tmp, "api"), "AGENT_PATH": agentPath,
		"POOL_SIZE": "2", "AUTO_CLEANUP": "true", "PORT": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
	})
	if err != nil {
		return res, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, daemon.Options{Config: cfg, Logger: log, Listener: ln, Ready: ready})
	}()
	defer func() { stop(); <-done }() //nolint:errcheck // waits for the sampler to stop; its error was reported where it arose
	select {
	case <-ready:
	case err := <-done:
		return res, err
	}
	c, err := client.New("http://" + ln.Addr().String())
	if err != nil {
		return res, err
	}
	waitPool := func() error {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			if info.Pools["host"] >= 2 {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		return fmt.Errorf("pool did not refill within a minute")
	}
	samples, err := bench.APIPoolHitCreate(ctx, c, n, waitPool)
	if err := add("API: create, warm-pool hit", "target ≤ 5 ms p50, ≤ 20 ms p99", samples, err); err != nil {
		return res, err
	}
	// Custom resources make a request ineligible for the pool: a cold boot.
	cold := func() ([]time.Duration, error) {
		return bench.Measure(n, 2, func() error {
			sb, err := c.Create(ctx, client.CreateRequest{Resources: &client.Resources{PIDs: 255}})
			if err != nil {
				return err
			}
			return c.Delete(ctx, sb.ID)
		})
	}
	samples, err = cold()
	if err := add("API: create + delete, cold", "", samples, err); err != nil {
		return res, err
	}
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		return res, err
	}
	samples, err = bench.APIExecRoundTrip(ctx, c, sb.ID, []string{"true"}, n*5)
	_ = c.Delete(ctx, sb.ID)
	if err := add("API: exec `true`, buffered JSON", "target ≤ 3 ms p50", samples, err); err != nil {
		return res, err
	}
	rate, samples, err := bench.Throughput(ctx, c, clients, tput)
	if err := add(fmt.Sprintf("API: create+exec+delete cycle, %d clients", clients), fmt.Sprintf("%.0f cycles/s", rate), samples, err); err != nil {
		return res, err
	}
	res.throughput = rate
	return res, nil
}

// benchNetwork measures the cost of an egress network at create time and
// an HTTP round trip through a preview URL against a direct connection to
// the same server in the sandbox. Skipped when the kernel cannot do
// sandbox networking.
func benchNetwork(ctx context.Context, tmp, agentPath string, n int, log *slog.Logger,
	add func(string, string, []time.Duration, error) error) error {
	netMgr, err := netpolicy.New(ctx, netpolicy.Config{Bridge: "abxbench0", Subnet: netip.MustParsePrefix("10.87.0.0/16"),
		StateDir: filepath.Join(tmp, "net"), NetnsDir: filepath.Join(tmp, "netns"), Logger: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "  (no sandbox networking: %v; network benchmarks skipped)\n", err)
		return nil
	}
	defer netMgr.Close(true)
	b, err := native.New(native.Config{Root: filepath.Join(tmp, "netnative"), AgentPath: agentPath, Logger: log, Network: netMgr})
	if err != nil {
		return err
	}
	defer b.Close()
	samples, err := bench.NetworkCreate(ctx, b, sandbox.NetworkNone, n)
	if err := add("native: create + destroy, network none", "", samples, err); err != nil {
		return err
	}
	samples, err = bench.NetworkCreate(ctx, b, sandbox.NetworkEgress, n)
	if err := add("native: create + destroy, network egress", "veth, nftables, DNS filter", samples, err); err != nil {
		return err
	}

	m := manager.New(manager.Config{Logger: log}, b, store.NewMemory())
	if err := m.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = m.Shutdown(context.WithoutCancel(ctx), true) }()
	rec, err := m.Create(ctx, httpapi.DefaultUser, manager.CreateRequest{Timeout: 10 * time.Minute})
	if err != nil {
		return err
	}
	agent, err := m.Agent(ctx, httpapi.DefaultUser, rec.ID)
	if err != nil {
		return err
	}
	const port = 8000
	dial := func(ctx context.Context) (net.Conn, error) { return b.DialPort(ctx, rec.ID, port) }
	if err := bench.StartHTTPServer(ctx, agent, port, dial); err != nil {
		return err
	}
	direct := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}}
	samples, err = bench.HTTPRoundTrips(ctx, direct, "http://sandbox/", nil, n*5)
	if err := add("HTTP GET, direct connection into the sandbox", "reference", samples, err); err != nil {
		return err
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Logger: log}, m).Handler())
	defer srv.Close()
	// Previews need a credential, also on a keyless server.
	samples, err = bench.HTTPRoundTrips(ctx, srv.Client(), fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d/", srv.URL, rec.ID, port),
		http.Header{"X-Access-Token": {rec.AccessToken}}, n*5)
	return add("HTTP GET through the preview URL", "", samples, err)
}
