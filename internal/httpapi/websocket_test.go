package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestAcceptWebSocketRefusesInJSON: a request that is not a handshake, or
// a handshake from another origin, is refused with the API's error shape
// (websocket.Accept alone answers text/plain); a handshake is accepted.
func TestAcceptWebSocketRefusesInJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := acceptWebSocket(w, r, &websocket.AcceptOptions{Subprotocols: []string{PTYProtocol}})
		if conn == nil {
			if err != nil {
				writeError(w, r, err)
			}
			return
		}
		conn.Close(websocket.StatusNormalClosure, "bye")
	}))
	defer srv.Close()
	for _, c := range []struct {
		name   string
		header map[string]string
		status int
		code   string
	}{
		{"no upgrade", nil, http.StatusBadRequest, "invalid_argument"},
		{"no key", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}, http.StatusBadRequest, "invalid_argument"},
		{"other origin", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example"}, http.StatusForbidden, "permission_denied"},
	} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e errorBody
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil || e.Code != c.code || e.Message == "" {
			t.Errorf("%s: %d %s %s; want %d %s", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status, c.code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+srv.URL[len("http"):], &websocket.DialOptions{Subprotocols: []string{PTYProtocol}})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	conn.CloseNow()
}
