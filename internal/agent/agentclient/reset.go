package agentclient

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// The agent's warm reset (package agent, reset_linux.go): routes that
// answer to the host's control token (X-Agentbox-Control), not to the
// sandbox's access token.

// ResetKill asks the agent to kill every other process of its sandbox,
// cut every other connection and empty its memory file systems.
func (c *Client) ResetKill(ctx context.Context, control string) error {
	return c.control(ctx, "/reset/kill", control, nil)
}

// ResetRenew asks the agent to replace its server with a new generation
// that requires accessToken. Call it after ResetKill.
func (c *Client) ResetRenew(ctx context.Context, control, accessToken string) error {
	body, err := json.Marshal(map[string]string{"access_token": accessToken})
	if err != nil {
		return err
	}
	return c.control(ctx, "/reset/renew", control, strings.NewReader(string(body)))
}

func (c *Client) control(ctx context.Context, path, control string, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, body)
	if err != nil {
		return mapError(path, err)
	}
	req.Header.Set("X-Agentbox-Control", control)
	resp, err := c.http.Do(req)
	if err != nil {
		return mapError("POST "+path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError("POST "+path, resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // keep the connection
	return nil
}
