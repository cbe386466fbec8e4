package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/rfbview"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Desktop and browser sandboxes (templates/desktop, templates/browser,
// docs/desktop.md): a person watches or uses the sandbox's screen in a
// browser, through a signed, expiring link the sandbox's owner asks for.
//
//	POST /v1/sandboxes/{id}/desktop/links  a link (API key, the owner)
//	GET  /v1/sandboxes/{id}/desktop        the noVNC page (the link's signature)
//	GET  /v1/sandboxes/{id}/desktop/ws     its WebSocket to the sandbox's VNC server
//	GET  /desktop/assets/..., /desktop/novnc/...  the page's scripts (static)
//
// The daemon bridges the WebSocket to an x11vnc server on the sandbox's
// loopback itself (DialPort, as /cdp and previews do): the interactive
// port, or the view-only one with rfbview's filter in front, which drops
// every input message a viewer sends.

// The VNC servers of the browser and desktop templates' screens
// (templates/browser/agentbox-desktop, templates/desktop/agentbox-xdesktop).
const (
	vncInteractivePort = 5910
	vncViewPort        = 5911
)

// Desktop link bounds: a link lives an hour unless asked otherwise, a day
// at most.
const (
	defaultDesktopLinkTTL = time.Hour
	maxDesktopLinkTTL     = 24 * time.Hour
)

//go:embed desktop_assets
var desktopAssets embed.FS

func (s *Server) desktopRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("POST /v1/sandboxes/{id}/desktop/links", s.createDesktopLink)
	// The page and its WebSocket are opened by a person's browser with the
	// link alone: the signature is their credential, not an API key.
	for pattern, h := range map[string]func(http.ResponseWriter, *http.Request) error{
		"GET /v1/sandboxes/{id}/desktop":    s.desktopPage,
		"GET /v1/sandboxes/{id}/desktop/ws": s.desktopSocket,
	} {
		s.patterns = append(s.patterns, pattern)
		s.mux.Handle(pattern, s.instrument(pattern, errorHandler(h)))
	}
	s.mux.Handle("GET /desktop/assets/{file}", s.instrument("GET /desktop/assets", http.HandlerFunc(s.desktopAsset)))
	s.mux.Handle("GET /desktop/novnc/{path...}", s.instrument("GET /desktop/novnc", http.HandlerFunc(s.novncAsset)))
}

// errorHandler turns a handler's error into the JSON error response.
func errorHandler(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			if rec, ok := w.(*statusRecorder); ok && rec.wrote {
				logger(r).Warn("request failed after the response started", "err", err)
				return
			}
			writeError(w, r, err)
		}
	})
}

// desktopKey is the MAC key of desktop links: derived from the server's
// preview secret (kept across restarts), for this use only.
func (s *Server) desktopKey() []byte {
	mac := hmac.New(sha256.New, s.cfg.PreviewSecret)
	mac.Write([]byte("agentbox desktop link v1"))
	return mac.Sum(nil)
}

// signDesktop is the hex HMAC-SHA256 of (id, mode, expiry, the sandbox's
// access token): bound to one sandbox and mode, useless after the expiry,
// and refused by a sandbox recycled for another user (its access token
// rotates), unforgeable without the server's secret.
func (s *Server) signDesktop(id sandbox.ID, mode string, exp int64, accessToken string) string {
	mac := hmac.New(sha256.New, s.desktopKey())
	fmt.Fprintf(mac, "desktop|%s|%s|%d|%s", id, mode, exp, accessToken)
	return hex.EncodeToString(mac.Sum(nil))
}

// checkDesktopLink validates the link's query (mode, exp, sig) for sandbox
// id and returns its mode, expiry and the sandbox's owner.
func (s *Server) checkDesktopLink(r *http.Request, id sandbox.ID) (mode string, exp time.Time, err error) {
	q := r.URL.Query()
	mode, expStr, sig := q.Get("mode"), q.Get("exp"), q.Get("sig")
	if sig == "" || expStr == "" || mode == "" {
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "a desktop link needs its signature (mode, exp and sig): ask POST /v1/sandboxes/%s/desktop/links for one", id)
	}
	if mode != "view" && mode != "interactive" {
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "invalid desktop link")
	}
	e, perr := strconv.ParseInt(expStr, 10, 64)
	now := time.Now()
	// A link from the future beyond the longest TTL was not made here (or
	// this clock jumped back): refused as well as an expired one.
	if perr != nil || e > now.Add(maxDesktopLinkTTL+time.Minute).Unix() {
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "invalid desktop link")
	}
	if now.Unix() > e {
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "desktop link expired at %s: ask for a new one", time.Unix(e, 0).UTC().Format(time.RFC3339))
	}
	rec, err := s.m.Lookup(id)
	if err != nil {
		// As for a bad signature: a link does not tell which sandboxes exist.
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "invalid desktop link")
	}
	want := s.signDesktop(id, mode, e, rec.AccessToken)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return "", time.Time{}, sandbox.Errorf(sandbox.ClassUnauth, "invalid desktop link")
	}
	SetUser(r, rec.Owner)
	return mode, time.Unix(e, 0), nil
}

