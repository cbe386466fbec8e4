package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// NetworkCreate measures cold create+destroy of sandboxes in mode n, to set
// against the same with mode "none": the difference is what networking adds.
func NetworkCreate(ctx context.Context, b backend.Backend, n sandbox.NetworkMode, count int) ([]time.Duration, error) {
	return Measure(count, 2, func() error {
		id := sandbox.NewID()
		if _, err := b.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), Network: sandbox.Network{Mode: n}}); err != nil {
			return err
		}
		return b.Destroy(ctx, id)
	})
}

// StartHTTPServer starts `python3 -m http.server port` in a sandbox and
// waits until it answers through dial.
func StartHTTPServer(ctx context.Context, c *agentclient.Client, port int, dial func(context.Context) (net.Conn, error)) error {
	p, err := c.Start(ctx, agentclient.StartOptions{Cmd: "python3",
		Args: []string{"-m", "http.server", fmt.Sprint(port), "--bind", "127.0.0.1", "--directory", "/tmp"}})
	if err != nil {
		return err
	}
	p.Close() // it keeps running; the sandbox's destruction ends it
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if conn, err := dial(ctx); err == nil {
			conn.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("http server in the sandbox did not come up")
}

// HTTPRoundTrips measures GET url with client, n times (keep-alive).
func HTTPRoundTrips(ctx context.Context, client *http.Client, url string, header http.Header, n int) ([]time.Duration, error) {
	return Measure(n, 5, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}
