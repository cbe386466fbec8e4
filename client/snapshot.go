package client

import (
	"context"
	"net/http"
)

// Snapshot turns the sandbox's current root filesystem into a new
// template named name ("NAME[:TAG]"): its template plus one layer, what
// the sandbox changed (not /workspace). Sandboxes of the host template
// cannot be snapshotted.
func (c *Client) Snapshot(ctx context.Context, id, name string) (*Template, error) {
	body := struct {
		Name string `json:"name"`
	}{name}
	var t Template
	if err := c.doJSON(ctx, "snapshot sandbox "+id, http.MethodPost, sandboxPath(id, "/snapshot"), nil, body, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
