package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/client"
)

// hostileDevTools serves /v1/sandboxes/sb1/cdp as sandbox code that stands
// in for Chromium could: it answers browser_open's commands, and while
// Page.navigate is pending it floods events (each with a method of its
// own, flood of them, size bytes each) and then one message of big bytes.
// flooded is closed once the flood is written; the navigation's answer
// waits for proceed.
func hostileDevTools(t *testing.T, flood, size, big int, flooded, proceed chan struct{}) *httptest.Server {
	pad := strings.Repeat("x", size)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sb1/cdp" {
			http.NotFound(w, r)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		send := func(v any) error {
			data, _ := json.Marshal(v)
			return ws.Write(ctx, websocket.MessageText, data)
		}
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var m struct {
				ID     int    `json:"id"`
				Method string `json:"method"`
			}
			_ = json.Unmarshal(data, &m)
			var result any = map[string]any{}
			switch m.Method {
			case "Target.getTargets":
				result = map[string]any{"targetInfos": []any{map[string]any{"targetId": "p1", "type": "page"}}}
			case "Target.attachToTarget":
				result = map[string]any{"sessionId": "s1"}
			case "Page.navigate":
				for i := 0; i < flood; i++ {
					if send(map[string]any{"method": fmt.Sprintf("Flood.%d.%s", i, pad), "sessionId": "s1"}) != nil {
						return
					}
				}
				if big > 0 {
					_ = send(map[string]any{"method": "Big." + strings.Repeat("y", big), "sessionId": "s1"})
				}
				close(flooded)
				<-proceed
				result = map[string]any{"loaderId": ""}
			case "Runtime.evaluate":
				result = map[string]any{"result": map[string]any{"value": []string{"title", "http://example.invalid/"}}}
			}
			if send(map[string]any{"id": m.ID, "result": result}) != nil {
				return
			}
		}
	}))
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSecurityBrowserOpenBoundsDevToolsMemory: browser_open reads what the
// sandbox's DevTools endpoint sends, and in the daemon (/mcp) that is the
// daemon's memory. Sandbox code posing as Chromium must not make it hold
// what it sends: events nobody waits for are not kept, and a message far
// larger than any answer browser_open needs is refused, not buffered.
func TestSecurityBrowserOpenBoundsDevToolsMemory(t *testing.T) {
	t.Run("events are not kept", func(t *testing.T) {
		flooded, proceed := make(chan struct{}), make(chan struct{})
		srv := hostileDevTools(t, 160, 1<<20, 0, flooded, proceed)
		defer srv.Close()
		c, err := client.New(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		s := New().NewSession(c, SessionOptions{Sandbox: "sb1"})
		before := heapInUse()
		done := make(chan *Result, 1)
		go func() {
			res, err := s.Call(context.Background(), "browser_open", json.RawMessage(`{"url": "http://example.invalid/"}`))
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		select {
		case <-flooded:
		case <-time.After(time.Minute):
			t.Fatal("the flood was not read")
		}
		time.Sleep(200 * time.Millisecond) // the last events in flight
		grown := int64(heapInUse()) - int64(before)
		close(proceed)
		res := <-done
		if grown > 48<<20 {
			t.Errorf("browser_open holds %d MiB of the %d MiB of events the sandbox sent", grown>>20, 160)
		}
		if res == nil || res.IsError {
			t.Errorf("browser_open after the flood: %+v", res)
		}
	})
	t.Run("a huge message is refused", func(t *testing.T) {
		flooded, proceed := make(chan struct{}), make(chan struct{})
		close(proceed)
		srv := hostileDevTools(t, 0, 0, 48<<20, flooded, proceed)
		defer srv.Close()
		c, err := client.New(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		s := New().NewSession(c, SessionOptions{Sandbox: "sb1"})
		res, err := s.Call(context.Background(), "browser_open", json.RawMessage(`{"url": "http://example.invalid/"}`))
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			t.Errorf("browser_open read a 48 MiB DevTools message: %s", res.Text())
		}
	})
}
