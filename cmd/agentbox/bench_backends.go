package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/backend/docker/dockertest"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
)

// runBackendsBench measures the native and the Docker backend side by side
// through one in-process server running both (DOCKER_BACKEND): cold create,
// warm-pool hit and exec round trip, each for a host-template sandbox and
// a docker: sandbox. The Docker image is made locally from host programs
// (no registry needed).
func runBackendsBench(ctx context.Context, out io.Writer, n int) error {
	agentPath, err := daemon.FindAgent(os.Getenv("AGENT_PATH"))
	if err != nil {
		return err
	}
	api, err := dockertest.Available(ctx)
	if err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	image, err := dockertest.EnsureImage(ctx, api, dockertest.Options{})
	api.Close()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "abx-bbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	_ = os.Chmod(tmp, 0o711)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	dockerRef := "docker:" + image
	types, _ := json.Marshal(map[string]string{"base": "host", "dock": dockerRef})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cfg, err := config.Load("", nil, map[string]string{
		"AGENTBOX_DATA_DIR": filepath.Join(tmp, "api"), "AGENT_PATH": agentPath, "DOCKER_BACKEND": "true",
		"SANDBOX_TEMPLATES": string(types), "DEFAULT_SANDBOX_TYPE": "base,dock",
		"POOL_SIZE": "2", "AUTO_CLEANUP": "true", "PORT": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, daemon.Options{Config: cfg, Logger: quiet, Listener: ln, Ready: ready})
	}()
	defer func() { stop(); <-done }() //nolint:errcheck // waits for the sampler to stop; its error was reported where it arose
	select {
	case <-ready:
	case err := <-done:
		return err
	}
	c, err := client.New("http://" + ln.Addr().String())
	if err != nil {
		return err
	}
	var results []bench.Result
	add := func(name string, samples []time.Duration, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r := bench.Summarize(name, samples)
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "  %-52s p50 %8.2f ms  p99 %8.2f ms\n", name, float64(r.P50.Microseconds())/1000, float64(r.P99.Microseconds())/1000)
		return nil
	}
	fmt.Fprintf(os.Stderr, "agentbox bench --backends: %d samples each\n", n)
	for _, b := range []struct{ name, typ, pool string }{{"native", "base", "host"}, {"docker", "dock", dockerRef}} {
		waitPool := func() error {
			deadline := time.Now().Add(time.Minute)
			for time.Now().Before(deadline) {
				info, err := c.Info(ctx)
				if err != nil {
					return err
				}
				if info.Pools[b.pool] >= 2 {
					return nil
				}
				time.Sleep(5 * time.Millisecond)
			}
			return fmt.Errorf("pool %s did not refill within a minute", b.pool)
		}
		samples, err := bench.APIPoolHitCreateOf(ctx, c, client.CreateRequest{Template: b.typ}, n, waitPool)
		if err := add(b.name+": API create, warm-pool hit", samples, err); err != nil {
			return err
		}
		// Custom resources make a request ineligible for the pool: a cold boot.
		samples, err = bench.Measure(n, 2, func() error {
			sb, err := c.Create(ctx, client.CreateRequest{Template: b.typ, Resources: &client.Resources{PIDs: 255}})
			if err != nil {
				return err
			}
			return c.Delete(ctx, sb.ID)
		})
		if err := add(b.name+": API create + delete, cold", samples, err); err != nil {
			return err
		}
		sb, err := c.Create(ctx, client.CreateRequest{Template: b.typ})
		if err != nil {
			return err
		}
		samples, err = bench.APIExecRoundTrip(ctx, c, sb.ID, []string{"true"}, n*5)
		_ = c.Delete(ctx, sb.ID)
		if err := add(b.name+": API exec `true`, buffered JSON", samples, err); err != nil {
			return err
		}
	}
	fmt.Fprint(out, bench.Markdown(results))
	return nil
}
