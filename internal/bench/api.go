package bench

import (
	"context"
	"errors"
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

// APIRecycle measures what recycling costs a client of a daemon whose pool
// recycles (POOL_MAX_USES > 1): the delete of a used pooled sandbox, which
// resets it and returns it to the pool, plus the next pool take. Each
// sample is delete + take; the pool is full before each delete, so the take
// never waits for a refill. It fails unless deleted sandboxes come out of
// the pool again (they were recycled, not destroyed).
func APIRecycle(ctx context.Context, c *client.Client, n int, waitPool func() error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	if err := waitPool(); err != nil {
		return out, err
	}
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		return out, err
	}
	deleted := map[string]bool{}
	reused := 0
	for i := 0; i < n; i++ {
		// Use it: a file, a background process, as a user would.
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo x > /workspace/f; (sleep 600 >/dev/null 2>&1 &)"}}); err != nil {
			return out, err
		}
		if err := waitPool(); err != nil {
			return out, err
		}
		start := time.Now()
		if err := c.Delete(ctx, sb.ID); err != nil {
			return out, err
		}
		deleted[sb.ID] = true
		next, err := c.Create(ctx, client.CreateRequest{})
		d := time.Since(start)
		if err != nil {
			return out, err
		}
		if !next.FromPool {
			return out, fmt.Errorf("take %d was not a pool hit", i)
		}
		if deleted[next.ID] {
			reused++
		}
		out = append(out, d)
		sb = next
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		return out, err
	}
	if n > 1 && reused == 0 {
		return out, fmt.Errorf("no deleted sandbox came out of the pool again: the server did not recycle (POOL_MAX_USES)")
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
		return errors.Join(err, c.Delete(ctx, sb.ID))
	}
	if res.ExitCode != 0 {
		return errors.Join(fmt.Errorf("true exited %d", res.ExitCode), c.Delete(ctx, sb.ID))
	}
	return c.Delete(ctx, sb.ID)
}
