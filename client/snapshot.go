package client

import (
	"context"
	"net/http"
	"time"
)

// Template describes a template of the server's template store.
type Template struct {
	Name    string          `json:"name"`
	Tag     string          `json:"tag"`
	Kind    string          `json:"kind"`
	Digest  string          `json:"digest,omitempty"`
	Source  string          `json:"source,omitempty"`
	Layers  []TemplateLayer `json:"layers,omitempty"`
	Size    int64           `json:"size"`
	Created time.Time       `json:"created"`
	InUse   int             `json:"in_use"`
}

// TemplateLayer is one layer of a template.
type TemplateLayer struct {
	DiffID string `json:"diff_id"`
	Size   int64  `json:"size"`
}

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
