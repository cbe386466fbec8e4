package dataplane

import (
	"context"
	"io"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/codeinterp"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// CodeContext describes a code context (id, language, cwd).
type CodeContext = agentclient.CodeContext

// DefaultCodeTimeout bounds a code execution that names no timeout.
const DefaultCodeTimeout = 300 * time.Second

// CodeExecRequest is code to run in one of a sandbox's code contexts:
// ContextID, else the default context of Language (python when empty).
type CodeExecRequest struct {
	Code      string
	ContextID string
	Language  string
	EnvVars   map[string]string
	// Timeout bounds the execution (0: DefaultCodeTimeout); it never
	// outlives the sandbox.
	Timeout time.Duration
	// MaxOutputBytes caps stdout and stderr each (0: the agent's default,
	// 1 MiB).
	MaxOutputBytes int64
}

// Execution is a finished code execution, collected (see RunCode).
type Execution = agentclient.Execution

func (req *CodeExecRequest) check() error {
	if req.ContextID != "" && req.Language != "" {
		return sandbox.Invalid("context_id", "give context_id or language, not both")
	}
	if req.Timeout < 0 {
		return sandbox.Invalid("timeout", "timeout must be positive")
	}
	if req.MaxOutputBytes < 0 {
		return sandbox.Invalid("max_output_bytes", "max_output_bytes must not be negative")
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultCodeTimeout
	}
	return nil
}

func (req CodeExecRequest) agent() agentclient.ExecuteRequest {
	return agentclient.ExecuteRequest{Code: req.Code, ContextID: req.ContextID, Language: req.Language,
		EnvVars: req.EnvVars, Timeout: req.Timeout, MaxOutputBytes: req.MaxOutputBytes}
}

// ExecuteCode starts req in the request's sandbox and returns the
// execution's NDJSON event stream (E2B's code-interpreter events, ending
// with end_of_execution). Errors before the stream are classified;
// closing the stream or cancelling ctx interrupts the execution.
func (r *Request) ExecuteCode(ctx context.Context, req CodeExecRequest) (io.ReadCloser, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	timeout, err := r.boundedByLife(ctx, req.Timeout)
	if err != nil {
		return nil, err
	}
	req.Timeout = timeout
	return r.client.ExecuteRaw(ctx, req.agent())
}

// RunCode runs req to its end and collects its results, output and error
// (each stream capped by MaxOutputBytes).
func (r *Request) RunCode(ctx context.Context, req CodeExecRequest) (*Execution, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	timeout, err := r.boundedByLife(ctx, req.Timeout)
	if err != nil {
		return nil, err
	}
	req.Timeout = timeout
	return r.client.RunCode(ctx, req.agent())
}

// CreateCodeContext makes a code context and starts its interpreter.
// Empty language means python, empty cwd the sandbox's working directory,
// empty user the sandbox's user.
func (r *Request) CreateCodeContext(ctx context.Context, language, cwd, user string) (CodeContext, error) {
	return r.client.CreateContext(ctx, language, cwd, user)
}

// ListCodeContexts describes the sandbox's code contexts (the default
// python context included).
func (r *Request) ListCodeContexts(ctx context.Context) ([]CodeContext, error) {
	return r.client.ListContexts(ctx)
}

// RestartCodeContext gives a code context a fresh interpreter; its state
// is lost and a running execution ends with an error.
func (r *Request) RestartCodeContext(ctx context.Context, contextID string) error {
	return r.client.RestartContext(ctx, contextID)
}

// DeleteCodeContext removes a code context and kills its interpreter.
func (r *Request) DeleteCodeContext(ctx context.Context, contextID string) error {
	return r.client.DeleteContext(ctx, contextID)
}

// CodeEvent is one event of an execution stream.
type CodeEvent = agentclient.CodeEvent

// ExecutionStream reads the events of one execution (ExecuteCodeEvents).
type ExecutionStream = agentclient.ExecutionStream

// The event types of an execution stream.
const (
	CodeStdout         = codeinterp.TypeStdout
	CodeStderr         = codeinterp.TypeStderr
	CodeResult         = codeinterp.TypeResult
	CodeError          = codeinterp.TypeError
	CodeEndOfExecution = codeinterp.TypeEndOfExecution
)

// ExecuteCodeEvents is ExecuteCode with the stream parsed: Next returns
// each event, end_of_execution last, then io.EOF.
func (r *Request) ExecuteCodeEvents(ctx context.Context, req CodeExecRequest) (*ExecutionStream, error) {
	body, err := r.ExecuteCode(ctx, req)
	if err != nil {
		return nil, err
	}
	return agentclient.NewExecutionStream(body), nil
}
