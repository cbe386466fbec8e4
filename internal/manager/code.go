package manager

import (
	"context"
	"io"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
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

// ExecuteCode starts req in one of owner's sandboxes and returns the
// execution's NDJSON event stream (E2B's code-interpreter events, ending
// with end_of_execution). Errors before the stream are classified;
// closing the stream or cancelling ctx interrupts the execution.
func (m *Manager) ExecuteCode(ctx context.Context, owner string, id sandbox.ID, req CodeExecRequest) (io.ReadCloser, error) {
	if req.ContextID != "" && req.Language != "" {
		return nil, invalid("context_id", "give context_id or language, not both")
	}
	if req.Timeout < 0 {
		return nil, invalid("timeout", "timeout must be positive")
	}
	if req.MaxOutputBytes < 0 {
		return nil, invalid("max_output_bytes", "max_output_bytes must not be negative")
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultCodeTimeout
	}
	rec, err := m.Get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if left := time.Until(rec.EndAt); !rec.EndAt.IsZero() && left < req.Timeout {
		req.Timeout = max(left, time.Second)
	}
	client, err := m.Agent(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return client.ExecuteRaw(ctx, agentclient.ExecuteRequest{
		Code: req.Code, ContextID: req.ContextID, Language: req.Language, EnvVars: req.EnvVars,
		Timeout: req.Timeout, MaxOutputBytes: req.MaxOutputBytes,
	})
}

// CreateCodeContext makes a code context in one of owner's sandboxes and
// starts its interpreter. Empty language means python, empty cwd the
// sandbox's working directory, empty user the sandbox's user.
func (m *Manager) CreateCodeContext(ctx context.Context, owner string, id sandbox.ID, language, cwd, user string) (CodeContext, error) {
	client, err := m.Agent(ctx, owner, id)
	if err != nil {
		return CodeContext{}, err
	}
	return client.CreateContext(ctx, language, cwd, user)
}

// ListCodeContexts describes the code contexts of one of owner's
// sandboxes (the default python context included).
func (m *Manager) ListCodeContexts(ctx context.Context, owner string, id sandbox.ID) ([]CodeContext, error) {
	client, err := m.Agent(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return client.ListContexts(ctx)
}

// RestartCodeContext gives a code context a fresh interpreter; its state
// is lost and a running execution ends with an error.
func (m *Manager) RestartCodeContext(ctx context.Context, owner string, id sandbox.ID, contextID string) error {
	client, err := m.Agent(ctx, owner, id)
	if err != nil {
		return err
	}
	return client.RestartContext(ctx, contextID)
}

// DeleteCodeContext removes a code context and kills its interpreter.
func (m *Manager) DeleteCodeContext(ctx context.Context, owner string, id sandbox.ID, contextID string) error {
	client, err := m.Agent(ctx, owner, id)
	if err != nil {
		return err
	}
	return client.DeleteContext(ctx, contextID)
}
