package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// CodeRequest is code to run in one of a sandbox's code contexts: the
// context ContextID, else the default context of Language (python when
// both are empty). State (variables, imports) persists across runs in the
// same context.
type CodeRequest struct {
	Code      string
	Language  string // "python", "javascript" or "bash"; empty means python
	ContextID string // a context made with CreateCodeContext
	Env       map[string]string
	// Timeout bounds the execution; zero means the server's default.
	Timeout time.Duration
	// MaxOutputBytes caps stdout and stderr each; zero means the server's
	// default (1 MiB).
	MaxOutputBytes int64
}

// CodeOutput is one rich result of an execution (an expression's value, a
// displayed figure). Only the formats the value has are set; PNG and JPEG
// are base64.
type CodeOutput struct {
	IsMainResult bool            `json:"is_main_result,omitempty"`
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
}

// CodeError is the exception an execution raised.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

func (e *CodeError) Error() string { return e.Name + ": " + e.Value }

// CodeResult is a finished execution.
type CodeResult struct {
	Stdout  string       `json:"stdout"`
	Stderr  string       `json:"stderr"`
	Results []CodeOutput `json:"results,omitempty"`
	// Error is set when the code raised; it is not a Go error of RunCode.
	Error          *CodeError `json:"error,omitempty"`
	ExecutionCount int        `json:"execution_count,omitempty"`
}

// CodeContext is an interpreter whose state persists across runs.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	// Default marks the language's default context (made by the first
	// execution that names no context).
	Default bool `json:"default,omitempty"`
	// Created is when the context was made.
	Created time.Time `json:"created,omitempty"`
}

// codeEvent is one line of the code execution stream.
type codeEvent struct {
	Type           string  `json:"type"`
	Text           *string `json:"text"`
	ExecutionCount int     `json:"execution_count"`
	CodeOutput
	Name      *string `json:"name"`
	Value     *string `json:"value"`
	Traceback *string `json:"traceback"`
}

// maxCodeEventLine bounds one event line (a large PNG).
const maxCodeEventLine = 64 << 20

// RunCode runs code in sandbox id and returns its output once it ends. An
// exception in the code is CodeResult.Error, not an error of RunCode.
// Cancelling ctx interrupts the execution.
func (c *Client) RunCode(ctx context.Context, id string, req CodeRequest) (*CodeResult, error) {
	op := "run code in sandbox " + id
	body := struct {
		Code           string            `json:"code"`
		Language       string            `json:"language,omitempty"`
		ContextID      string            `json:"context_id,omitempty"`
		EnvVars        map[string]string `json:"env_vars,omitempty"`
		Timeout        float64           `json:"timeout,omitempty"`
		MaxOutputBytes int64             `json:"max_output_bytes,omitempty"`
	}{req.Code, req.Language, req.ContextID, req.Env, seconds(req.Timeout), req.MaxOutputBytes}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", op, err)
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "/code"), nil, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(op, hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxCodeEventLine)
	var res CodeResult
	var stdout, stderr bytes.Buffer
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev codeEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("%s: bad event %.80q: %w", op, line, err)
		}
		switch ev.Type {
		case "stdout":
			if ev.Text != nil {
				stdout.WriteString(*ev.Text)
			}
		case "stderr":
			if ev.Text != nil {
				stderr.WriteString(*ev.Text)
			}
		case "number_of_executions":
			res.ExecutionCount = ev.ExecutionCount
		case "result":
			out := ev.CodeOutput
			if ev.Text != nil {
				out.Text = *ev.Text
			}
			res.Results = append(res.Results, out)
		case "error":
			e := &CodeError{}
			if ev.Name != nil {
				e.Name = *ev.Name
			}
			if ev.Value != nil {
				e.Value = *ev.Value
			}
			if ev.Traceback != nil {
				e.Traceback = *ev.Traceback
			}
			res.Error = e
		case "end_of_execution":
			res.Stdout, res.Stderr = stdout.String(), stderr.String()
			return &res, nil
		}
	}
	err = sc.Err()
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("%s: stream ended before the end of the execution: %w", op, err)
}

// CreateCodeContext starts a new interpreter of language (empty means
// python) in sandbox id, working in cwd (empty: the sandbox's default).
func (c *Client) CreateCodeContext(ctx context.Context, id, language, cwd string) (*CodeContext, error) {
	body := struct {
		Language string `json:"language,omitempty"`
		Cwd      string `json:"cwd,omitempty"`
	}{language, cwd}
	var cc CodeContext
	if err := c.doJSON(ctx, "create code context in sandbox "+id, http.MethodPost, sandboxPath(id, "/code/contexts"), nil, body, &cc); err != nil {
		return nil, err
	}
	return &cc, nil
}
