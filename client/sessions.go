package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// ConnectSessionRequest asks for a session's sandboxes. A session is keyed
// by (session id, user id), as agentscope's SandboxService does.
type ConnectSessionRequest struct {
	UserID string
	// Types are the sandbox types wanted (default ["base"]); missing ones
	// are created.
	Types []string
	// Timeout applies to sandboxes created by this call; zero means the
	// server's default. Sent in seconds.
	Timeout time.Duration
	Env     map[string]string
}

// Session is a session's sandboxes, one per requested type.
type Session struct {
	SessionKey string     `json:"session_key"`
	Sandboxes  []*Sandbox `json:"sandboxes"`
}

// ConnectSession returns the sandboxes of session sessionID, creating the
// missing types.
func (c *Client) ConnectSession(ctx context.Context, sessionID string, req ConnectSessionRequest) (*Session, error) {
	body := struct {
		UserID  string            `json:"user_id,omitempty"`
		Types   []string          `json:"types,omitempty"`
		Timeout float64           `json:"timeout,omitempty"`
		Env     map[string]string `json:"env,omitempty"`
	}{req.UserID, req.Types, seconds(req.Timeout), req.Env}
	var s Session
	if err := c.doJSON(ctx, "connect session "+sessionID, http.MethodPost, sessionPath(sessionID, "/connect"), nil, body, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ReleaseSession destroys every sandbox of the session (sessionID, userID)
// and returns their ids. userID may be empty.
func (c *Client) ReleaseSession(ctx context.Context, sessionID, userID string) ([]string, error) {
	body := struct {
		UserID string `json:"user_id,omitempty"`
	}{userID}
	var out struct {
		Released []string `json:"released"`
	}
	if err := c.doJSON(ctx, "release session "+sessionID, http.MethodPost, sessionPath(sessionID, "/release"), nil, body, &out); err != nil {
		return nil, err
	}
	return out.Released, nil
}

func sessionPath(sessionID, suffix string) string {
	return "/v1/sessions/" + url.PathEscape(sessionID) + suffix
}
