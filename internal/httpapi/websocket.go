package httpapi

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// acceptWebSocket is websocket.Accept answering its refusals with the
// API's one error shape: Accept writes them as text/plain (426 or 400 for
// a request that is not a WebSocket handshake, 403 for another origin).
// A refusal comes back as the error to answer (ClassInvalid or
// ClassForbidden, Accept's words as the message), nothing written yet; a
// nil Conn with a nil error means Accept failed after it answered 101.
func acceptWebSocket(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions) (*websocket.Conn, error) {
	rc := &refusalCatcher{ResponseWriter: w}
	conn, err := websocket.Accept(rc, r, opts)
	if err == nil {
		return conn, nil
	}
	if rc.status == 0 {
		return nil, nil // upgraded (or hijacked) already: nothing more to say
	}
	msg := strings.TrimSpace(rc.body.String())
	switch {
	case rc.status == http.StatusForbidden:
		return nil, sandbox.Errorf(sandbox.ClassForbidden, "%s", msg)
	case rc.status < 500:
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "%s", msg)
	}
	return nil, err
}

// refusalCatcher passes a 101 answer on and keeps any other (Accept's
// text/plain refusal) to itself.
type refusalCatcher struct {
	http.ResponseWriter
	status int // a refusal's status; 0 once 101 passed
	passed bool
	body   bytes.Buffer
}

func (c *refusalCatcher) WriteHeader(code int) {
	if code == http.StatusSwitchingProtocols || c.passed {
		c.passed = true
		c.ResponseWriter.WriteHeader(code)
		return
	}
	if c.status == 0 {
		c.status = code
	}
}

func (c *refusalCatcher) Write(b []byte) (int, error) {
	if c.passed {
		return c.ResponseWriter.Write(b)
	}
	if c.body.Len() < 4096 {
		c.body.Write(b)
	}
	return len(b), nil
}

// Unwrap lets Accept reach the connection's Hijacker.
func (c *refusalCatcher) Unwrap() http.ResponseWriter { return c.ResponseWriter }
