package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Preview URLs make a port a process listens on inside a sandbox reachable
// through the daemon, in every network mode and without publishing anything
// on the host:
//
//	/v1/sandboxes/{id}/ports/{port}/{path...}
//	http(s)://{port}-{id}.{PREVIEW_DOMAIN}/{path...}   (E2B's host form)
//
// A request is let through with the owner's API key, the sandbox's access
// token (X-Access-Token), or a signed, expiring preview token for browsers
// (?agentbox_token=..., then a cookie). None of these reach the sandbox.

const (
	previewTokenParam   = "agentbox_token"
	previewCookiePrefix = "agentbox_preview_"
	maxPreviewTokenTTL  = 7 * 24 * time.Hour
)

var previewHostPattern = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9][a-z0-9-]{0,62})\.(.+)$`)

// previewTarget parses a preview host name "<port>-<id>.<domain>".
func (s *Server) previewTarget(host string) (sandbox.ID, int, bool) {
	if s.cfg.PreviewDomain == "" {
		return "", 0, false
	}
	m := previewHostPattern.FindStringSubmatch(strings.ToLower(host))
	if m == nil || m[3] != s.cfg.PreviewDomain {
		return "", 0, false
	}
	port, err := strconv.Atoi(m[1])
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return sandbox.ID(m[2]), port, true
}

// withPreviewHosts sends requests for preview host names to the proxy.
func (s *Server) withPreviewHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, port, ok := s.previewTarget(r.Host); ok {
			s.servePreview(w, r, id, port, r.URL.Path, "/")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// previewByPath serves /v1/sandboxes/{id}/ports/{port}/{path...}.
func (s *Server) previewByPath(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, badRequest("port", "port must be 1-65535"))
		return
	}
	id := sandboxID(r)
	prefix := fmt.Sprintf("/v1/sandboxes/%s/ports/%d/", id, port)
	s.servePreview(w, r, id, port, "/"+r.PathValue("path"), prefix)
}

func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int, upstreamPath, cookiePath string) {
	if err := s.authorizePreview(w, r, id, port, cookiePath); err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := s.m.Lookup(id); err != nil {
		writeError(w, r, err)
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			pr.Out.URL.Scheme = "http"
			// The host encodes the target for the shared transport's dialer.
			pr.Out.URL.Host = fmt.Sprintf("%s.%d.sandbox", id, port)
			pr.Out.URL.Path = upstreamPath
			pr.Out.URL.RawPath = ""
			q := pr.Out.URL.Query()
			q.Del(previewTokenParam)
			pr.Out.URL.RawQuery = q.Encode()
			pr.Out.Host = fmt.Sprintf("localhost:%d", port)
			stripCredentials(pr.Out)
		},
		Transport: s.previewTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, sandbox.Wrap(sandbox.ClassUnavailable, err,
				fmt.Sprintf("nothing answers on port %d in sandbox %s", port, id)))
		},
	}
	proxy.ServeHTTP(w, r)
}

// stripCredentials removes everything that authenticated the request to
// the daemon, so no key or token leaks to the sandbox's server.
func stripCredentials(r *http.Request) {
	r.Header.Del("Authorization")
	r.Header.Del("X-Access-Token")
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cookies {
		if !strings.HasPrefix(c.Name, previewCookiePrefix) {
			r.AddCookie(c)
		}
	}
}

// newPreviewTransport dials sandbox ports through the manager; the URL host
// "<id>.<port>.sandbox" names the target, so connections are pooled per
// sandbox port.
func (s *Server) newPreviewTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			parts := strings.Split(host, ".")
			if len(parts) != 3 || parts[2] != "sandbox" {
				return nil, fmt.Errorf("bad preview target %q", addr)
			}
			port, err := strconv.Atoi(parts[1])
			if err != nil {
				return nil, fmt.Errorf("bad preview port %q", parts[1])
			}
			return s.m.DialPort(ctx, sandbox.ID(parts[0]), port)
		},
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		DisableCompression:    true,
	}
}

// authorizePreview accepts the owner's API key, the sandbox's access token,
// or a valid preview token (query, then cookie). A token from the query is
// turned into a cookie so the page's own requests are authorised too.
func (s *Server) authorizePreview(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int, cookiePath string) error {
	if len(s.cfg.APIKeys) == 0 {
		_, err := s.authenticate(r) // keyless: loopback host and origin rules only
		return err
	}
	if key := bearerToken(r); key != "" {
		user, err := UserForKey(s.cfg.APIKeys, key)
		if err != nil {
			return err
		}
		if _, err := s.m.Get(r.Context(), user, id); err != nil {
			return err
		}
		return nil
	}
	if tok := r.Header.Get("X-Access-Token"); tok != "" {
		return s.checkSandboxToken(id, tok)
	}
	cookieName := fmt.Sprintf("%s%d", previewCookiePrefix, port)
	if tok := r.URL.Query().Get(previewTokenParam); tok != "" {
		if err := s.checkPreviewToken(id, port, tok); err != nil {
			return err
		}
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: cookiePath, HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
		return nil
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return s.checkPreviewToken(id, port, c.Value)
	}
	return sandbox.Errorf(sandbox.ClassUnauth, "preview needs an API key, the sandbox's access token or a preview token")
}

func (s *Server) checkSandboxToken(id sandbox.ID, tok string) error {
	rec, err := s.m.Lookup(id)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(rec.AccessToken), []byte(tok)) != 1 {
		return sandbox.Errorf(sandbox.ClassUnauth, "invalid access token")
	}
	return nil
}

// A preview token is "<unix expiry>.<hex HMAC-SHA256(secret, id|port|expiry)>":
// bound to one sandbox port, useless after it expires, unforgeable without
// the server's secret. A sandbox's access token is accepted as well.
func (s *Server) signPreview(id sandbox.ID, port int, exp int64) string {
	mac := hmac.New(sha256.New, s.cfg.PreviewSecret)
	fmt.Fprintf(mac, "%s|%d|%d", id, port, exp)
	return strconv.FormatInt(exp, 10) + "." + hex.EncodeToString(mac.Sum(nil))
}

func (s *Server) checkPreviewToken(id sandbox.ID, port int, tok string) error {
	expStr, _, ok := strings.Cut(tok, ".")
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if !ok || err != nil {
		return s.checkSandboxToken(id, tok)
	}
	if time.Now().Unix() > exp {
		return sandbox.Errorf(sandbox.ClassUnauth, "preview token expired")
	}
	if !hmac.Equal([]byte(s.signPreview(id, port, exp)), []byte(tok)) {
		return sandbox.Errorf(sandbox.ClassUnauth, "invalid preview token")
	}
	return nil
}

// createPreviewToken serves POST /v1/sandboxes/{id}/preview-tokens.
func (s *Server) createPreviewToken(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Port int     `json:"port"`
		TTL  float64 `json:"ttl"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	if body.Port < 1 || body.Port > 65535 {
		return badRequest("port", "port must be 1-65535")
	}
	ttl, err := seconds("ttl", body.TTL)
	if err != nil {
		return err
	}
	if ttl == 0 {
		ttl = time.Hour
	}
	if ttl > maxPreviewTokenTTL {
		return badRequest("ttl", "ttl must be at most %s", maxPreviewTokenTTL)
	}
	id := sandboxID(r)
	if _, err := s.m.Get(r.Context(), userOf(r), id); err != nil {
		return err
	}
	exp := time.Now().Add(ttl).Unix()
	tok := s.signPreview(id, body.Port, exp)
	out := map[string]any{
		"token":      tok,
		"expires_at": time.Unix(exp, 0).UTC(),
		"path":       fmt.Sprintf("/v1/sandboxes/%s/ports/%d/?%s=%s", id, body.Port, previewTokenParam, tok),
	}
	if s.cfg.PreviewDomain != "" {
		out["host"] = fmt.Sprintf("%d-%s.%s", body.Port, id, s.cfg.PreviewDomain)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
