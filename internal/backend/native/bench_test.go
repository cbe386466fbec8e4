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
