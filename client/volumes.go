package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// VolumeMount mounts one of the caller's volumes into a sandbox at
// create: Name at Path, read-only or not, its whole tree or only SubPath.
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	SubPath  string `json:"subpath,omitempty"`
}

// Volume is a named store of files of the caller's that outlives
// sandboxes (docs/volumes.md).
type Volume struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
	Node      string    `json:"node,omitempty"`
	// Used is what its filesystem holds (GetVolume only).
	Used      *int64   `json:"used,omitempty"`
	MountedBy []string `json:"mounted_by"`
}

func volumePath(name, rest string) string { return "/v1/volumes/" + url.PathEscape(name) + rest }

// CreateVolume creates volume name of size bytes (0: the server's
// default) and kind ("": local).
func (c *Client) CreateVolume(ctx context.Context, name, kind string, size int64) (*Volume, error) {
	body := map[string]any{"name": name}
	if kind != "" {
		body["kind"] = kind
	}
	if size > 0 {
		body["size"] = size
	}
	var v Volume
	if err := c.doJSON(ctx, "create volume "+name, http.MethodPost, "/v1/volumes", nil, body, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ListVolumes returns the caller's volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var vs []Volume
	if err := c.doJSON(ctx, "list volumes", http.MethodGet, "/v1/volumes", nil, nil, &vs); err != nil {
		return nil, err
	}
	return vs, nil
}

// GetVolume returns volume name, or ErrNotFound.
func (c *Client) GetVolume(ctx context.Context, name string) (*Volume, error) {
	var v Volume
	if err := c.doJSON(ctx, "get volume "+name, http.MethodGet, volumePath(name, ""), nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// DeleteVolume deletes volume name and its files; refused while a
// sandbox mounts it unless force.
func (c *Client) DeleteVolume(ctx context.Context, name string, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", strconv.FormatBool(force))
	}
	return c.doJSON(ctx, "delete volume "+name, http.MethodDelete, volumePath(name, ""), q, nil, nil)
}

// Fork makes count new sandboxes from a live copy of running sandbox
// id's disk, with its env, metadata, limits, network policy and volumes;
// processes are not carried. timeout 0: the server's default.
func (c *Client) Fork(ctx context.Context, id string, count int, timeout time.Duration) ([]Sandbox, error) {
	body := map[string]any{"count": count}
	if timeout > 0 {
		body["timeout"] = seconds(timeout)
	}
	var out struct {
		Sandboxes []Sandbox `json:"sandboxes"`
	}
	if err := c.doJSON(ctx, "fork sandbox "+id, http.MethodPost, sandboxPath(id, "/fork"), nil, body, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}
