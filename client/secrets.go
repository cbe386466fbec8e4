package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Secret is a stored secret as the server describes it: never its value.
type Secret struct {
	// ID identifies the secret (sec_...) while it exists.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Version counts the values stored: 1 when created, one more at each
	// replacement.
	Version  int               `json:"version"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Placeholder is what a sandbox may carry instead of the value; the
	// egress broker replaces it in requests to the hosts the secret is
	// bound to.
	Placeholder string    `json:"placeholder"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

// PutSecret creates the caller's secret name or replaces its value.
func (c *Client) PutSecret(ctx context.Context, name, value string) (*Secret, error) {
	body := struct {
		Value string `json:"value"`
	}{value}
	var s Secret
	if err := c.doJSON(ctx, "put secret "+name, http.MethodPut, secretPath(name), nil, body, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSecret returns the caller's secret name (without its value).
func (c *Client) GetSecret(ctx context.Context, name string) (*Secret, error) {
	var s Secret
	if err := c.doJSON(ctx, "get secret "+name, http.MethodGet, secretPath(name), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSecrets returns the caller's secrets by name.
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	var out struct {
		Secrets []Secret `json:"secrets"`
	}
	if err := c.doJSON(ctx, "list secrets", http.MethodGet, "/v1/secrets", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Secrets, nil
}

// DeleteSecret deletes the caller's secret name.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.doJSON(ctx, "delete secret "+name, http.MethodDelete, secretPath(name), nil, nil, nil)
}

// UpdateNetwork replaces a running sandbox's egress policy (allow and
// deny lists, rules); established connections the new policy denies are
// cut.
func (c *Client) UpdateNetwork(ctx context.Context, id string, n Network) (*Sandbox, error) {
	if n.Mode == "" {
		n.Mode = "egress"
	}
	var sb Sandbox
	if err := c.doJSON(ctx, "update network of sandbox "+id, http.MethodPut, sandboxPath(id, "/network"), nil, n, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}
