package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// BenchmarkEventsOverhead measures create + exec + delete through two
// daemons side by side, one with events, audit and metrics history off,
// one recording events with a webhook receiving every one on loopback,
// auditing every call and sampling metrics every 0.5 s,
// alternating between them so both see the same machine load
// (docs/benchmarks.md):
//
//	go test -run '^$' -bench EventsOverhead -benchtime 60x ./test/e2e/
func BenchmarkEventsOverhead(b *testing.B) {
	var received atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	common := []string{"POOL_SIZE=0", "MAX_SANDBOX_INSTANCES=0", "MAX_SANDBOXES_PER_USER=0", "NETWORK=off", "BEARER_TOKEN=kb"}
	urls := map[string]string{
		"off": startBenchDaemon(b, append(common, "EVENTS_ENABLED=false", "AUDIT_ENABLED=false", "METRICS_HISTORY_RESOLUTION=0")...),
		"on":  startBenchDaemon(b, append(common, "WEBHOOK_ALLOW_PRIVATE=true", "METRICS_HISTORY_RESOLUTION=0.5")...),
	}
	req, _ := http.NewRequest("POST", urls["on"]+"/v1/webhooks", strings.NewReader(fmt.Sprintf(`{"url":"http://%s/"}`, ln.Addr())))
	req.Header.Set("Authorization", "Bearer kb")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 201 {
		b.Fatalf("register webhook: %v %v", resp, err)
	}
	resp.Body.Close()
	onOffCycles(b, urls["off"], urls["on"])
	// Two events (created, killed) per cycle reach the receiver.
	for i := 0; i < 100 && received.Load() < int64(2*b.N); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	b.ReportMetric(float64(received.Load())/float64(b.N), "deliveries/op")
}

// onOffCycles runs b.N create + exec `true` + delete cycles on each of two
// daemons (key kb), alternating which goes first so both see the same
// load, and reports the p50/p99 of each and the on/off ratio.
func onOffCycles(b *testing.B, offURL, onURL string) {
	clients := map[string]*client.Client{}
	for name, url := range map[string]string{"off": offURL, "on": onURL} {
		c, err := client.New(url, client.WithAPIKey("kb"))
		if err != nil {
			b.Fatal(err)
		}
		clients[name] = c
	}
	samples := map[string][]time.Duration{}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, name := range [][2]string{{"off", "on"}, {"on", "off"}}[i%2] {
			start := time.Now()
			sb, err := clients[name].Create(ctx, client.CreateRequest{})
			if err == nil {
				_, err = clients[name].Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
			}
			if err == nil {
				err = clients[name].Delete(ctx, sb.ID)
			}
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			samples[name] = append(samples[name], time.Since(start))
		}
	}
	b.StopTimer()
	off, on := quantileMs(samples["off"], 0.5), quantileMs(samples["on"], 0.5)
	b.ReportMetric(off, "off-p50-ms")
	b.ReportMetric(quantileMs(samples["off"], 0.99), "off-p99-ms")
	b.ReportMetric(on, "on-p50-ms")
	b.ReportMetric(quantileMs(samples["on"], 0.99), "on-p99-ms")
	b.ReportMetric(on/off, "on/off")
}
