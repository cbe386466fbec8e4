package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/agent/codeinterp"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// CodeContext describes a code context of the agent (E2B's shape).
type CodeContext = codeinterp.Info

// CodeEvent is one event of an execution stream (see codeinterp.Event).
type CodeEvent = codeinterp.Event

// maxCodeErrorBody bounds an error message read from the agent.
const maxCodeErrorBody = 64 << 10

// CreateContext makes a code context for language (python, javascript,
// bash; empty: python) in cwd (empty: the default working directory),
// running as user (empty: the agent's user), and starts its interpreter.
func (c *Client) CreateContext(ctx context.Context, language, cwd, user string) (CodeContext, error) {
	body, err := json.Marshal(map[string]string{"language": language, "cwd": cwd, "user": user})
	if err != nil {
		return CodeContext{}, err
	}
	resp, err := c.codeDo(ctx, http.MethodPost, "/contexts", nil, bytes.NewReader(body))
	if err != nil {
		return CodeContext{}, err
	}
	defer resp.Body.Close()
	var info CodeContext
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return CodeContext{}, mapError("create context", fmt.Errorf("decode response: %w", err))
	}
	return info, nil
}

// ListContexts describes the agent's code contexts, the default python
// context included.
func (c *Client) ListContexts(ctx context.Context) ([]CodeContext, error) {
	resp, err := c.codeDo(ctx, http.MethodGet, "/contexts", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []CodeContext
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, mapError("list contexts", fmt.Errorf("decode response: %w", err))
	}
	return out, nil
}

// RestartContext replaces the context's interpreter; its state is lost.
func (c *Client) RestartContext(ctx context.Context, id string) error {
	resp, err := c.codeDo(ctx, http.MethodPost, "/contexts/"+url.PathEscape(id)+"/restart", nil, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// DeleteContext removes the context and kills its interpreter.
func (c *Client) DeleteContext(ctx context.Context, id string) error {
	resp, err := c.codeDo(ctx, http.MethodDelete, "/contexts/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ExecuteRequest is one execution. ContextID and Language are exclusive;
// with neither the default python context runs the code.
type ExecuteRequest struct {
	Code      string
	ContextID string
	Language  string
	EnvVars   map[string]string
	// Timeout bounds the execution (0: the agent's default, 300s); when
	// it passes the execution is interrupted, and the interpreter
	// restarted if it does not stop.
	Timeout time.Duration
	// MaxOutputBytes caps stdout and stderr each (0: the agent's default,
	// 1 MiB); the stream reports the truncation.
	MaxOutputBytes int64
	// KeepaliveInterval spaces keepalive events (0: the agent's default).
	KeepaliveInterval time.Duration
}

// ExecuteRaw starts an execution and returns its NDJSON event stream,
// unparsed, for callers that pass it through. Errors before the stream
// (unknown context, bad request) are classified; closing the body (or
// cancelling ctx) interrupts the execution.
func (c *Client) ExecuteRaw(ctx context.Context, req ExecuteRequest) (io.ReadCloser, error) {
	body := map[string]any{"code": req.Code}
	if req.ContextID != "" {
		body["context_id"] = req.ContextID
	}
	if req.Language != "" {
		body["language"] = req.Language
	}
	if len(req.EnvVars) > 0 {
		body["env_vars"] = req.EnvVars
	}
	if req.Timeout > 0 {
		body["timeout"] = req.Timeout.Seconds()
	}
	if req.MaxOutputBytes > 0 {
		body["max_output_bytes"] = req.MaxOutputBytes
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	var hdr http.Header
	if req.KeepaliveInterval > 0 {
		hdr = http.Header{"Keepalive-Ping-Interval": {strconv.Itoa(max(1, int(req.KeepaliveInterval.Seconds())))}}
	}
	resp, err := c.codeDo(ctx, http.MethodPost, "/execute", hdr, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Execute starts an execution and returns its typed event stream.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest) (*ExecutionStream, error) {
	body, err := c.ExecuteRaw(ctx, req)
	if err != nil {
		return nil, err
	}
	return NewExecutionStream(body), nil
}

// RunCode executes req and collects the whole execution.
func (c *Client) RunCode(ctx context.Context, req ExecuteRequest) (*Execution, error) {
	s, err := c.Execute(ctx, req)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Collect(nil)
}

// codeDo sends a request to a code route. Those answer errors as plain
// text (E2B's code-interpreter server does), which becomes the message of
// a classified error.
func (c *Client) codeDo(ctx context.Context, method, path string, hdr http.Header, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.codeBase+path, body)
	if err != nil {
		return nil, mapError(path, err)
	}
	for k, v := range c.codeHeader {
		req.Header[k] = v
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	c.setHeaders(req.Header, "")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, mapError(method+" "+path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxCodeErrorBody))
	text := strings.TrimSpace(string(msg))
	if text == "" {
		text = resp.Status
	}
	return nil, sandbox.Wrap(classOfStatus(resp.StatusCode), fmt.Errorf("HTTP %d", resp.StatusCode), text)
}
