package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/admission"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Preview URLs make a port a process listens on inside a sandbox reachable
// through the daemon, in every network mode and without publishing anything
// on the host, in two forms:
//
//	http(s)://{port}-{id}.{PREVIEW_DOMAIN}/{path...}   for browsers
//	/v1/sandboxes/{id}/ports/{port}/{path...}          for programs
//
// A preview serves code nobody reviewed, so in a browser it gets an origin
// of its own per sandbox port: it cannot read the API, another sandbox's
// preview, or their cookies. The path form shares the API's origin, so it
// is made inert for browsers: its responses carry "Content-Security-Policy:
// sandbox" (no scripts, an opaque origin) and no cookies pass in either
// direction.
//
// A request is let through with the owner's API key, the sandbox's access
// token (X-Access-Token), or a signed, expiring preview token
// (?agentbox_token=). On the host form the token is exchanged once for a
// host-only cookie of that origin. None of these reach the sandbox.

const (
	previewTokenParam  = "agentbox_token"
	previewCookie      = "agentbox_preview"
	maxPreviewTokenTTL = 7 * 24 * time.Hour
)

var previewLabelPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9][a-z0-9-]{0,62})$`) })

// previewName is hostport as compared with the preview domain: lowercased,
// without the port unless the domain names one.
func (s *Server) previewName(hostport string) string {
	name := strings.ToLower(hostport)
	if !strings.Contains(s.cfg.PreviewDomain, ":") {
		name = hostOnly(name)
	}
	return strings.TrimSuffix(name, ".")
}

// isPreviewHost reports whether hostport is under the preview domain: such
// names belong to sandbox code and never serve the API.
func (s *Server) isPreviewHost(hostport string) bool {
	return s.cfg.PreviewDomain != "" && strings.HasSuffix(s.previewName(hostport), "."+s.cfg.PreviewDomain)
}

// previewTarget parses a preview host name "<port>-<id>.<domain>".
func (s *Server) previewTarget(hostport string) (sandbox.ID, int, bool) {
	if !s.isPreviewHost(hostport) {
		return "", 0, false
	}
	label := strings.TrimSuffix(s.previewName(hostport), "."+s.cfg.PreviewDomain)
	m := previewLabelPattern().FindStringSubmatch(label)
	if m == nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(m[1])
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return sandbox.ID(m[2]), port, true
}

// withPreviewHosts sends every request for a name under the preview domain
// to the proxy; the API and the other route families never answer there.
func (s *Server) withPreviewHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.isPreviewHost(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		id, port, ok := s.previewTarget(r.Host)
		if !ok {
			writeError(w, r, sandbox.Errorf(sandbox.ClassNotFound, "no preview at %q: preview host names are <port>-<sandbox id>.%s", r.Host, s.cfg.PreviewDomain))
			return
		}
		if s.serveSandboxPort(w, r, id, port) {
			return
		}
		s.servePreview(w, r, id, port, r.URL.Path, true)
	})
}

// previewByPath serves /v1/sandboxes/{id}/ports/{port}/{path...}.
func (s *Server) previewByPath(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, badRequest("port", "port must be 1-65535"))
		return
	}
	s.servePreview(w, r, sandboxID(r), port, "/"+r.PathValue("path"), false)
}

func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int, upstreamPath string, hostForm bool) {
	if a, ok := r.Context().Value(keyAccess).(*access); ok {
		a.preview = true
	}
	done, err := s.authorizePreview(w, r, id, port, hostForm)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if done {
		return
	}
	rec, err := s.m.Lookup(id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if rec.State == sandbox.StatePaused {
		writeError(w, r, manager.ErrPaused(id))
		return
	}
	// Whichever credential let the request in, it acts as the sandbox's
	// owner: the owner's previews in flight are counted, here and behind
	// another replica's forwarding alike (a WebSocket while it is open).
	leave, err := s.previews.enter(rec.Owner)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer leave()
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
			s.stripCredentials(pr.Out, hostForm)
		},
		ModifyResponse: func(resp *http.Response) error {
			if hostForm {
				confineCookies(resp.Header)
			} else {
				makeInert(resp.Header)
			}
			return nil
		},
		Transport: s.previewTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				writeError(w, r, sandbox.Wrap(sandbox.ClassTimeout, err, fmt.Sprintf(
					"port %d in sandbox %s did not answer within %s (PREVIEW_HEADER_TIMEOUT)", port, id, s.cfg.PreviewHeaderTimeout)))
				return
			}
			writeError(w, r, sandbox.Wrap(sandbox.ClassUnavailable, err,
				fmt.Sprintf("nothing answers on port %d in sandbox %s", port, id)))
		},
	}
	proxy.ServeHTTP(w, r)
}

// previewRetryAfter is the back-off suggested to a caller over its
// preview bound.
const previewRetryAfter = 2 * time.Second

// previewGate counts each user's preview requests in flight. A preview
// holds a client connection, goroutines and a connection into the sandbox
// for as long as the sandbox's server takes; bounded per user, one
// tenant's previews of a port that never answers cannot hold the daemon's
// connections (or, through a forwarding replica, that replica's
// connections to this one) away from the others.
type previewGate struct {
	max int // 0: no bound

	mu     sync.Mutex
	byUser map[string]int
}

// enter counts a preview request of user, or refuses it with a retryable
// quota error when user has max in flight.
func (g *previewGate) enter(user string) (leave func(), err error) {
	if g.max <= 0 {
		return func() {}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byUser[user] >= g.max {
		return nil, &sandbox.Error{Class: sandbox.ClassQuota, Err: &admission.RetryAfterError{After: previewRetryAfter},
			Msg: fmt.Sprintf("user %q has %d preview requests in flight, the most one user may (PREVIEW_MAX_PER_USER); retry later", user, g.byUser[user])}
	}
	if g.byUser == nil {
		g.byUser = map[string]int{}
	}
	g.byUser[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.byUser[user]--; g.byUser[user] <= 0 {
				delete(g.byUser, user)
			}
		})
	}, nil
}

// stripCredentials removes everything that authenticated the request to
// the daemon, so no key or token leaks to the sandbox's server. The path
// form passes no cookies at all: they belong to the API's origin.
func (s *Server) stripCredentials(r *http.Request, hostForm bool) {
	r.Header.Del("Authorization")
	r.Header.Del("X-Access-Token")
	for _, h := range s.previewHeaders {
		r.Header.Del(h)
	}
	if ref := r.Header.Get("Referer"); strings.Contains(ref, previewTokenParam) {
		// The page before a token exchange's redirect.
		if u, err := url.Parse(ref); err == nil {
			q := u.Query()
			q.Del(previewTokenParam)
			u.RawQuery = q.Encode()
			r.Header.Set("Referer", u.String())
		} else {
			r.Header.Del("Referer")
		}
	}
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	if !hostForm {
		return
	}
	for _, c := range cookies {
		if !strings.HasPrefix(c.Name, previewCookie) {
			r.AddCookie(c)
		}
	}
}

// confineCookies keeps a sandbox's cookies on its own preview origin: a
// Domain attribute (which would share them with every sandbox under the
// preview domain) is removed, and cookies named like the daemon's are
// dropped.
func confineCookies(h http.Header) {
	in := h.Values("Set-Cookie")
	if len(in) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range in {
		parts := strings.Split(line, ";")
		name, _, _ := strings.Cut(parts[0], "=")
		if strings.HasPrefix(strings.TrimSpace(name), previewCookie) {
			continue
		}
		kept := parts[:1]
		for _, attr := range parts[1:] {
			k, _, _ := strings.Cut(attr, "=")
			if !strings.EqualFold(strings.TrimSpace(k), "domain") {
				kept = append(kept, attr)
			}
		}
		h.Add("Set-Cookie", strings.Join(kept, ";"))
	}
}

// makeInert is for path-form responses, which share the API's origin:
// browsers run no script of them and keep no cookie from them.
func makeInert(h http.Header) {
	h.Del("Set-Cookie")
	h.Add("Content-Security-Policy", "sandbox")
	h.Set("X-Content-Type-Options", "nosniff")
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
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		// A server that never answers must not hold the request (and the
		// caller's connection) for long; a response under way, a stream
		// or a WebSocket, has no limit.
		ResponseHeaderTimeout: s.cfg.PreviewHeaderTimeout,
		DisableCompression:    true,
	}
}

// authorizePreview accepts the owner's API key, the sandbox's access token
// or a valid preview token (query, then, on the host form, the cookie). On
// the host form a token from the query becomes a host-only cookie of that
// one origin, and a page load is redirected to drop the token from its URL
// (so the page's script and Referer never see it); done reports that the
// redirect was answered.
func (s *Server) authorizePreview(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int, hostForm bool) (done bool, err error) {
	if key := bearerToken(r); key != "" && len(s.cfg.APIKeys) > 0 {
		user, err := UserForKey(s.cfg.APIKeys, key)
		if err != nil {
			return false, err
		}
		if _, err := s.m.Get(r.Context(), user, id); err != nil {
			return false, err
		}
		SetUser(r, user)
		return false, nil
	}
	if tok := r.Header.Get("X-Access-Token"); tok != "" {
		_, err := s.checkSandboxToken(r, id, tok)
		return false, err
	}
	for _, h := range s.previewHeaders {
		if tok := r.Header.Get(h); tok != "" {
			// A door's clients send the token of its preview links so.
			_, err := s.checkPreviewToken(r, id, port, tok)
			return false, err
		}
	}
	if tok := r.URL.Query().Get(previewTokenParam); tok != "" {
		exp, err := s.checkPreviewToken(r, id, port, tok)
		if err != nil || !hostForm {
			return false, err
		}
		//nolint:gosec // G124: Secure whenever the request came over TLS; previews are also served over plain HTTP on loopback
		http.SetCookie(w, &http.Cookie{Name: previewCookie, Value: tok, Path: "/", MaxAge: int(time.Until(exp).Seconds()) + 1,
			HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return false, nil
		}
		u := *r.URL
		q := u.Query()
		q.Del(previewTokenParam)
		u.RawQuery = q.Encode()
		u.Scheme, u.Host = "", ""
		w.Header().Set("Referrer-Policy", "no-referrer")
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther) //nolint:gosec // G710: scheme and host cleared above, a path on this host
		return true, nil
	}
	if c, err := r.Cookie(previewCookie); err == nil && hostForm {
		_, err := s.checkPreviewToken(r, id, port, c.Value)
		return false, err
	}
	return false, sandbox.Errorf(sandbox.ClassUnauth, "preview needs the owner's API key, the sandbox's access token or a preview token")
}

// checkSandboxToken accepts the sandbox's access token; the request is
// then the owner's. It returns when the sandbox (and so the token) ends.
func (s *Server) checkSandboxToken(r *http.Request, id sandbox.ID, tok string) (time.Time, error) {
	rec, err := s.m.Lookup(id)
	if err != nil {
		return time.Time{}, err
	}
	if subtle.ConstantTimeCompare([]byte(rec.AccessToken), []byte(tok)) != 1 {
		return time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "invalid access token")
	}
	SetUser(r, rec.Owner)
	if rec.EndAt.IsZero() {
		return time.Now().Add(time.Hour), nil
	}
	return rec.EndAt, nil
}

// A preview token is "<unix expiry>.<hex HMAC-SHA256(secret, id|port|expiry|access token)>":
// bound to one sandbox port, useless after it expires, unforgeable without
// the server's secret. The sandbox's access token is in the MAC so that a
// sandbox recycled for another user under the same id (warm pools with
// POOL_MAX_USES, which rotate the access token) refuses the previous
// user's preview tokens. A sandbox's access token is accepted as well.
func (s *Server) signPreview(id sandbox.ID, port int, exp int64, accessToken string) string {
	mac := hmac.New(sha256.New, s.cfg.PreviewSecret)
	fmt.Fprintf(mac, "%s|%d|%d|%s", id, port, exp, accessToken)
	return strconv.FormatInt(exp, 10) + "." + hex.EncodeToString(mac.Sum(nil))
}

// checkPreviewToken validates tok for port of id and returns its expiry.
func (s *Server) checkPreviewToken(r *http.Request, id sandbox.ID, port int, tok string) (time.Time, error) {
	expStr, _, ok := strings.Cut(tok, ".")
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if !ok || err != nil {
		return s.checkSandboxToken(r, id, tok)
	}
	if time.Now().Unix() > exp {
		return time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "preview token expired")
	}
	rec, err := s.m.Lookup(id)
	if err != nil {
		return time.Time{}, err
	}
	if !hmac.Equal([]byte(s.signPreview(id, port, exp, rec.AccessToken)), []byte(tok)) {
		return time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "invalid preview token")
	}
	SetUser(r, rec.Owner)
	return time.Unix(exp, 0), nil
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
	rec, err := s.m.Get(r.Context(), userOf(r), id)
	if err != nil {
		return err
	}
	exp := time.Now().Add(ttl).Unix()
	tok := s.signPreview(id, body.Port, exp, rec.AccessToken)
	out := map[string]any{
		"token":      tok,
		"expires_at": time.Unix(exp, 0).UTC(),
		"path":       fmt.Sprintf("/v1/sandboxes/%s/ports/%d/?%s=%s", id, body.Port, previewTokenParam, tok),
	}
	if host := s.previewAuthority(r, id, body.Port); host != "" {
		out["host"] = host
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		out["url"] = fmt.Sprintf("%s://%s/?%s=%s", scheme, host, previewTokenParam, tok)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// previewAuthority is the host[:port] of the browser preview of port of
// id, as reached from where the caller reached the API: a preview domain
// without a port gets the API's port. Empty without a preview domain.
func (s *Server) previewAuthority(r *http.Request, id sandbox.ID, port int) string {
	if s.cfg.PreviewDomain == "" {
		return ""
	}
	host := fmt.Sprintf("%d-%s.%s", port, id, s.cfg.PreviewDomain)
	if !strings.Contains(s.cfg.PreviewDomain, ":") {
		if _, p, err := net.SplitHostPort(r.Host); err == nil {
			host = net.JoinHostPort(host, p)
		}
	}
	return host
}

// PreviewToken signs a preview token of port of owner's sandbox id valid
// for ttl (at most a week), for a door that hands out preview links
// (Daytona's getPreviewLink), and gives the path-form preview URL's path
// (without the token).
func (s *Server) PreviewToken(ctx context.Context, owner string, id sandbox.ID, port int, ttl time.Duration) (token, path string, err error) {
	if port < 1 || port > 65535 {
		return "", "", badRequest("port", "port must be 1-65535")
	}
	if ttl <= 0 || ttl > maxPreviewTokenTTL {
		ttl = maxPreviewTokenTTL
	}
	rec, err := s.m.Get(ctx, owner, id)
	if err != nil {
		return "", "", err
	}
	exp := time.Now().Add(ttl).Unix()
	return s.signPreview(id, port, exp, rec.AccessToken), fmt.Sprintf("/v1/sandboxes/%s/ports/%d", id, port), nil
}
