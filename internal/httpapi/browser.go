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
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/manager"
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

// computerTimeout bounds one /computer action inside the sandbox.
const computerTimeout = 30 * time.Second

// maxTypeText bounds the text of one "type" action: xdotool types it key by
// key, about 80 characters a second.
const maxTypeText = 2000

func (s *Server) browserRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("GET /v1/sandboxes/{id}/cdp", s.cdp)
	// The discovery document CDP clients ask an http:// endpoint for:
	// Playwright's connectOverCDP("http://.../cdp") asks for
	// .../cdp/json/version/, Puppeteer's browserURL for .../json/version.
	v1("GET /v1/sandboxes/{id}/cdp/json/version", s.cdpVersion)
	// The same with Playwright's trailing slash (one route in the OpenAPI
	// document, so registered beside v1's list).
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
			stripCredentials(pr.Out, false)
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
var devtoolsPath = regexp.MustCompile(`^/devtools/browser/[A-Za-z0-9-]{1,64}$`)

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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s.%d.sandbox/json/version", id, cdpPort), nil)
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
	if err != nil || !devtoolsPath.MatchString(u.Path) {
		return "", nil, sandbox.Errorf(sandbox.ClassUnavailable, "%s: unexpected webSocketDebuggerUrl %q", noBrowser, raw)
	}
	return u.Path, doc, nil
}

// computerAction is the body of POST /v1/sandboxes/{id}/computer.
type computerAction struct {
	Action    string `json:"action"`
	X         *int   `json:"x"`
	Y         *int   `json:"y"`
	ToX       *int   `json:"to_x"`
	ToY       *int   `json:"to_y"`
	Button    string `json:"button"`
	Direction string `json:"direction"`
	Amount    int    `json:"amount"`
	Text      string `json:"text"`
	Keys      string `json:"keys"`
}

// maxCoordinate bounds coordinates (X's own limit is 32767).
const maxCoordinate = 32767

