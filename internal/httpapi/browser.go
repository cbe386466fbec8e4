package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/computer"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Browser sandboxes (templates/browser, docs/browser.md): Chromium on a
// virtual X display inside the sandbox, driven from outside two ways.
//
//	GET  /v1/sandboxes/{id}/cdp       a WebSocket to Chromium's DevTools
//	POST /v1/sandboxes/{id}/computer  screenshots, mouse and keyboard
//
// Both go through the sandbox's own boundary: /cdp dials the sandbox's
// loopback port with the manager's DialPort (as preview URLs do), and the
// /computer actions run xdotool and agentbox-screenshot as sandbox
// processes (the image's user, the sandbox's limits) with fixed argument
// lists, never a shell.

// cdpPort is where the browser template's Chromium serves DevTools, on
// the sandbox's loopback (templates/browser/Dockerfile).
const cdpPort = 9222

func (s *Server) browserRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("GET /v1/sandboxes/{id}/cdp", s.cdp)
	// The discovery document CDP clients ask an http:// endpoint for:
	// Playwright's connectOverCDP("http://.../cdp") asks for
	// .../cdp/json/version/, Puppeteer's browserURL for .../json/version.
	v1("GET /v1/sandboxes/{id}/cdp/json/version", s.cdpVersion)
	// The same with Playwright's trailing slash (its own path in the
	// OpenAPI document; one route in the metrics).
	s.patterns = append(s.patterns, "GET /v1/sandboxes/{id}/cdp/json/version/{$}")
	s.mux.Handle("GET /v1/sandboxes/{id}/cdp/json/version/{$}", s.instrument("GET /v1/sandboxes/{id}/cdp/json/version", s.authenticated(s.cdpVersion)))
	v1("POST /v1/sandboxes/{id}/computer", s.computer)
}

// cdp proxies a WebSocket to the browser endpoint Chromium names in its
// /json/version (ws://127.0.0.1:9222/devtools/browser/<uuid>). Messages
// pass unchanged in both directions; what authenticated the request to
// the daemon (API key, access token, cookies) and the Origin header are
// not passed on.
func (s *Server) cdp(w http.ResponseWriter, r *http.Request) error {
	id := sandboxID(r)
	if _, err := s.m.Get(r.Context(), userOf(r), id); err != nil {
		return err
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return sandbox.Errorf(sandbox.ClassInvalid, "/cdp is a WebSocket endpoint (Chrome DevTools protocol): connect with ws:// or wss://, e.g. Playwright's chromium.connectOverCDP(url, {headers}) or Puppeteer's connect({browserWSEndpoint, headers})")
	}
	path, _, err := s.browserEndpoint(r.Context(), id)
	if err != nil {
		return err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = fmt.Sprintf("%s.%d.sandbox", id, cdpPort)
			pr.Out.URL.Path = path
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = ""
			// Chromium accepts DevTools connections for a loopback Host
			// only, and refuses an Origin it was not told to allow; the
			// daemon already checked the caller (and the browser guard the
			// origin).
			pr.Out.Host = fmt.Sprintf("127.0.0.1:%d", cdpPort)
			pr.Out.Header.Del("Origin")
			s.stripCredentials(pr.Out, false)
		},
		Transport: s.previewTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, r, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("no DevTools connection to the browser of sandbox %s", id)))
		},
	}
	proxy.ServeHTTP(w, r)
	return nil
}

// devtoolsPath is what a browser endpoint's path looks like.
var devtoolsPath = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^/devtools/browser/[A-Za-z0-9-]{1,64}$`) })

// versionFields are the fields of Chromium's /json/version passed on (as
// strings); webSocketDebuggerUrl is the daemon's own.
var versionFields = []string{"Browser", "Protocol-Version", "User-Agent", "V8-Version", "WebKit-Version"}

// cdpVersion serves GET /v1/sandboxes/{id}/cdp/json/version: Chromium's
// version document with the daemon's /cdp WebSocket as the browser
// endpoint, on the scheme and host the caller reached the daemon by.
func (s *Server) cdpVersion(w http.ResponseWriter, r *http.Request) error {
	id := sandboxID(r)
	if _, err := s.m.Get(r.Context(), userOf(r), id); err != nil {
		return err
	}
	_, doc, err := s.browserEndpoint(r.Context(), id)
	if err != nil {
		return err
	}
	scheme := "ws"
	if r.TLS != nil {
		scheme = "wss"
	}
	out := map[string]string{"webSocketDebuggerUrl": fmt.Sprintf("%s://%s/v1/sandboxes/%s/cdp", scheme, r.Host, id)}
	for _, k := range versionFields {
		if v, ok := doc[k].(string); ok {
			out[k] = v
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// browserEndpoint asks the sandbox's Chromium for its browser WebSocket
// path, and returns it with the whole /json/version document. The answer
// comes from code in the sandbox, so only a path of the expected shape is
// used (never its host).
func (s *Server) browserEndpoint(ctx context.Context, id sandbox.ID) (string, map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s.%d.sandbox/json/version", id, cdpPort), nil) //nolint:gosec // G704: the host is the sandbox's own name, dialled by the preview transport inside its network
	if err != nil {
		return "", nil, fmt.Errorf("devtools request: %w", err)
	}
	req.Host = fmt.Sprintf("127.0.0.1:%d", cdpPort)
	noBrowser := fmt.Sprintf("no browser answers on port %d in sandbox %s (create it from the browser template: docs/browser.md)", cdpPort, id)
	resp, err := s.previewTransport.RoundTrip(req)
	if err != nil {
		return "", nil, sandbox.Wrap(sandbox.ClassUnavailable, err, noBrowser)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, sandbox.Errorf(sandbox.ClassUnavailable, "%s: /json/version answered %s", noBrowser, resp.Status)
	}
	var doc map[string]any
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&doc); err != nil {
		return "", nil, sandbox.Wrap(sandbox.ClassUnavailable, err, noBrowser+": bad /json/version")
	}
	raw, _ := doc["webSocketDebuggerUrl"].(string)
	u, err := url.Parse(raw)
	if err != nil || !devtoolsPath().MatchString(u.Path) {
		return "", nil, sandbox.Errorf(sandbox.ClassUnavailable, "%s: unexpected webSocketDebuggerUrl %q", noBrowser, raw)
	}
	return u.Path, doc, nil
}

// computer serves POST /v1/sandboxes/{id}/computer: one action on the
// sandbox's display. A screenshot answers image/png; the other actions
// JSON.
func (s *Server) computer(w http.ResponseWriter, r *http.Request) error {
	var a computer.Action
	if err := decodeJSON(w, r, maxJSONBody, &a, false); err != nil {
		return err
	}
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	res, err := computer.Do(r.Context(), dr, a)
	if err != nil {
		return err
	}
	switch a.Action {
	case "screenshot":
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(len(res.PNG)))
		w.Header().Set("Cache-Control", "no-store")
		_, err := w.Write(res.PNG)
		return err
	case "cursor_position":
		writeJSON(w, http.StatusOK, map[string]any{"x": res.X, "y": res.Y})
	case "screen_size":
		writeJSON(w, http.StatusOK, map[string]any{"width": res.Width, "height": res.Height})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
	}
	return nil
}
