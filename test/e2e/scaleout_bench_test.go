package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestScaleOutBench measures (AGENTBOX_BENCH=1; numbers for
// docs/benchmarks.md): an exec round trip sent to the replica that runs the
// sandbox vs forwarded by another, and cold creates per second through one
// vs two replicas (placement by load).
func TestScaleOutBench(t *testing.T) {
	if os.Getenv("AGENTBOX_BENCH") == "" {
		t.Skip("a benchmark: set AGENTBOX_BENCH=1")
	}
	_, _, ds := startReplicas(t, 3, "POOL_SIZE=0", "CLUSTER_PLACEMENT=local", "MAX_SANDBOXES_PER_USER=100")
	ctx := context.Background()
	ca, cb := ds[0].sdk(t, "k1"), ds[1].sdk(t, "k1")
	sb, err := ca.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Delete(ctx, sb.ID)
	const n = 300
	for _, c := range []struct {
		name string
		c    *client.Client
	}{{"direct", ca}, {"forwarded", cb}, {"direct", ca}, {"forwarded", cb}} {
		lat := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			start := time.Now()
			if _, err := c.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
				t.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("exec round trip %-9s p50 %.2f ms  p90 %.2f ms  p99 %.2f ms", c.name,
			ms(lat[n/2]), ms(lat[n*9/10]), ms(lat[n*99/100]))
	}
	// Creates per second: 48 cold creates, 4 at a time, spread over one,
	// two or three replicas (each creates on itself: placement is local).
	for reps := 1; reps <= 3; reps++ {
		const creates, par = 48, 4
		var ids sync.Map
		var failed atomic.Int32
		var firstErr atomic.Value
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, par)
		for i := 0; i < creates; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				s, err := ds[i%reps].sdk(t, "k1").Create(ctx, client.CreateRequest{})
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				ids.Store(s.ID, true)
			}(i)
		}
		wg.Wait()
		el := time.Since(start)
		t.Logf("cold creates through %d replica(s): %d in %.2f s = %.1f/s (%d failed %v)", reps, creates, el.Seconds(), float64(creates)/el.Seconds(), failed.Load(), firstErr.Load())
		ids.Range(func(k, _ any) bool { _ = ca.Delete(ctx, k.(string)); return true })
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// roundRobin is a tiny load balancer in front of replicas, sending each
// request to the next one (no stickiness).
func roundRobin(t *testing.T, ds []*daemon) (string, []*atomic.Int64) {
	t.Helper()
	var next atomic.Uint64
	served := make([]*atomic.Int64, len(ds))
	proxies := make([]*httputil.ReverseProxy, len(ds))
	for i, d := range ds {
		u, err := url.Parse(d.url)
		if err != nil {
			t.Fatal(err)
		}
		proxies[i] = httputil.NewSingleHostReverseProxy(u)
		proxies[i].FlushInterval = -1
		served[i] = &atomic.Int64{}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Bodies read whole first, as a load balancer buffers them (nginx
		// does): a body still streaming while the answer flows back would
		// have this test proxy cut the connection (an HTTP/1 server refuses
		// body reads once it answered), which is not what is under test.
		if r.Body != nil && r.Body != http.NoBody {
			buf, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(buf)), int64(len(buf))
		}
		i := next.Add(1) % uint64(len(proxies))
		served[i].Add(1)
		proxies[i].ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, served
}
