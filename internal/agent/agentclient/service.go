package agentclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Service reports the state of the sandbox's service (GET /service).
func (c *Client) Service(ctx context.Context) (sandbox.ServiceStatus, error) {
	var st sandbox.ServiceStatus
	resp, err := c.do(ctx, http.MethodGet, "/service", nil, "", nil, "")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, mapError("service", fmt.Errorf("decode response: %w", err))
	}
	return st, nil
}

// servicePoll is how often WaitService asks.
const servicePoll = 50 * time.Millisecond

// WaitService waits until the service is ready (or the sandbox runs
// none). A failed service, or one not ready within timeout, is an error
// that carries the service's last output.
func (c *Client) WaitService(ctx context.Context, timeout time.Duration) (sandbox.ServiceStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(servicePoll)
	defer tick.Stop()
	var st sandbox.ServiceStatus // the last status the agent gave
	for {
		got, err := c.Service(ctx)
		if err == nil {
			st = got
			switch st.State {
			case sandbox.ServiceReady, sandbox.ServiceNone:
				return st, nil
			case sandbox.ServiceFailed:
				return st, sandbox.Errorf(sandbox.ClassUnavailable, "the template's service failed: %s%s", st.Error, outputTail(st))
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			if err != nil && st.State == "" {
				return st, sandbox.Errorf(sandbox.ClassTimeout, "the template's service: no answer from the agent within %s: %v", timeout, err)
			}
			return st, sandbox.Errorf(sandbox.ClassTimeout, "the template's service was not ready within %s (%d restarts)%s", timeout, st.Restarts, outputTail(st))
		}
	}
}

// outputTail formats the service's last output for an error message.
func outputTail(st sandbox.ServiceStatus) string {
	out := strings.TrimSpace(st.Output)
	if out == "" {
		return "; it wrote no output"
	}
	const max = 2048
	if len(out) > max {
		out = "..." + out[len(out)-max:]
	}
	return "; its last output:\n" + out
}
