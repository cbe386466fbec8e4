package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// PreviewToken grants access to a port of a sandbox through the server.
type PreviewToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	// Path is the path-form preview URL on the server, token included.
	Path string `json:"path"`
	// URL is the full URL: the host form when the server has a preview
	// domain, else the server's URL with Path.
	URL string `json:"url,omitempty"`
}

// CreatePreviewToken returns a token and URL for port of sandbox id,
// valid for ttl (zero: the server's default, one hour).
func (c *Client) CreatePreviewToken(ctx context.Context, id string, port int, ttl time.Duration) (*PreviewToken, error) {
	body := struct {
		Port int     `json:"port"`
		TTL  float64 `json:"ttl,omitempty"`
	}{port, seconds(ttl)}
	var t PreviewToken
	if err := c.doJSON(ctx, fmt.Sprintf("preview token for port %d of sandbox %s", port, id), http.MethodPost, sandboxPath(id, "/preview-tokens"), nil, body, &t); err != nil {
		return nil, err
	}
	if t.URL == "" {
		t.URL = c.base.String() + t.Path
	}
	return &t, nil
}

// ToolDef is a tool of the server's tool kit, as GET /v1/tools describes
// it (format "anthropic", the default).
type ToolDef struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
}

// ListTools returns the tool kit's definitions for function calling: the
// tools that act on one sandbox, for CallTool.
func (c *Client) ListTools(ctx context.Context) ([]ToolDef, error) {
	var out struct {
		Tools []ToolDef `json:"tools"`
	}
	if err := c.doJSON(ctx, "list tools", http.MethodGet, "/v1/tools", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

// ListToolsRaw returns GET /v1/tools in a given format ("openai",
// "anthropic" or "mcp"), as JSON ready to pass to a model API.
func (c *Client) ListToolsRaw(ctx context.Context, format string) (json.RawMessage, error) {
	var out struct {
		Tools json.RawMessage `json:"tools"`
	}
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	if err := c.doJSON(ctx, "list tools", http.MethodGet, "/v1/tools", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

// ListSandboxTools returns the tools callable in sandbox id: the tool
// kit's and those of the MCP servers added to the sandbox.
func (c *Client) ListSandboxTools(ctx context.Context, id string) ([]ToolDef, error) {
	var out struct {
		Tools []ToolDef `json:"tools"`
	}
	if err := c.doJSON(ctx, "list tools of sandbox "+id, http.MethodGet, sandboxPath(id, "/tools"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

// ToolContent is one item of a tool result: text, or a base64 image.
type ToolContent struct {
	Type     string `json:"type"` // "text" or "image"
	Text     string `json:"text,omitempty"`
	Data     string `json:"data,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

// ToolResult is what a tool returned. A failed tool is not an error of
// CallTool: IsError is set and Text says what went wrong, for the model.
type ToolResult struct {
	Content []ToolContent `json:"content"`
	IsError bool          `json:"is_error"`
	// Text is the text items joined, ready for a tool message.
	Text string `json:"text"`
}

// CallTool runs tool name with args in sandbox id. args is nil (no
// arguments), the arguments' JSON text as a string, []byte or
// json.RawMessage (as a model's tool call carries them), or any value that
// marshals to a JSON object.
func (c *Client) CallTool(ctx context.Context, id, name string, args any) (*ToolResult, error) {
	var raw []byte
	switch a := args.(type) {
	case nil:
		raw = []byte("{}")
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	case string:
		raw = []byte(a)
	default:
		var err error
		if raw, err = json.Marshal(a); err != nil {
			return nil, fmt.Errorf("call tool %s: encode arguments: %w", name, err)
		}
	}
	op := fmt.Sprintf("call tool %s in sandbox %s", name, id)
	req, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "/tools/"+url.PathEscape(name)), nil, bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(op, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res ToolResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, fmt.Errorf("%s: decode response: %w", op, err)
	}
	return &res, nil
}
