package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// StatusOf is the HTTP status of an error class, for protocol front-ends
// with error bodies of their own.
func StatusOf(c sandbox.Class) int { return statusOf(c) }

// SandboxPortHandler serves a request addressed to port of sandbox id by
// a protocol front-end (E2B's data plane: its agent and code-interpreter
// ports). It reports false, having written nothing, for ports it does not
// serve: those go to the preview proxy.
type SandboxPortHandler func(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) bool

// SetSandboxPorts installs h for requests that name a sandbox port by the
// E2b-Sandbox-Id / E2b-Sandbox-Port headers or by a <port>-<id> preview
// host name.
func (s *Server) SetSandboxPorts(h SandboxPortHandler) { s.sandboxPorts = h }

// Header names E2B's SDKs address a sandbox port with.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	defaultEnvdPort   = 49983
)

// withSandboxHeaders sends a request carrying E2b-Sandbox-Id to the
// sandbox port it names. The browser guard's Host and Origin rules apply;
// its Content-Type rule does not, for a reason of the same kind: a web
// page cannot send a custom header such as E2b-Sandbox-Id to another
// origin without a CORS preflight, which this server never grants, so no
// such request is a browser's "simple" one. (Connect RPC, multipart and
// octet-stream bodies are the data plane's normal traffic.) What the
// sandbox port then requires (the sandbox's access token) is the front-
// end's or the preview proxy's business.
func (s *Server) withSandboxHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.Header.Get(headerSandboxID)
		if raw == "" || s.sandboxPorts == nil {
			next.ServeHTTP(w, r)
			return
		}
		if err := s.checkHost(r); err != nil {
			writeError(w, r, err)
			return
		}
		if err := s.checkOrigin(r); err != nil {
			writeError(w, r, err)
			return
		}
		id := sandbox.ID(strings.ToLower(strings.TrimSpace(raw)))
		port := defaultEnvdPort
		if p := r.Header.Get(headerSandboxPort); p != "" {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || n < 1 || n > 65535 {
				writeError(w, r, badRequest("", "%s must be a port 1-65535", headerSandboxPort))
				return
			}
			port = n
		}
		if s.sandboxPorts(w, r, id, port) {
			return
		}
		s.servePreview(w, r, id, port, r.URL.Path, false)
	})
}
