package e2b

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// ServePort is the data plane (an httpapi.SandboxPortHandler): the envd
// port (49983) and the code-interpreter port (49999) of a sandbox are its
// agent's routes, proxied as they are, streams flushed as they come. Any
// other port is left to the preview proxy.
//
// A request must carry the sandbox's access token (X-Access-Token, as the
// SDKs send it: every sandbox is created "secure") or its owner's API key.
// Only the routes of each port's protocol pass, never the agent's own
// (/init, /service). A client that goes away ends its request, not the
// process it started: the agent keeps processes whose stream was cut.
func (s *Server) ServePort(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) bool {
	if port != EnvdPort && port != JupyterPort {
		return false
	}
	if err := s.servePort(w, r, id, port); err != nil {
		writeError(w, r, err)
	}
	return true
}

func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) error {
	if !allowedRoute(port, r.Method, r.URL.Path) {
		return sandbox.Errorf(sandbox.ClassNotFound, "no route %s %s on port %d", r.Method, r.URL.Path, port)
	}
	rec, err := s.m.Lookup(id)
	if err != nil {
		return err
	}
	if !s.authorizedFor(r, rec.Owner, rec.AccessToken) {
		return sandbox.Errorf(sandbox.ClassUnauth, "missing or invalid X-Access-Token for sandbox %s", id)
	}
	httpapi.SetUser(r, rec.Owner)
	switch rec.State {
	case sandbox.StateRunning:
	case sandbox.StatePaused:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is paused: connect to it (Sandbox.connect) to resume it", id)
	default:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s", id, rec.State)
	}
	c, err := s.m.Agent(r.Context(), rec.Owner, id)
	if err != nil {
		return err
	}
	base, rt, token := c.ProxyTarget()
	if r.Method == http.MethodPost && r.URL.Path == "/files" {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = base.Host
			// What authenticated the caller to the daemon stays here;
			// the agent gets its own token. Basic authorization (E2B's
			// choice of user) passes.
			pr.Out.Header.Del("X-API-Key")
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Del("E2b-Sandbox-Id")
			pr.Out.Header.Del("E2b-Sandbox-Port")
			if a := pr.Out.Header.Get("Authorization"); a != "" && !strings.HasPrefix(strings.ToLower(a), "basic ") {
				pr.Out.Header.Del("Authorization")
			}
			pr.Out.Header.Del("X-Access-Token")
			if token != "" {
				pr.Out.Header.Set("X-Access-Token", token)
			}
		},
		Transport: rt,
		// Stream events (process output, keepalives, code results) reach
		// the client as the agent writes them.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			s.log.Debug("data plane proxy", "sandbox", id, "port", port, "err", err)
			writeError(w, r, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("sandbox %s does not answer", id)))
		},
	}
	proxy.ServeHTTP(w, r)
	return nil
}

// authorizedFor accepts the sandbox's access token or its owner's API key.
func (s *Server) authorizedFor(r *http.Request, owner, token string) bool {
	if tok := r.Header.Get("X-Access-Token"); tok != "" && token != "" {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(token)) == 1
	}
	if len(s.cfg.APIKeys) == 0 || r.Header.Get("X-API-Key") == "" {
		return false
	}
	user, err := httpapi.UserForKey(s.cfg.APIKeys, strings.TrimSpace(r.Header.Get("X-API-Key")))
	return err == nil && user == owner
}

// allowedRoute reports whether method and path are routes of the protocol
// served on port: envd's (Connect RPC services, /files, /health, /envs)
// on 49983, the code interpreter's on 49999.
func allowedRoute(port int, method, path string) bool {
	switch port {
	case EnvdPort:
		switch {
		case strings.HasPrefix(path, "/process.Process/"), strings.HasPrefix(path, "/filesystem.Filesystem/"):
			return method == http.MethodPost
		case path == "/files":
			return method == http.MethodGet || method == http.MethodPost
		case path == "/health", path == "/envs":
			return method == http.MethodGet
		}
	case JupyterPort:
		switch {
		case path == "/execute":
			return method == http.MethodPost
		case path == "/contexts":
			return method == http.MethodGet || method == http.MethodPost
		case strings.HasPrefix(path, "/contexts/") && strings.HasSuffix(path, "/restart"):
			return method == http.MethodPost
		case strings.HasPrefix(path, "/contexts/"):
			return method == http.MethodDelete
		case path == "/health":
			return method == http.MethodGet
		}
	}
	return false
}