// keyPattern is one xdotool key combination: keysym names joined by "+"
// ("ctrl+l", "Return", "shift+Tab", "F5").
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,32}(\+[A-Za-z0-9_]{1,32}){0,4}$`)

var buttons = map[string]string{"": "1", "left": "1", "middle": "2", "right": "3"}

var scrollButtons = map[string]string{"up": "4", "down": "5", "left": "6", "right": "7"}

func point(name string, x, y *int) ([]string, error) {
	if x == nil || y == nil {
		return nil, badRequest(name, "%s needs both coordinates", name)
	}
	if *x < 0 || *y < 0 || *x > maxCoordinate || *y > maxCoordinate {
		return nil, badRequest(name, "coordinates must be 0-%d", maxCoordinate)
	}
	return []string{"mousemove", strconv.Itoa(*x), strconv.Itoa(*y)}, nil
}

// optionalPoint is a mousemove to x,y if given, else nothing (act where
// the pointer is).
func optionalPoint(a computerAction) ([]string, error) {
	if a.X == nil && a.Y == nil {
		return nil, nil
	}
	mv, err := point("x", a.X, a.Y)
	if err != nil {
		return nil, err
	}
	// Let the move land before the button acts on it.
	return append(mv, "sleep", "0.05"), nil
}

// xdotoolArgs translates an action into xdotool's argument list. Every
// value is validated, so no argument can be read as an option.
func xdotoolArgs(a computerAction) ([]string, error) {
	switch a.Action {
	case "move":
		return point("x", a.X, a.Y)
	case "click", "double_click":
		b, ok := buttons[a.Button]
		if !ok {
			return nil, badRequest("button", "button must be left, middle or right")
		}
		args, err := optionalPoint(a)
		if err != nil {
			return nil, err
		}
		if a.Action == "double_click" {
			return append(args, "click", "--repeat", "2", "--delay", "80", b), nil
		}
		return append(args, "click", b), nil
	case "drag":
		from, err := point("x", a.X, a.Y)
		if err != nil {
			return nil, err
		}
		to, err := point("to_x", a.ToX, a.ToY)
		if err != nil {
			return nil, err
		}
		args := append(from, "sleep", "0.05", "mousedown", "1", "sleep", "0.05")
		args = append(args, to...)
		return append(args, "sleep", "0.05", "mouseup", "1"), nil
	case "scroll":
		dir := a.Direction
		if dir == "" {
			dir = "down"
		}
		b, ok := scrollButtons[dir]
		if !ok {
			return nil, badRequest("direction", "direction must be up, down, left or right")
		}
		n := a.Amount
		if n == 0 {
			n = 3
		}
		if n < 1 || n > 100 {
			return nil, badRequest("amount", "amount must be 1-100 (scroll wheel clicks)")
		}
		args, err := optionalPoint(a)
		if err != nil {
			return nil, err
		}
		return append(args, "click", "--repeat", strconv.Itoa(n), "--delay", "20", b), nil
	case "type":
		if a.Text == "" {
			return nil, badRequest("text", "type needs text")
		}
		if !utf8.ValidString(a.Text) || strings.ContainsRune(a.Text, 0) {
			return nil, badRequest("text", "text must be valid UTF-8 without NUL")
		}
		if n := utf8.RuneCountInString(a.Text); n > maxTypeText {
			return nil, badRequest("text", "text must be at most %d characters (got %d): send it in parts", maxTypeText, n)
		}
		return []string{"type", "--delay", "12", "--", a.Text}, nil
	case "key":
		combos := strings.Fields(a.Keys)
		if len(combos) == 0 || len(combos) > 20 {
			return nil, badRequest("keys", "keys must be 1-20 key combinations separated by spaces, e.g. \"ctrl+l\" or \"Return\"")
		}
		for _, k := range combos {
			if !keyPattern.MatchString(k) {
				return nil, badRequest("keys", "%q is not a key combination: X keysym names joined by +, e.g. ctrl+shift+Tab, Return, a", k)
			}
		}
		return append([]string{"key", "--delay", "50", "--"}, combos...), nil
	case "cursor_position":
		return []string{"getmouselocation", "--shell"}, nil
	case "screen_size":
		return []string{"getdisplaygeometry"}, nil
	}
	return nil, badRequest("action", "unknown action %q: screenshot, click, double_click, move, drag, scroll, type, key, cursor_position or screen_size", a.Action)
}

// computer serves POST /v1/sandboxes/{id}/computer: one action on the
// sandbox's display. A screenshot answers image/png; the other actions
// JSON.
func (s *Server) computer(w http.ResponseWriter, r *http.Request) error {
	var a computerAction
	if err := decodeJSON(w, r, maxJSONBody, &a, false); err != nil {
		return err
	}
	cmd := []string{"agentbox-screenshot"}
	if a.Action != "screenshot" {
		args, err := xdotoolArgs(a)
		if err != nil {
			return err
		}
		cmd = append([]string{"xdotool"}, args...)
	}
	noDesktop := sandbox.Errorf(sandbox.ClassConflict, "sandbox %s has no desktop (%s not found): create it from the browser template (docs/browser.md)", sandboxID(r), cmd[0])
	res, err := s.m.ExecBuffered(r.Context(), userOf(r), sandboxID(r), manager.ExecRequest{Cmd: cmd, Timeout: computerTimeout})
	if err != nil {
		if sandbox.ClassOf(err) == sandbox.ClassInvalid && strings.Contains(err.Error(), "not found") {
			return noDesktop
		}
		return err
	}
	if res.ExitCode != 0 || res.Truncated {
		msg := strings.TrimSpace(string(res.Stderr))
		if len(msg) > 500 {
			msg = msg[:500]
		}
		if res.ExitCode == 127 {
			return noDesktop
		}
		return sandbox.Errorf(sandbox.ClassUnavailable, "%s %s failed in sandbox %s (exit %d, status %s): %s", cmd[0], a.Action, sandboxID(r), res.ExitCode, res.Status, msg)
	}
	out := string(res.Stdout)
	switch a.Action {
	case "screenshot":
		if !strings.HasPrefix(out, "\x89PNG\r\n\x1a\n") {
			return sandbox.Errorf(sandbox.ClassUnavailable, "agentbox-screenshot in sandbox %s wrote no PNG", sandboxID(r))
		}
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(len(res.Stdout)))
		w.Header().Set("Cache-Control", "no-store")
		_, err := w.Write(res.Stdout)
		return err
	case "cursor_position":
		var x, y int
		for _, line := range strings.Fields(out) {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "X":
				x, _ = strconv.Atoi(v)
			case "Y":
				y, _ = strconv.Atoi(v)
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"x": x, "y": y})
	case "screen_size":
		var width, height int
		if _, err := fmt.Sscan(out, &width, &height); err != nil {
			return sandbox.Errorf(sandbox.ClassUnavailable, "screen size of sandbox %s: unexpected %q", sandboxID(r), out)
		}
		writeJSON(w, http.StatusOK, map[string]any{"width": width, "height": height})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
	}
	return nil
}
