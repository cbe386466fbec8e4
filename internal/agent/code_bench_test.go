package agent_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// reportPercentiles adds p50 and p99 of the samples (milliseconds).
func reportPercentiles(b *testing.B, samples []time.Duration, prefix string) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(samples))), len(samples)-1)
		return float64(samples[i].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), prefix+"p50-ms")
	b.ReportMetric(at(0.99), prefix+"p99-ms")
}

func benchAgent(b *testing.B) *agentclient.Client {
	b.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		b.Skip("needs /usr/bin/python3")
	}
	a := agenttest.Start(b, agenttest.Options{Env: []string{systemPath}, LogLevel: "warn"})
	return a.Client(b, "")
}

func benchRun(b *testing.B, c *agentclient.Client, req agentclient.ExecuteRequest) *agentclient.Execution {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, err := c.RunCode(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if x.Error != nil {
		b.Fatalf("%s: %s", x.Error.Name, x.Error.Value)
	}
	return x
}

// BenchmarkCodeRoundTrip: `1+1` in a warm python context, through the
// agent's HTTP API (unix socket), the driver and back.
func BenchmarkCodeRoundTrip(b *testing.B) {
	c := benchAgent(b)
	benchRun(b, c, agentclient.ExecuteRequest{Code: "1"}) // start the interpreter
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		x := benchRun(b, c, agentclient.ExecuteRequest{Code: "1+1"})
		samples = append(samples, time.Since(start))
		if x.Text() != "2" {
			b.Fatalf("got %q", x.Text())
		}
	}
	reportPercentiles(b, samples, "")
}

// BenchmarkCodeColdContext: create a python context and run its first
// cell (interpreter start included).
func BenchmarkCodeColdContext(b *testing.B) {
	c := benchAgent(b)
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		info, err := c.CreateContext(ctx, "python", "", "")
		if err != nil {
			b.Fatal(err)
		}
		benchRun(b, c, agentclient.ExecuteRequest{Code: "1+1", ContextID: info.ID})
		samples = append(samples, time.Since(start))
		b.StopTimer()
		if err := c.DeleteContext(ctx, info.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportPercentiles(b, samples, "")
}

// BenchmarkCodeConcurrentContexts: 20 contexts, each running a loop of
// cells at the same time; one iteration is one cell in every context.
func BenchmarkCodeConcurrentContexts(b *testing.B) {
	const contexts = 20
	c := benchAgent(b)
	ctx := context.Background()
	ids := make([]string, contexts)
	for i := range ids {
		info, err := c.CreateContext(ctx, "python", "", "")
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = info.ID
		benchRun(b, c, agentclient.ExecuteRequest{Code: "n = 0", ContextID: info.ID})
	}
	var mu sync.Mutex
	samples := make([]time.Duration, 0, b.N*contexts)
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				start := time.Now()
				benchRun(b, c, agentclient.ExecuteRequest{Code: "n += 1\nsum(range(1000)) + n", ContextID: id})
				d := time.Since(start)
				mu.Lock()
				samples = append(samples, d)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	b.ReportMetric(float64(len(samples))/b.Elapsed().Seconds(), "cells/s")
	reportPercentiles(b, samples, "cell-")
}
