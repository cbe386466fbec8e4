package tools

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Browser tools, for sandboxes with a desktop (the browser template,
// docs/browser.md): browser_open drives the browser on the sandbox's
// screen over the daemon's /cdp, screenshot takes the screen through
// /computer. In a sandbox without a browser they answer what to do.

const (
	browserOpenTimeout = 60 * time.Second
	maxURLLength       = 8192
)

func browserTools() []*Tool {
	return []*Tool{
		{
			Name: "browser_open",
			Description: "Open a URL in the web browser on the sandbox's screen (sandboxes of the browser template) and wait until the page has loaded. " +
				"Returns the page's title and final URL; call screenshot to see it. The browser's network is the sandbox's: http://127.0.0.1:PORT is a server inside the sandbox, " +
				"other addresses are reachable only as far as the sandbox's network policy allows.",
			Schema: object(req("url"),
				p("url", strMax("An http:// or https:// URL (about:blank also works).", maxURLLength)),
			),
			run: runBrowserOpen,
		},
		{
			Name: "screenshot",
			Description: "Take a screenshot of the sandbox's whole screen (sandboxes of the browser template: the browser and any other window) as a PNG image. " +
				"Coordinates in it are screen pixels from the top left corner.",
			Schema: object(nil),
			run:    runScreenshot,
		},
	}
}

func runScreenshot(ctx context.Context, s *Session, sb string, _ json.RawMessage) (*Result, error) {
	png, err := s.c.Screenshot(ctx, sb)
	if err != nil {
		return nil, err
	}
	if len(png) < 24 || string(png[:8]) != "\x89PNG\r\n\x1a\n" {
		return nil, fail("the sandbox's screen did not give a PNG image")
	}
	w, h := binary.BigEndian.Uint32(png[16:20]), binary.BigEndian.Uint32(png[20:24])
	return &Result{Content: []Content{
		{Type: "text", Text: fmt.Sprintf("Screenshot of sandbox %s's screen, %dx%d pixels.", sb, w, h)},
		{Type: "image", Data: base64.StdEncoding.EncodeToString(png), MimeType: "image/png"},
	}}, nil
}

func runBrowserOpen(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		URL string `json:"url"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	u, err := url.Parse(a.URL)
	if err != nil || (a.URL != "about:blank" && ((u.Scheme != "http" && u.Scheme != "https") || u.Host == "")) {
		return nil, fail("url must be an http:// or https:// URL (or about:blank), got %q", a.URL)
	}
	ctx, cancel := context.WithTimeout(ctx, browserOpenTimeout)
	defer cancel()
	ws, err := s.c.DialCDP(ctx, sb)
	if err != nil {
		return nil, err
	}
	defer ws.CloseNow()
	// What browser_open reads comes from the sandbox (its DevTools port
	// serves whatever sandbox code puts there) into the memory of the
	// daemon, where the kit runs for /mcp: no answer it needs is large.
	ws.SetReadLimit(browserMessageLimit)
	c := &cdpConn{ws: ws}
	title, final, err := c.open(ctx, a.URL)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fail("the page did not finish loading within %s: %v", browserOpenTimeout, err)
		}
		return nil, err
	}
	return textResult("Opened %s\nTitle: %s\nURL: %s", a.URL, title, final), nil
}

// browserMessageLimit bounds one DevTools message browser_open reads: its
// answers (targets, a session, a navigation, the title and URL) and the
// page events are small; a page's data: URL can be a few MiB.
const browserMessageLimit = 8 << 20

// cdpConn is a minimal DevTools client: one command at a time, events
// read while waiting for its answer.
type cdpConn struct {
	ws     *websocket.Conn
	nextID int
	// want is the one event (session and method) waitEvent waits for,
	// fired whether it came while a command was answered. Nothing else
	// of the events is kept: they come from the sandbox.
	want  string
	fired bool
}

type cdpMessage struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Result    json.RawMessage `json:"result"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// call sends method with params (to session, "" for the browser) and
// returns its result.
func (c *cdpConn) call(ctx context.Context, session, method string, params any, out any) error {
	c.nextID++
	id := c.nextID
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, _ := json.Marshal(msg)
	if err := c.ws.Write(ctx, websocket.MessageText, raw); err != nil {
		return fmt.Errorf("devtools %s: %w", method, err)
	}
	for {
		m, err := c.read(ctx)
		if err != nil {
			return fmt.Errorf("devtools %s: %w", method, err)
		}
		if m.ID != id {
			continue
		}
		if m.Error != nil {
			return fail("the browser refused %s: %s", method, m.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	}
}

func (c *cdpConn) read(ctx context.Context) (*cdpMessage, error) {
	_, raw, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	var m cdpMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("bad devtools message: %w", err)
	}
	if m.Method != "" && c.want != "" && m.SessionID+" "+m.Method == c.want {
		c.fired = true
	}
	return &m, nil
}

// expect starts watching for event method on session, forgetting an
// earlier one.
func (c *cdpConn) expect(session, method string) {
	c.want, c.fired = session+" "+method, false
}

// waitEvent waits for the event expect named (or returns at once if it
// came while a command was answered).
func (c *cdpConn) waitEvent(ctx context.Context) error {
	for !c.fired {
		if _, err := c.read(ctx); err != nil {
			return fmt.Errorf("waiting for %s: %w", c.want, err)
		}
	}
	return nil
}

// open navigates the browser's first page (the one on the screen) to
// target, waits for its load event, and returns its title and URL.
func (c *cdpConn) open(ctx context.Context, target string) (string, string, error) {
	var targets struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	if err := c.call(ctx, "", "Target.getTargets", map[string]any{}, &targets); err != nil {
		return "", "", err
	}
	pageID := ""
	for _, t := range targets.TargetInfos {
		if t.Type == "page" {
			pageID = t.TargetID
			break
		}
	}
	if pageID == "" {
		var created struct {
			TargetID string `json:"targetId"`
		}
		if err := c.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &created); err != nil {
			return "", "", err
		}
		pageID = created.TargetID
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": pageID, "flatten": true}, &attached); err != nil {
		return "", "", err
	}
	sess := attached.SessionID
	_ = c.call(ctx, "", "Target.activateTarget", map[string]any{"targetId": pageID}, nil)
	if err := c.call(ctx, sess, "Page.enable", map[string]any{}, nil); err != nil {
		return "", "", err
	}
	c.expect(sess, "Page.loadEventFired")
	var nav struct {
		ErrorText string `json:"errorText"`
		LoaderID  string `json:"loaderId"`
	}
	if err := c.call(ctx, sess, "Page.navigate", map[string]any{"url": target}, &nav); err != nil {
		return "", "", err
	}
	if nav.ErrorText != "" {
		return "", "", fail("the browser could not open %s: %s (is a server listening there, and does the sandbox's network policy allow it?)", target, nav.ErrorText)
	}
	// No loader: a navigation within the document (a #fragment), which
	// fires no load event.
	if nav.LoaderID != "" {
		if err := c.waitEvent(ctx); err != nil {
			return "", "", err
		}
	}
	var ev struct {
		Result struct {
			Value []string `json:"value"`
		} `json:"result"`
	}
	if err := c.call(ctx, sess, "Runtime.evaluate", map[string]any{"expression": "[document.title, location.href]", "returnByValue": true}, &ev); err != nil {
		return "", "", err
	}
	if len(ev.Result.Value) != 2 {
		return "", "", fail("the browser gave no title for %s", target)
	}
	_ = c.call(ctx, "", "Target.detachFromTarget", map[string]any{"sessionId": sess}, nil)
	return strings.TrimSpace(ev.Result.Value[0]), ev.Result.Value[1], nil
}
