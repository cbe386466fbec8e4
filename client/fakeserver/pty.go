package fakeserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"
)

// pty is a fake terminal: it greets with "pty COLSxROWS CMD\r\n", echoes
// input, answers a resize with "resized COLSxROWS\r\n", on input
// containing "flood N" sends N bytes of 'x', and on input containing
// "exit N" sends the exit message with code N and closes.
func (s *Server) pty(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	cols, rows := atoiOr(q.Get("cols"), 80), atoiOr(q.Get("rows"), 24)
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer ws.CloseNow()
	ctx := r.Context()
	greeting := fmt.Sprintf("pty %dx%d %s\r\n", cols, rows, cmp(q.Get("cmd"), "bash -l"))
	if ws.Write(ctx, websocket.MessageBinary, []byte(greeting)) != nil {
		return
	}
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText {
			var m struct {
				Type       string `json:"type"`
				Cols, Rows int
			}
			if json.Unmarshal(data, &m) == nil && m.Type == "resize" {
				s.mu.Lock()
				s.resizes = append(s.resizes, [2]int{m.Cols, m.Rows})
				s.mu.Unlock()
				msg := fmt.Sprintf("resized %dx%d\r\n", m.Cols, m.Rows)
				if ws.Write(ctx, websocket.MessageBinary, []byte(msg)) != nil {
					return
				}
			}
			continue
		}
		if _, after, ok := strings.Cut(string(data), "flood "); ok {
			// Output faster than a client reads it: n bytes of 'x'.
			n := atoiOr(strings.TrimSpace(after), 0)
			chunk := []byte(strings.Repeat("x", 32<<10))
			for ; n > 0; n -= len(chunk) {
				if ws.Write(ctx, websocket.MessageBinary, chunk[:min(n, len(chunk))]) != nil {
					return
				}
			}
			continue
		}
		if _, after, ok := strings.Cut(string(data), "exit "); ok {
			code := atoiOr(strings.TrimSpace(after), 0)
			exit, _ := json.Marshal(map[string]any{"type": "exit", "exit_code": code})
			if ws.Write(ctx, websocket.MessageText, exit) == nil {
				_ = ws.Close(websocket.StatusNormalClosure, "")
			}
			return
		}
		if ws.Write(ctx, websocket.MessageBinary, data) != nil {
			return
		}
	}
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}
