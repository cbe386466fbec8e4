package native

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// The isolation levels side by side, on one backend in one run
// (docs/benchmarks.md): each benchmark has a sub-benchmark per level.
func forLevels(b *testing.B, fn func(b *testing.B, be backend.Backend)) {
	be := newGVisorBackend(b, testutil.ShortTempDir(b))
	for _, level := range sandbox.Isolations {
		b.Run(string(level), func(b *testing.B) { fn(b, backendtest.AtIsolation(be, level)) })
	}
}

// BenchmarkIsolationColdCreate: a fresh sandbox, python3 -c 'print(1)'
// through its agent, destroy.
func BenchmarkIsolationColdCreate(b *testing.B) {
	forLevels(b, func(b *testing.B, be backend.Backend) {
		ctx := context.Background()
		timed(b, func() error { return bench.ColdCreateExecDestroy(ctx, be, bench.PythonPrint) })
	})
}

// runningSandbox creates a sandbox on be for a benchmark and a client of
// its agent; both go at the benchmark's end.
func runningSandbox(b *testing.B, be backend.Backend) *agentclient.Client {
	ctx := context.Background()
	id := sandbox.NewID()
	info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()})
	if err != nil {
		b.Fatal(err)
	}
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
	b.Cleanup(func() {
		c.Close()
		_ = be.Destroy(ctx, id)
	})
	return c
}

// BenchmarkIsolationExec: `true`, then python3 -c 'print(1)', in a
// running sandbox.
func BenchmarkIsolationExec(b *testing.B) {
	forLevels(b, func(b *testing.B, be backend.Backend) {
		c := runningSandbox(b, be)
		ctx := context.Background()
		b.Run("true", func(b *testing.B) { timed(b, func() error { return bench.ExecRoundTrip(ctx, c, []string{"true"}) }) })
		b.Run("python", func(b *testing.B) { timed(b, func() error { return bench.ExecRoundTrip(ctx, c, bench.PythonPrint) }) })
	})
}

// BenchmarkIsolationFileWrite: 64 MiB written to /workspace with dd
// (the sandbox's disk), reported as MiB/s.
func BenchmarkIsolationFileWrite(b *testing.B) {
	forLevels(b, func(b *testing.B, be backend.Backend) {
		c := runningSandbox(b, be)
		ctx := context.Background()
		const mib = 64
		cmd := []string{"/bin/sh", "-c", fmt.Sprintf("dd if=/dev/zero of=/workspace/f bs=1M count=%d conv=fsync 2>/dev/null && rm /workspace/f", mib)}
		var total time.Duration
		timed(b, func() error {
			start := time.Now()
			err := bench.ExecRoundTrip(ctx, c, cmd)
			total += time.Since(start)
			return err
		})
		b.ReportMetric(float64(mib*b.N)/total.Seconds(), "MiB/s")
	})
}

// BenchmarkIsolationIdleMemory: what an idle sandbox costs, by level: the
// processes' PSS and the sandbox cgroup's charge.
func BenchmarkIsolationIdleMemory(b *testing.B) {
	forLevels(b, func(b *testing.B, be backend.Backend) {
		ctx := context.Background()
		const n = 5
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
				_ = be.Destroy(ctx, id)
			}
		}()
		time.Sleep(time.Second)
		var pss, cg int64
		for _, id := range ids {
			m, err := bench.SandboxMemory(ctx, be, id)
			if err != nil {
				b.Fatal(err)
			}
			pss, cg = pss+m.PSSBytes, cg+m.CgroupBytes
		}
		b.ReportMetric(float64(pss)/n/(1<<20), "pss-MiB/sandbox")
		b.ReportMetric(float64(cg)/n/(1<<20), "cgroup-MiB/sandbox")
	})
}
