package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// APIPoolHitCreate measures creates served from a warm pool: it waits for
// the pool to be full before each create, so every sample is a hit, and
// deletes the sandbox outside the timed section.
func APIPoolHitCreate(ctx context.Context, c *client.Client, n int, waitPool func() error) ([]time.Duration, error) {
	return APIPoolHitCreateOf(ctx, c, client.CreateRequest{}, n, waitPool)
}

// APIPoolHitCreateOf is APIPoolHitCreate with creates of req.
func APIPoolHitCreateOf(ctx context.Context, c *client.Client, req client.CreateRequest, n int, waitPool func() error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		if err := waitPool(); err != nil {
			return out, err
		}
		start := time.Now()
		sb, err := c.Create(ctx, req)
		d := time.Since(start)
		if err != nil {
			return out, err
		}
		if !sb.FromPool {
			return out, fmt.Errorf("create %d was not a pool hit", i)
		}
		out = append(out, d)
		if err := c.Delete(ctx, sb.ID); err != nil {
			return out, err
		}
	}
	return out, nil
}

// APIColdCreate measures creates that boot a new sandbox (no pool).
func APIColdCreate(ctx context.Context, c *client.Client, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		sb, err := c.Create(ctx, client.CreateRequest{})
		d := time.Since(start)
		if err != nil {
			return out, err
		}
		out = append(out, d)
		if err := c.Delete(ctx, sb.ID); err != nil {
			return out, err
		}
	}
	return out, nil
}

// APIExecRoundTrip measures a buffered exec of cmd through the API.
func APIExecRoundTrip(ctx context.Context, c *client.Client, id string, cmd []string, n int) ([]time.Duration, error) {
	return Measure(n, 5, func() error {
		res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: cmd})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("%v exited %d", cmd, res.ExitCode)
		}
		return nil
	})
}

// Throughput runs create+exec+destroy cycles from `clients` goroutines for
// d and returns completed cycles per second and the cycle latencies.
func Throughput(ctx context.Context, c *client.Client, clients int, d time.Duration) (float64, []time.Duration, error) {
	var (
		mu      sync.Mutex
		samples []time.Duration
		firstEr error
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				err := Cycle(ctx, c)
				mu.Lock()
				if err != nil {
					if firstEr == nil {
						firstEr = err
					}
					mu.Unlock()
					return
				}
				samples = append(samples, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	return float64(len(samples)) / elapsed.Seconds(), samples, firstEr
}

// Cycle is one create, exec `true` and delete through the API.
func Cycle(ctx context.Context, c *client.Client) error {
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		return err
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
	if err != nil {
		c.Delete(ctx, sb.ID)
		return err
	}
	if res.ExitCode != 0 {
		c.Delete(ctx, sb.ID)
		return fmt.Errorf("true exited %d", res.ExitCode)
	}
	return c.Delete(ctx, sb.ID)
}