// createDesktopLink serves POST /v1/sandboxes/{id}/desktop/links.
func (s *Server) createDesktopLink(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Mode string  `json:"mode"`
		TTL  float64 `json:"ttl"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, true); err != nil {
		return err
	}
	if body.Mode == "" {
		body.Mode = "view"
	}
	if body.Mode != "view" && body.Mode != "interactive" {
		return badRequest("mode", "mode must be view or interactive")
	}
	ttl, err := seconds("ttl", body.TTL)
	if err != nil {
		return err
	}
	if ttl == 0 {
		ttl = defaultDesktopLinkTTL
	}
	if ttl > maxDesktopLinkTTL {
		return badRequest("ttl", "ttl must be at most %s", maxDesktopLinkTTL)
	}
	id := sandboxID(r)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	p, exp, err := s.desktopLink(r.Context(), userOf(r), id, body.Mode, ttl)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"url":        scheme + "://" + r.Host + p,
		"path":       p,
		"mode":       body.Mode,
		"expires_at": time.Unix(exp, 0).UTC(),
	})
	return nil
}

// desktopLink mints the path (with its query) of a signed link to the
// noVNC page of owner's sandbox id, after checking the sandbox has a
// desktop: a link that opens a page that never connects helps no one.
func (s *Server) desktopLink(ctx context.Context, owner string, id sandbox.ID, mode string, ttl time.Duration) (string, int64, error) {
	rec, err := s.m.Get(ctx, owner, id)
	if err != nil {
		return "", 0, err
	}
	conn, err := s.dialVNC(ctx, id, mode)
	if err != nil {
		return "", 0, err
	}
	conn.Close()
	exp := time.Now().Add(ttl).Unix()
	q := url.Values{"mode": {mode}, "exp": {strconv.FormatInt(exp, 10)}, "sig": {s.signDesktop(id, mode, exp, rec.AccessToken)}}
	return fmt.Sprintf("/v1/sandboxes/%s/desktop?%s", id, q.Encode()), exp, nil
}

// DesktopLink returns base followed by a signed, interactive link to the
// noVNC page of owner's sandbox id, valid for an hour: agentscope's
// desktop URL (GET /desktop/{id}/...) redirects there.
func (s *Server) DesktopLink(ctx context.Context, owner string, id sandbox.ID, base string) (string, error) {
	p, _, err := s.desktopLink(ctx, owner, id, "interactive", defaultDesktopLinkTTL)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(base, "/") + p, nil
}

// ErrNoDesktop is in the chain of the error of a desktop link or socket
// for a sandbox that has no VNC server (its template has no desktop).
var ErrNoDesktop = errors.New("no desktop")

// dialVNC connects to the sandbox's VNC server for mode.
func (s *Server) dialVNC(ctx context.Context, id sandbox.ID, mode string) (io.ReadWriteCloser, error) {
	port := vncViewPort
	if mode == "interactive" {
		port = vncInteractivePort
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := s.m.DialPort(ctx, id, port)
	if err != nil {
		if c := sandbox.ClassOf(err); c == sandbox.ClassNotFound || c == sandbox.ClassConflict {
			return nil, err
		}
		return nil, sandbox.Wrap(sandbox.ClassConflict, fmt.Errorf("%w: %w", ErrNoDesktop, err), fmt.Sprintf("sandbox %s has no desktop (no VNC server on its port %d): create it from the browser or desktop template (docs/desktop.md)", id, port))
	}
	return conn, nil
}

// desktopHeaders are the page's: framed only by pages of this server's own
// origin — the console, which embeds it — never by another site (an
// interactive desktop under another page's transparent layer would take
// its clicks); a path-form preview shares the origin but is served
// sandboxed (an opaque origin, which 'self' does not match), so a
// sandbox's page cannot frame it either. No referrer (the address carries
// the signature), scripts and connections to this server only, nothing
// cached.
func desktopHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'")
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

// desktopPage serves the noVNC page of a valid link.
func (s *Server) desktopPage(w http.ResponseWriter, r *http.Request) error {
	if _, _, err := s.checkDesktopLink(r, sandboxID(r)); err != nil {
		return err
	}
	page, err := desktopAssets.ReadFile("desktop_assets/desktop.html")
	if err != nil {
		return fmt.Errorf("desktop page: %w", err)
	}
	desktopHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, err = w.Write(page)
	return err
}

// desktopSocket bridges the page's WebSocket to the sandbox's VNC server
// until either side closes or the link expires.
func (s *Server) desktopSocket(w http.ResponseWriter, r *http.Request) error {
	id := sandboxID(r)
	mode, exp, err := s.checkDesktopLink(r, id)
	if err != nil {
		return err
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return sandbox.Errorf(sandbox.ClassInvalid, "/desktop/ws is the desktop page's WebSocket: open the page (GET /v1/sandboxes/%s/desktop) instead", id)
	}
	vnc, err := s.dialVNC(r.Context(), id, mode)
	if err != nil {
		return err
	}
	defer vnc.Close()
	// websocket.Accept refuses an Origin other than this Host: only the
	// desktop page (or a client that sends no Origin) opens the socket.
	ws, err := acceptWebSocket(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if ws == nil {
		return err
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	// The bridge outlives the request's context (the connection is
	// hijacked); the link's expiry ends it with a close frame that says so.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stream := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	var toVNC io.Writer = vnc
	var filter *rfbview.Filter
	if mode != "interactive" {
		filter = rfbview.NewFilter(vnc)
		toVNC = filter
	}
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(toVNC, stream)
		done <- err
	}()
	go func() {
		_, err := io.Copy(stream, vnc)
		done <- err
	}()
	expiry := time.NewTimer(time.Until(exp))
	defer expiry.Stop()
	expired := false
	select {
	case err = <-done:
	case <-expiry.C:
		expired = true
	}
	if filter != nil && filter.Dropped > 0 {
		logger(r).Info("desktop view: input dropped", "sandbox", id, "messages", filter.Dropped)
	}
	switch {
	case expired:
		ws.Close(websocket.StatusPolicyViolation, "the desktop link expired")
	case errors.Is(err, rfbview.ErrProtocol):
		ws.Close(websocket.StatusPolicyViolation, "view-only: unexpected message")
	default:
		ws.Close(websocket.StatusNormalClosure, "")
	}
	return nil
}

// desktopAsset serves the page's own script (embedded).
func (s *Server) desktopAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	data, err := desktopAssets.ReadFile("desktop_assets/" + name)
	if err != nil || !strings.HasSuffix(name, ".js") {
		writeError(w, r, sandbox.Errorf(sandbox.ClassNotFound, "no desktop asset %q", name))
		return
	}
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(data) //nolint:gosec // G705: an embedded script served as text/javascript with nosniff
}

// novncAsset serves noVNC's client modules (core/ and vendor/) from the
// host's copy (DESKTOP_NOVNC_DIR, Debian's novnc package): the operator's
// files, never the sandbox's, since they run on the API's origin.
func (s *Server) novncAsset(w http.ResponseWriter, r *http.Request) {
	p := path.Clean("/" + r.PathValue("path"))
	if (!strings.HasPrefix(p, "/core/") && !strings.HasPrefix(p, "/vendor/")) || !strings.HasSuffix(p, ".js") {
		writeError(w, r, sandbox.Errorf(sandbox.ClassNotFound, "no noVNC module %q", p))
		return
	}
	dir := s.cfg.NoVNCDir
	if dir == "" {
		dir = string(defaults.NoVNCDir)
	}
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(p)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, derr := os.Stat(filepath.Join(dir, "core", "rfb.js")); derr != nil {
				writeError(w, r, sandbox.Errorf(sandbox.ClassUnavailable, "the desktop page needs noVNC on the server: install Debian's novnc package or set DESKTOP_NOVNC_DIR"))
				return
			}
			writeError(w, r, sandbox.Errorf(sandbox.ClassNotFound, "no noVNC module %q", p))
			return
		}
		writeError(w, r, fmt.Errorf("noVNC module %s: %w", p, err))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		writeError(w, r, sandbox.Errorf(sandbox.ClassNotFound, "no noVNC module %q", p))
		return
	}
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "", st.ModTime(), f)
}
