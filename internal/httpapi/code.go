package httpapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/internal/dataplane"
)

// maxCodeBody bounds a code request (the code travels inline).
const maxCodeBody = 64 << 20

type codeExecBody struct {
	Code           *string           `json:"code"`
	ContextID      string            `json:"context_id"`
	Language       string            `json:"language"`
	EnvVars        map[string]string `json:"env_vars"`
	Timeout        float64           `json:"timeout"`
	MaxOutputBytes int64             `json:"max_output_bytes"`
}

// execCode serves POST /v1/sandboxes/{id}/code: the execution's events as
// NDJSON (E2B's code-interpreter stream), relayed from the agent as they
// come. Failures before the stream are JSON errors; a client that goes
// away interrupts the execution.
func (s *Server) execCode(w http.ResponseWriter, r *http.Request) error {
	// The code is held twice: the body, and the string decoded from it.
	dr, err := s.beginWithBody(r, maxCodeBody, 2)
	if err != nil {
		return err
	}
	defer dr.End()
	var body codeExecBody
	if err := decodeLargeJSON(w, r, maxCodeBody, &body); err != nil {
		return err
	}
	if body.Code == nil {
		return badRequest("code", "code is required")
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	stream, err := dr.ExecuteCode(r.Context(), dataplane.CodeExecRequest{
		Code: *body.Code, ContextID: body.ContextID, Language: body.Language, EnvVars: body.EnvVars,
		Timeout: timeout, MaxOutputBytes: body.MaxOutputBytes,
	})
	if err != nil {
		return err
	}
	defer stream.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := relay(w, stream); err != nil && r.Context().Err() == nil {
		return err
	}
	return nil // a client that left is the normal way to interrupt
}

// relay copies the agent's stream, flushing after every read: the agent
// flushes per event, so events reach the client as they happen.
func relay(w http.ResponseWriter, src io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

type codeContextBody struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	User     string `json:"user"`
}

// createCodeContext serves POST /v1/sandboxes/{id}/code/contexts.
func (s *Server) createCodeContext(w http.ResponseWriter, r *http.Request) error {
	var body codeContextBody
	if err := decodeJSON(w, r, maxJSONBody, &body, true); err != nil {
		return err
	}
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	cc, err := dr.CreateCodeContext(r.Context(), body.Language, body.Cwd, body.User)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, cc)
	return nil
}

// listCodeContexts serves GET /v1/sandboxes/{id}/code/contexts.
func (s *Server) listCodeContexts(w http.ResponseWriter, r *http.Request) error {
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	list, err := dr.ListCodeContexts(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []dataplane.CodeContext{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"contexts": list})
	return nil
}

// restartCodeContext serves POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart.
func (s *Server) restartCodeContext(w http.ResponseWriter, r *http.Request) error {
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	if err := dr.RestartCodeContext(r.Context(), r.PathValue("ctx")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteCodeContext serves DELETE /v1/sandboxes/{id}/code/contexts/{ctx}.
func (s *Server) deleteCodeContext(w http.ResponseWriter, r *http.Request) error {
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	if err := dr.DeleteCodeContext(r.Context(), r.PathValue("ctx")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
