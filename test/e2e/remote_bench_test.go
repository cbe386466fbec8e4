package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// BenchmarkRemote measures what the remote backend adds: an exec round
// trip and a create (with its delete outside the timing) through a daemon
// whose template runs at an E2B-compatible provider (another agentbox
// daemon on loopback), against the same call made to the provider
// directly.
func BenchmarkRemote(b *testing.B) {
	prov := startBenchDaemon(b, "NETWORK=off", "API_KEYS="+remoteProviderKey+":operator", "MAX_SANDBOXES_PER_USER=0", "MAX_SANDBOX_INSTANCES=0")
	front := startBenchDaemon(b, "NETWORK=off", "API_KEYS=k1:alice", "SANDBOX_PROVIDER=e2b", "E2B_API_KEY="+remoteProviderKey,
		"E2B_API_URL="+prov, "E2B_SANDBOX_URL="+prov, "E2B_DOMAIN=localhost", "PROVIDER_MAX_PER_USER=0", "MAX_SANDBOXES_PER_USER=0", "MAX_SANDBOX_INSTANCES=0")
	targets := []struct {
		name, url, key, template string
	}{
		{"via-remote-backend", front, "k1", "e2b:base"},
		{"provider-direct", prov, remoteProviderKey, "base"},
	}
	ctx := context.Background()
	for _, tg := range targets {
		c, err := client.New(tg.url, client.WithAPIKey(tg.key))
		if err != nil {
			b.Fatal(err)
		}
		b.Run("exec/"+tg.name, func(b *testing.B) {
			sb, err := c.Create(ctx, client.CreateRequest{Template: tg.template})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Delete(ctx, sb.ID) }()
			var samples []time.Duration
			for b.Loop() {
				start := time.Now()
				r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
				samples = append(samples, time.Since(start))
				if err != nil || r.ExitCode != 0 {
					b.Fatalf("exec: %+v %v", r, err)
				}
			}
			reportQuantiles(b, samples)
		})
		b.Run("create/"+tg.name, func(b *testing.B) {
			var samples []time.Duration
			for b.Loop() {
				start := time.Now()
				sb, err := c.Create(ctx, client.CreateRequest{Template: tg.template})
				samples = append(samples, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := c.Delete(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			reportQuantiles(b, samples)
		})
	}
}

// reportQuantiles reports the p50 and p99 of samples in milliseconds.
func reportQuantiles(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[min(int(q*float64(len(samples))), len(samples)-1)].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
