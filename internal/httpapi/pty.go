package httpapi

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/dataplane"
)

// ptyControl is a text message on the PTY websocket.
type ptyControl struct {
	Type     string `json:"type"`
	Cols     uint32 `json:"cols,omitempty"`
	Rows     uint32 `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

func (s *Server) pty(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	cols, rows := uint32(80), uint32(24)
	if v := q.Get("cols"); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return badRequest("cols", "cols must be a positive integer")
		}
		cols = uint32(n)
	}
	if v := q.Get("rows"); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return badRequest("rows", "rows must be a positive integer")
		}
		rows = uint32(n)
	}
	opts := dataplane.StartOptions{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Cwd: q.Get("cwd"),
		PTY: &dataplane.PTYSize{Cols: cols, Rows: rows}, Stdin: true,
		Env: map[string]string{"TERM": "xterm-256color"}}
	if cmd := q.Get("cmd"); cmd != "" {
		opts.Args = []string{"-l", "-c", cmd}
	}
	// The terminal is admitted like any request, then lives on outside the
	// count of requests in flight (it may stay open for hours).
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	// Check the sandbox before upgrading, so errors are plain JSON responses.
	conn, err := acceptWebSocket(w, r, &websocket.AcceptOptions{Subprotocols: []string{PTYProtocol}})
	if conn == nil {
		return err
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	p, err := dr.Start(ctx, opts)
	dr.End()
	if err != nil {
		conn.Close(websocket.StatusInternalError, truncateReason(err.Error()))
		return nil
	}
	defer p.Close()
	killed := false
	defer func() {
		if !killed {
			kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = p.Kill(kctx)
			kcancel()
		}
	}()

	// Client → terminal.
	go func() {
		defer cancel()
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			switch typ {
			case websocket.MessageBinary:
				if err := p.SendStdin(ctx, data); err != nil {
					return
				}
			case websocket.MessageText:
				if cols, rows, ok := parseResize(data); ok {
					_ = p.Resize(ctx, cols, rows)
				}
			}
		}
	}()

	// Terminal → client.
	for {
		ev, err := p.Next()
		if err != nil {
			conn.Close(websocket.StatusGoingAway, "terminal closed")
			return nil
		}
		switch ev.Kind {
		case dataplane.EventPTY, dataplane.EventStdout, dataplane.EventStderr:
			if err := conn.Write(ctx, websocket.MessageBinary, ev.Data); err != nil {
				return nil
			}
		case dataplane.EventEnd:
			killed = true
			code := ev.End.ExitCode
			msg, _ := json.Marshal(ptyControl{Type: "exit", ExitCode: &code})
			_ = conn.Write(ctx, websocket.MessageText, msg)
			conn.Close(websocket.StatusNormalClosure, "")
			return nil
		}
	}
}

// parseResize reads a {"type":"resize","cols":C,"rows":R} text frame.
// A terminal size is two 16-bit numbers (struct winsize): larger values
// would wrap around in the agent's ioctl, so they are ignored like any
// other malformed frame.
func parseResize(data []byte) (cols, rows uint32, ok bool) {
	var c ptyControl
	if json.Unmarshal(data, &c) != nil || c.Type != "resize" {
		return 0, 0, false
	}
	if c.Cols == 0 || c.Rows == 0 || c.Cols > math.MaxUint16 || c.Rows > math.MaxUint16 {
		return 0, 0, false
	}
	return c.Cols, c.Rows, true
}

// truncateReason keeps a websocket close reason within its 123-byte limit
// and valid UTF-8 (RFC 6455 7.4: a peer may fail a connection whose close
// reason is not): the cut never splits a character, and bytes that are
// not UTF-8 become U+FFFD first.
func truncateReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= 120 {
		return s
	}
	n := 120
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
