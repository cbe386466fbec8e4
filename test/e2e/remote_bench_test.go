package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
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

// BenchmarkRemoteDaytona is BenchmarkRemote of a Daytona provider:
// through a daemon whose daytona:base template runs at another agentbox
// daemon's Daytona API, against the same calls made to that API directly
// (a toolbox process/execute, a POST /api/sandbox).
func BenchmarkRemoteDaytona(b *testing.B) {
	prov := startBenchDaemon(b, "NETWORK=off", "API_KEYS="+remoteProviderKey+":operator", "MAX_SANDBOXES_PER_USER=0", "MAX_SANDBOX_INSTANCES=0")
	front := startBenchDaemon(b, "NETWORK=off", "API_KEYS=k1:alice", "SANDBOX_PROVIDER=daytona", "DAYTONA_API_KEY="+remoteProviderKey,
		"DAYTONA_SERVER_URL="+prov+"/api", "PROVIDER_MAX_PER_USER=0", "MAX_SANDBOXES_PER_USER=0", "MAX_SANDBOX_INSTANCES=0")
	ctx := context.Background()
	c, err := client.New(front, client.WithAPIKey("k1"))
	if err != nil {
		b.Fatal(err)
	}
	direct := func(method, path, body string) []byte {
		req, _ := http.NewRequestWithContext(ctx, method, prov+"/api"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+remoteProviderKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	directCreate := func() string {
		var sb struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(direct(http.MethodPost, "/sandbox", `{"snapshot":"base"}`), &sb); err != nil || sb.ID == "" {
			b.Fatalf("direct create: %v", err)
		}
		return sb.ID
	}
	b.Run("exec/via-remote-backend", func(b *testing.B) {
		sb, err := c.Create(ctx, client.CreateRequest{Template: "daytona:base"})
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
	b.Run("exec/provider-direct", func(b *testing.B) {
		id := directCreate()
		defer direct(http.MethodDelete, "/sandbox/"+id, "")
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			direct(http.MethodPost, "/toolbox/"+id+"/process/execute", `{"command":"true"}`)
			samples = append(samples, time.Since(start))
		}
		reportQuantiles(b, samples)
	})
	// Code in the sandbox's default context: the toolbox's interpreter
	// over its WebSocket through the bridge.
	b.Run("code/via-remote-backend", func(b *testing.B) {
		sb, err := c.Create(ctx, client.CreateRequest{Template: "daytona:base"})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = c.Delete(ctx, sb.ID) }()
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			r, err := c.RunCode(ctx, sb.ID, client.CodeRequest{Code: "print(1)"})
			samples = append(samples, time.Since(start))
			if err != nil || r.Stdout != "1\n" {
				b.Fatalf("code: %+v %v", r, err)
			}
		}
		reportQuantiles(b, samples)
	})
	b.Run("create/via-remote-backend", func(b *testing.B) {
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			sb, err := c.Create(ctx, client.CreateRequest{Template: "daytona:base"})
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
	b.Run("create/provider-direct", func(b *testing.B) {
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			id := directCreate()
			samples = append(samples, time.Since(start))
			b.StopTimer()
			direct(http.MethodDelete, "/sandbox/"+id, "")
			b.StartTimer()
		}
		reportQuantiles(b, samples)
	})
}
