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

// sandboxPortHandler serves a request addressed to port of sandbox id (a
// PortDoor's ServePort). It reports false, having written nothing, for
// ports it does not serve: those go to the preview proxy.
type sandboxPortHandler func(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) bool

// Header names a request addresses a sandbox port with: E2B's, which its
// SDKs and agentbox's own agent client (agentbox run) send.
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
		if raw == "" || len(s.sandboxPorts) == 0 {
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
		if s.serveSandboxPort(w, r, id, port) {
			return
		}
		s.servePreview(w, r, id, port, r.URL.Path, false)
	})
}
