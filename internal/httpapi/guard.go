package httpapi

import (
	"errors"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The browser guard: one set of rules in front of every route family on
// the daemon's port (the native /v1 API, /metrics, and every door's
// routes), so a web page the operator happens to visit can never drive the
// daemon:
//
//   - Host: without API keys only loopback host names are served (a page
//     that rebinds its own DNS name to 127.0.0.1 still sends its name);
//   - Origin: browsers label their requests with the page's origin. Without
//     API keys only the daemon's own origin is accepted; with keys, pages
//     on preview origins are refused (they run sandbox code);
//   - Content-Type: every POST must declare application/json. A page can
//     send text/plain, form encodings or no type at all without a CORS
//     preflight (which is never granted), but not application/json.
//
// Host-form previews (<port>-<id>.<PREVIEW_DOMAIN>) never reach the guard:
// they are answered by the preview proxy before, with its own credentials.

// withBrowserGuard applies the Host, Origin and Content-Type rules.
func (s *Server) withBrowserGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.checkBrowser(r); err != nil {
			s.refuse(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) checkBrowser(r *http.Request) error {
	if err := s.checkHost(r); err != nil {
		return err
	}
	if err := s.checkOrigin(r); err != nil {
		return err
	}
	return s.checkContentType(r)
}

func (s *Server) checkHost(r *http.Request) error {
	if len(s.cfg.APIKeys) == 0 && !LoopbackHost(r.Host) {
		return sandbox.Errorf(sandbox.ClassForbidden, "host %q refused: without API keys only loopback host names are served", r.Host)
	}
	return nil
}

func (s *Server) checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil // not a browser, or a same-origin GET
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		// "null" (sandboxed frames, CSP sandbox pages) and garbage.
		return sandbox.Errorf(sandbox.ClassForbidden, "request from origin %q refused", origin)
	}
	if s.isPreviewHost(u.Host) {
		return sandbox.Errorf(sandbox.ClassForbidden, "request from preview origin %q refused: preview pages run sandbox code", origin)
	}
	if len(s.cfg.APIKeys) == 0 && !strings.EqualFold(u.Host, r.Host) {
		return sandbox.Errorf(sandbox.ClassForbidden, "cross-origin request from %q refused", origin)
	}
	return nil
}

func (s *Server) checkContentType(r *http.Request) error {
	if r.Method != http.MethodPost || isPreviewPath(r.URL.Path) {
		// Other methods need a CORS preflight from a page; path-form
		// previews carry whatever the sandbox's server takes.
		return nil
	}
	want := "application/json"
	for _, rule := range s.bodyRules {
		if rule.Match(r) {
			if rule.MediaType == "" {
				// A bodiless route: JSON, or no body at all whatever it
				// is declared as (axios declares a form for it). Such a
				// door must need a header a page cannot send without a
				// preflight (Authorization), as the CSRF defence.
				if r.ContentLength == 0 {
					return nil
				}
				return requireJSON(r)
			}
			want = rule.MediaType
			break
		}
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != want {
		if ct == "" {
			ct = "none"
		}
		return badRequest("", "Content-Type must be %s, got %s", want, ct)
	}
	return nil
}

// refuse answers a guard refusal in the shape of the route family: the
// native error object for the server's own routes, the shape of the door
// that owns the request otherwise (Door.Owns).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if !nativePath(r.URL.Path) {
		for _, d := range s.doors {
			if !d.Owns(r) {
				continue
			}
			logger(r).Debug("request refused", "err", err)
			msg := err.Error()
			if se := (*sandbox.Error)(nil); errors.As(err, &se) {
				msg = se.Msg
			}
			d.WriteRefusal(w, r, statusOf(sandbox.ClassOf(err)), msg)
			return
		}
	}
	writeError(w, r, err)
}

// nativePath reports whether p is one of the server's own routes, whose
// refusals have the native error shape whatever the doors say.
func nativePath(p string) bool {
	return strings.HasPrefix(p, "/v1/") || p == "/mcp" || p == "/metrics" || p == "/healthz" || p == "/readyz"
}

// isPreviewPath reports whether p is a path-form preview URL.
func isPreviewPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/v1/sandboxes/")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, "/")
	return ok && strings.HasPrefix(rest, "ports/")
}

// hostOnly strips the port from a Host header value.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// requireJSON refuses a request body that is not declared as JSON. Only a
// request without any body may omit the type.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		if ct == "" {
			ct = "none"
		}
		return badRequest("", "Content-Type must be application/json, got %s", ct)
	}
	return nil
}
