package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// Browser sandboxes (the browser template, docs/browser.md): a Chromium on
// the sandbox's virtual screen, driven over the Chrome DevTools protocol
// (CDPEndpoint, DialCDP) or with screen actions (Computer, Screenshot).

// Point is a position on the sandbox's screen, in pixels from its top left
// corner.
type Point struct{ X, Y int }

// ComputerAction is one action of POST /v1/sandboxes/{id}/computer.
type ComputerAction struct {
	// Action is click, double_click, move, drag, scroll, type, key,
	// cursor_position or screen_size (Screenshot takes screenshots).
	Action string
	// At is the target: required for move and drag (its start); for
	// click, double_click and scroll, nil acts where the pointer is.
	At *Point
	// To is where a drag releases the button.
	To *Point
	// Button is left (default), middle or right.
	Button string
	// Direction (up, down (default), left, right) and Amount (wheel
	// clicks, default 3) of a scroll.
	Direction string
	Amount    int
	// Text to type (at most 2000 characters).
	Text string
	// Keys to press: combinations separated by spaces, each X keysym
	// names joined by "+" ("ctrl+l", "Return").
	Keys string
}

// MarshalJSON encodes the action as the API's body.
func (a ComputerAction) MarshalJSON() ([]byte, error) {
	m := map[string]any{"action": a.Action}
	if a.At != nil {
		m["x"], m["y"] = a.At.X, a.At.Y
	}
	if a.To != nil {
		m["to_x"], m["to_y"] = a.To.X, a.To.Y
	}
	for k, v := range map[string]string{"button": a.Button, "direction": a.Direction, "text": a.Text, "keys": a.Keys} {
		if v != "" {
			m[k] = v
		}
	}
	if a.Amount != 0 {
		m["amount"] = a.Amount
	}
	return json.Marshal(m)
}

// ComputerResult is what an action answered: the pointer's position for
// cursor_position, the screen's size for screen_size.
type ComputerResult struct {
	X      int `json:"x"`
	Y      int `json:"y"`
	Width  int `json:"width"`
	Height int `json:"height"`
}

// Computer performs one action on the screen of sandbox id.
func (c *Client) Computer(ctx context.Context, id string, a ComputerAction) (*ComputerResult, error) {
	if a.Action == "screenshot" {
		return nil, fmt.Errorf("computer action in sandbox %s: use Screenshot for screenshots", id)
	}
	var out ComputerResult
	if err := c.doJSON(ctx, a.Action+" in sandbox "+id, http.MethodPost, sandboxPath(id, "/computer"), nil, a, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// maxScreenshot bounds a screenshot's size (a 4K screen's PNG is far
// smaller).
const maxScreenshot = 64 << 20

// Screenshot returns a PNG of the whole screen of sandbox id.
func (c *Client) Screenshot(ctx context.Context, id string) ([]byte, error) {
	op := "screenshot of sandbox " + id
	req, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "/computer"), nil, strings.NewReader(`{"action":"screenshot"}`))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.send(op, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	png, err := io.ReadAll(io.LimitReader(resp.Body, maxScreenshot+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(png) > maxScreenshot {
		return nil, fmt.Errorf("%s: larger than %d MiB", op, maxScreenshot>>20)
	}
	return png, nil
}

// CDPEndpoint returns the WebSocket URL of the DevTools connection to the
// browser of sandbox id and the headers to send with it (the API key), for
// CDP clients: Playwright's connectOverCDP(url, {headers}), Puppeteer's
// connect({browserWSEndpoint: url, headers}).
func (c *Client) CDPEndpoint(id string) (string, http.Header) {
	u := c.endpoint(sandboxPath(id, "/cdp"), nil)
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	h := c.header()
	h.Del("User-Agent")
	return u.String(), h
}

// cdpReadLimit bounds one DevTools message (screenshots and DOM snapshots
// are large).
const cdpReadLimit = 256 << 20

// DialCDP opens the DevTools WebSocket to the browser of sandbox id: text
// messages are CDP JSON commands and events. ctx bounds the dial only; the
// caller closes the connection.
func (c *Client) DialCDP(ctx context.Context, id string) (*websocket.Conn, error) {
	ws, resp, err := websocket.Dial(ctx, c.endpoint(sandboxPath(id, "/cdp"), nil).String(), &websocket.DialOptions{
		HTTPClient: c.http,
		HTTPHeader: c.header(),
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			return nil, errorFromResponse(resp)
		}
		return nil, fmt.Errorf("devtools connection to sandbox %s: %w", id, err)
	}
	ws.SetReadLimit(cdpReadLimit)
	return ws, nil
}
