package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkStateStoreCreates measures create + delete through one daemon's
// API with its state in bbolt (the reference) and in Redis, side by side:
// 1 and 4 clients, each alternating between the two daemons so both see the
// same machine load (no pool). It is the one-replica baseline of scale-out
// (docs/benchmarks.md):
//
//	go test -run '^$' -bench StateStoreCreates -benchtime 40x ./test/e2e/
func BenchmarkStateStoreCreates(b *testing.B) {
	srv := testutil.StartRedis(b)
	common := []string{"POOL_SIZE=0", "MAX_SANDBOX_INSTANCES=0", "MAX_SANDBOXES_PER_USER=0", "NETWORK=off"}
	clients := map[string]*client.Client{}
	for name, url := range map[string]string{
		"bolt":  startBenchDaemon(b, common...),
		"redis": startBenchDaemon(b, append(common, "REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port))...),
	} {
		c, err := client.New(url)
		if err != nil {
			b.Fatal(err)
		}
		clients[name] = c
	}
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", workers), func(b *testing.B) { benchCreates(b, clients, workers) })
	}
}

func benchCreates(b *testing.B, clients map[string]*client.Client, workers int) {
	var mu sync.Mutex
	samples := map[string][]time.Duration{}
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w, n int) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				for _, name := range [][2]string{{"bolt", "redis"}, {"redis", "bolt"}}[(w+i)%2] {
					start := time.Now()
					sb, err := clients[name].Create(context.Background(), client.CreateRequest{})
					if err == nil {
						err = clients[name].Delete(context.Background(), sb.ID)
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", name, err)
						return
					}
					mu.Lock()
					samples[name] = append(samples[name], time.Since(start))
					mu.Unlock()
				}
			}
		}(w, (b.N+workers-1)/workers)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	bp, rp := quantileMs(samples["bolt"], 0.5), quantileMs(samples["redis"], 0.5)
	b.ReportMetric(bp, "bolt-p50-ms")
	b.ReportMetric(quantileMs(samples["bolt"], 0.99), "bolt-p99-ms")
	b.ReportMetric(rp, "redis-p50-ms")
	b.ReportMetric(quantileMs(samples["redis"], 0.99), "redis-p99-ms")
	b.ReportMetric(rp/bp, "redis/bolt")
}
