package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// DesktopLink is a signed, expiring link to the noVNC page of a desktop
// sandbox (templates/desktop): whoever has it watches (mode "view") or
// uses (mode "interactive") the sandbox's screen until it expires.
type DesktopLink struct {
	URL       string    `json:"url"`
	Path      string    `json:"path"`
	Mode      string    `json:"mode"`
	ExpiresAt time.Time `json:"expires_at"`
}

// DesktopLink returns a link to the desktop page of sandbox id. mode is
// "view" (the default when empty) or "interactive"; ttl zero is the
// server's default (an hour), at most a day.
func (c *Client) DesktopLink(ctx context.Context, id, mode string, ttl time.Duration) (*DesktopLink, error) {
	body := struct {
		Mode string  `json:"mode,omitempty"`
		TTL  float64 `json:"ttl,omitempty"`
	}{mode, seconds(ttl)}
	var l DesktopLink
	if err := c.doJSON(ctx, "desktop link of sandbox "+id, http.MethodPost, sandboxPath(id, "/desktop/links"), nil, body, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Recording is the state of a sandbox's screen recording.
type Recording struct {
	Recording  bool      `json:"recording"`
	Path       string    `json:"path,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	MaxSeconds int       `json:"max_seconds,omitempty"`
	Bytes      int64     `json:"bytes,omitempty"`
	Error      string    `json:"error,omitempty"`
}

// RecordOptions shape a recording; zero values take the server's
// defaults (a name from the time, 600 s, 10 fps, 512 MiB).
type RecordOptions struct {
	// Name of the file: /workspace/recordings/<Name>.mp4.
	Name       string `json:"name,omitempty"`
	MaxSeconds int    `json:"max_seconds,omitempty"`
	FPS        int    `json:"fps,omitempty"`
	MaxBytes   int64  `json:"max_bytes,omitempty"`
}

// StartRecording starts recording the screen of sandbox id into an MP4
// file in its workspace.
func (c *Client) StartRecording(ctx context.Context, id string, o RecordOptions) (*Recording, error) {
	body := struct {
		Action string `json:"action"`
		RecordOptions
	}{"start", o}
	return c.record(ctx, id, "start recording", http.MethodPost, body)
}

// StopRecording stops the recording of sandbox id; the file stays.
func (c *Client) StopRecording(ctx context.Context, id string) (*Recording, error) {
	return c.record(ctx, id, "stop recording", http.MethodPost, map[string]string{"action": "stop"})
}

// RecordingStatus returns the state of the recording of sandbox id (the
// last one, when none runs).
func (c *Client) RecordingStatus(ctx context.Context, id string) (*Recording, error) {
	return c.record(ctx, id, "recording status", http.MethodGet, nil)
}

func (c *Client) record(ctx context.Context, id, op, method string, body any) (*Recording, error) {
	var r Recording
	if err := c.doJSON(ctx, fmt.Sprintf("%s of sandbox %s", op, id), method, sandboxPath(id, "/desktop/record"), nil, body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
