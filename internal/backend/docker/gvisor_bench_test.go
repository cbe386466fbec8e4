package docker

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/backend/docker/dockertest"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkDockerIsolation: the Docker backend's sandboxes on the engine's
// runc and on runsc (DOCKER_GVISOR_RUNTIME), side by side in one run:
// cold create + `true` + destroy, and an exec round trip of `true` in a
// running sandbox. Needs an engine with the runtime (gvisorRuntime).
//
//	DOCKER_HOST=... go test -run '^$' -bench DockerIsolation -benchtime 10x ./internal/backend/docker/
func BenchmarkDockerIsolation(b *testing.B) {
	testutil.RequireRoot(b)
	ctx := context.Background()
	api, err := dockertest.Available(ctx)
	if err != nil {
		b.Skipf("no Docker engine: %v", err)
	}
	defer api.Close()
	info, err := api.Info(ctx, client.InfoOptions{})
	if err != nil {
		b.Fatal(err)
	}
	rt := gvisorRuntime()
	if _, ok := info.Info.Runtimes[rt]; !ok {
		b.Skipf("the engine has no runtime %q", rt)
	}
	image, err := dockertest.EnsureImage(ctx, api, dockertest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	be, err := New(ctx, Config{Root: testutil.ShortTempDir(b), AgentPath: testutil.AgentBinary(b), GVisorRuntime: rt})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	run := func(c *agentclient.Client) error {
		r, err := backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "true"})
		if err == nil && r.Exit.ExitCode != 0 {
			err = context.Canceled
		}
		return err
	}
	for _, level := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		spec := func() sandbox.Spec {
			return sandbox.Spec{ID: sandbox.NewID(), Template: dockerTemplate(image), Isolation: level}
		}
		b.Run(string(level)+"/CreateExecDestroy", func(b *testing.B) {
			samples := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				start := time.Now()
				in, err := be.Create(ctx, spec())
				if err != nil {
					b.Fatal(err)
				}
				c := agentclient.New(agentclient.Endpoint{Network: in.Agent.Network, Address: in.Agent.Address, Pid: in.Agent.Pid}, "")
				err = run(c)
				c.Close()
				if derr := be.Destroy(ctx, in.ID); err == nil {
					err = derr
				}
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
			report(b, samples)
		})
		b.Run(string(level)+"/ExecRoundTrip", func(b *testing.B) {
			in, err := be.Create(ctx, spec())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = be.Destroy(ctx, in.ID) }()
			c := agentclient.New(agentclient.Endpoint{Network: in.Agent.Network, Address: in.Agent.Address, Pid: in.Agent.Pid}, "")
			defer c.Close()
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := run(c); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
			report(b, samples)
		})
	}
}

func report(b *testing.B, samples []time.Duration) {
	r := bench.Summarize(b.Name(), samples)
	b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
}
