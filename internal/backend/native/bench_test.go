package native

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// reportPercentiles adds p50/p99 (ms) of per-iteration samples to b.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	r := bench.Summarize(b.Name(), samples)
	b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
}

func timed(b *testing.B, op func() error) {
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}

// BenchmarkColdCreateExecDestroy: a fresh sandbox, python3 -c 'print(1)'
// through its agent, destroy. The target is 30 ms p50.
func BenchmarkColdCreateExecDestroy(b *testing.B) {
	be := newTestBackend(b, testutil.ShortTempDir(b))
	ctx := context.Background()
	timed(b, func() error { return bench.ColdCreateExecDestroy(ctx, be, bench.PythonPrint) })
}

// BenchmarkBarePython is the floor: python3 -c 'print(1)' forked directly.
func BenchmarkBarePython(b *testing.B) {
	timed(b, func() error { return bench.BareExec(bench.PythonPrint) })
}

// BenchmarkExecRoundTrip: `true` in a running sandbox (target 2 ms p50).
func BenchmarkExecRoundTrip(b *testing.B) {
	be := newTestBackend(b, testutil.ShortTempDir(b))
	ctx := context.Background()
	id := sandbox.NewID()
	info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Destroy(ctx, id)
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
	defer c.Close()
	timed(b, func() error { return bench.ExecRoundTrip(ctx, c, []string{"true"}) })
}

// BenchmarkBareTrue is fork/exec of `true` on the host.
func BenchmarkBareTrue(b *testing.B) {
	timed(b, func() error { return bench.BareExec([]string{"true"}) })
}

// BenchmarkIdleSandboxMemory reports what an idle sandbox costs (target
// 8 MiB): the agent's RSS and the sandbox cgroup's whole charge.
func BenchmarkIdleSandboxMemory(b *testing.B) {
	be := newTestBackend(b, testutil.ShortTempDir(b))
	ctx := context.Background()
	const n = 10
	var ids []sandbox.ID
	for i := 0; i < n; i++ {
		id := sandbox.NewID()
		if _, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	defer func() {
		for _, id := range ids {
			be.Destroy(ctx, id)
		}
	}()
	time.Sleep(time.Second) // let the agents settle after start-up
	var rss, pss, cg int64
	for _, id := range ids {
		m, err := bench.SandboxMemory(ctx, be, id)
		if err != nil {
			b.Fatal(err)
		}
		rss, pss, cg = rss+m.RSSBytes, pss+m.PSSBytes, cg+m.CgroupBytes
	}
	b.ReportMetric(float64(rss)/n/(1<<20), "rss-MiB/sandbox")
	b.ReportMetric(float64(pss)/n/(1<<20), "pss-MiB/sandbox")
	b.ReportMetric(float64(cg)/n/(1<<20), "cgroup-MiB/sandbox")
}

// BenchmarkPauseResume: freeze and thaw a running sandbox (its agent, a
// shell and its sleep), each timed on its own, without and with the
// page-cache reclaim at pause. The reference in the same run is Stop +
// Start, the other way to take a sandbox off the CPU, which loses every
// process.
func BenchmarkPauseResume(b *testing.B) {
	for _, reclaim := range []bool{false, true} {
		name := "reclaim=off"
		if reclaim {
			name = "reclaim=on"
		}
		b.Run(name, func(b *testing.B) {
			testutil.RequireRoot(b)
			be, err := New(Config{Root: testutil.ShortTempDir(b), AgentPath: testutil.AgentBinary(b), PauseReclaim: reclaim})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { be.abandoned.Store(true); be.Close() }()
			ctx := context.Background()
			id := sandbox.NewID()
			info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Destroy(ctx, id)
			c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
			defer c.Close()
			if p, err := c.Start(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "while :; do sleep 1; done"}}); err != nil {
				b.Fatal(err)
			} else {
				p.Close()
			}
			pauses := make([]time.Duration, 0, b.N)
			resumes := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := be.Pause(ctx, id); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := be.Resume(ctx, id); err != nil {
					b.Fatal(err)
				}
				pauses, resumes = append(pauses, mid.Sub(start)), append(resumes, time.Since(mid))
			}
			b.StopTimer()
			p, r := bench.Summarize("pause", pauses), bench.Summarize("resume", resumes)
			b.ReportMetric(float64(p.P50.Microseconds())/1000, "pause-p50-ms")
			b.ReportMetric(float64(p.P99.Microseconds())/1000, "pause-p99-ms")
			b.ReportMetric(float64(r.P50.Microseconds())/1000, "resume-p50-ms")
			b.ReportMetric(float64(r.P99.Microseconds())/1000, "resume-p99-ms")
		})
	}
}

// BenchmarkStopStart is the reference of BenchmarkPauseResume: stop and
// boot again (processes and memory lost, files kept).
func BenchmarkStopStart(b *testing.B) {
	be := newTestBackend(b, testutil.ShortTempDir(b))
	ctx := context.Background()
	id := sandbox.NewID()
	if _, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
		b.Fatal(err)
	}
	defer be.Destroy(ctx, id)
	timed(b, func() error {
		if err := be.Stop(ctx, id); err != nil {
			return err
		}
		_, err := be.Start(ctx, id)
		return err
	})
}
