package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// ExecRequest is a command to run in a sandbox.
type ExecRequest struct {
	// Cmd is the program and its arguments; no shell is involved (use
	// []string{"sh", "-c", "..."} for one).
	Cmd []string
	// Env is added to the sandbox's environment for this command.
	Env map[string]string
	// Cwd is the working directory (default the user's home).
	Cwd string
	// Timeout kills the command's process group after this long; zero
	// means the server's default (60 s), and the server caps it at the
	// sandbox's remaining life. Sent in seconds.
	Timeout time.Duration
	// Stdin is fed to the command's standard input, which is then closed.
	// It travels as a JSON string, so it must be UTF-8 text: invalid bytes
	// would be replaced. Upload binary input as a file instead.
	Stdin string
	// User is "user" (the default) or "root" in sandboxes that allow it.
	User string
}

// execBody is ExecRequest on the wire.
type execBody struct {
	Cmd     []string          `json:"cmd"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Timeout float64           `json:"timeout,omitempty"`
	Stdin   string            `json:"stdin,omitempty"`
	User    string            `json:"user,omitempty"`
}

func (r ExecRequest) body() execBody {
	return execBody{Cmd: r.Cmd, Env: r.Env, Cwd: r.Cwd, Timeout: seconds(r.Timeout), Stdin: r.Stdin, User: r.User}
}

// ExitInfo is how a command ended.
type ExitInfo struct {
	// ExitCode is the command's exit status, or -1 when a signal killed it.
	ExitCode int `json:"exit_code"`
	// Status describes the end for people, e.g. "exit status 1" or
	// "signal: killed".
	Status string `json:"status,omitempty"`
	// TimedOut is set when the request's timeout killed the command.
	TimedOut bool `json:"timed_out,omitempty"`
	// OOMKilled is set when the sandbox's memory limit killed a process
	// during the run.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// PidsLimitHit is set when forks were refused by the pids limit during
	// the run.
	PidsLimitHit bool `json:"pids_limit_hit,omitempty"`
	// DurationMS is the command's wall-clock run time in milliseconds.
	DurationMS float64 `json:"duration_ms,omitempty"`
}

// Duration returns DurationMS as a time.Duration.
func (x ExitInfo) Duration() time.Duration {
	return time.Duration(x.DurationMS * float64(time.Millisecond))
}

// ExecResult is a finished command with its buffered output.
type ExecResult struct {
	ExitInfo
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Truncated is set when output beyond the server's cap was dropped;
	// use ExecStream or Run for large outputs.
	Truncated bool `json:"truncated,omitempty"`
}

// Exec runs a command in sandbox id, waits for it and returns its output.
// A non-zero exit code is not an error: check ExecResult.ExitCode.
// Cancelling ctx kills the command.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	var res ExecResult
	if err := c.doJSON(ctx, "exec in sandbox "+id, http.MethodPost, sandboxPath(id, "/exec"), nil, req.body(), &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ExecStream runs a command in sandbox id and returns its events as they
// happen (start, stdout, stderr, then exit). The caller must Close the
// stream; closing it or cancelling ctx before the exit event kills the
// command.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest) (*ExecStream, error) {
	op := "exec in sandbox " + id
	b, err := json.Marshal(req.body())
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", op, err)
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "/exec"), nil, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(op, hreq) //nolint:bodyclose // the body is the stream handed to the caller, who closes it
	if err != nil {
		return nil, err
	}
	return newExecStream(resp.Body), nil
}

// ExecRecord is one command of a sandbox's exec history.
type ExecRecord struct {
	Time time.Time `json:"time"`
	// Cmd is the program and its arguments joined by spaces, cut at 512
	// bytes (Truncated).
	Cmd       string `json:"cmd"`
	Truncated bool   `json:"truncated,omitempty"`
	// User is who ran it.
	User string `json:"user"`
	// ExitCode is -1 when a signal killed it or it did not finish (Error).
	ExitCode   int     `json:"exit_code"`
	Status     string  `json:"status,omitempty"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	OOMKilled  bool    `json:"oom_killed,omitempty"`
	Error      string  `json:"error,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}
