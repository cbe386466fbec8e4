package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxToolBody bounds a function call's arguments (file_write content).
const maxToolBody = 12 << 20

// RegisterTools adds the tool kit's routes: MCP over streamable HTTP at
// /mcp (a sandbox per MCP session) and /v1/sandboxes/{id}/mcp (one
// sandbox and the MCP servers added to it), and function calling (GET
// /v1/tools, POST /v1/sandboxes/{id}/tools/{name}). They sit behind the
// same browser guard and API keys as every route.
func (s *Server) RegisterTools(h *mcpserver.HTTP) {
	route := func(pattern string, fn func(http.ResponseWriter, *http.Request) error) {
		s.patterns = append(s.patterns, pattern)
		s.mux.Handle(pattern, s.instrument(pattern, s.authenticated(fn)))
	}
	mcpRoot := func(w http.ResponseWriter, r *http.Request) error {
		h.ServeMCP(w, r, userOf(r))
		return nil
	}
	for _, m := range []string{"GET", "POST", "DELETE"} {
		// Not under /v1: the path MCP clients are configured with.
		s.mux.Handle(m+" /mcp", s.instrument("/mcp", s.authenticated(mcpRoot)))
		route(m+" /v1/sandboxes/{id}/mcp", func(w http.ResponseWriter, r *http.Request) error {
			// The owner check comes first on every request: an MCP
			// session id alone never reaches another tenant's sandbox.
			if _, err := s.m.Get(r.Context(), userOf(r), sandboxID(r)); err != nil {
				return err
			}
			h.ServeSandboxMCP(w, r, userOf(r), string(sandboxID(r)))
			return nil
		})
	}
	route("GET /v1/tools", func(w http.ResponseWriter, r *http.Request) error {
		list, err := h.ToolList(r.URL.Query().Get("format"))
		if err != nil {
			return badRequest("format", "%v", err)
		}
		writeJSON(w, http.StatusOK, list)
		return nil
	})
	route("GET /v1/sandboxes/{id}/tools", func(w http.ResponseWriter, r *http.Request) error {
		if _, err := s.m.Get(r.Context(), userOf(r), sandboxID(r)); err != nil {
			return err
		}
		list, err := h.SandboxToolList(r.Context(), userOf(r), string(sandboxID(r)), r.URL.Query().Get("format"))
		if errors.Is(err, mcpserver.ErrFormat) {
			return badRequest("format", "%v", err)
		}
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, list)
		return nil
	})
	route("POST /v1/sandboxes/{id}/tools/{name}", func(w http.ResponseWriter, r *http.Request) error {
		if err := requireJSON(r); err != nil {
			return err
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxToolBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return sandbox.Errorf(sandbox.ClassTooLarge, "tool arguments are over %d bytes", maxToolBody)
			}
			return badRequest("", "read body: %v", err)
		}
		if len(body) > 0 && !json.Valid(body) {
			return badRequest("", "the body must be the tool's arguments as a JSON object")
		}
		if _, err := s.m.Get(r.Context(), userOf(r), sandboxID(r)); err != nil {
			return err
		}
		res, err := h.CallTool(r.Context(), userOf(r), bearerToken(r), r.Host, string(sandboxID(r)), r.PathValue("name"), body)
		if errors.Is(err, mcpserver.ErrUnknownTool) {
			return sandbox.Errorf(sandbox.ClassNotFound, "%v: GET /v1/tools lists the tools", err)
		}
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	})
}
