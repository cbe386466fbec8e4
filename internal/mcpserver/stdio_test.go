package mcpserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/fakeserver"
)

// TestStdioDestroysSandboxesBeforeReturning: when the client closes stdin,
// RunStdio returns only once the session's sandboxes are destroyed —
// `agentbox mcp` exits right after, so a delete still in flight would be
// lost and the sandbox left running until its timeout. The API answers
// deletes slowly here to widen the window.
func TestStdioDestroysSandboxesBeforeReturning(t *testing.T) {
	fake := fakeserver.New(t)
	target, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	var deletes atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			time.Sleep(300 * time.Millisecond)
			deletes.Add(1)
		}
		proxy.ServeHTTP(w, r)
	})}
	ln := listenLoopback(t)
	go slow.Serve(ln)
	t.Cleanup(func() { slow.Close() })
	c, err := client.New("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		serverIn, clientOut := io.Pipe()
		clientIn, serverOut := io.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		returned := make(chan error, 1)
		go func() {
			returned <- RunStdio(ctx, c, StdioOptions{In: serverIn, Out: serverOut})
			serverOut.Close()
		}()
		mc := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		cs, err := mc.Connect(ctx, &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_create", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			cancel()
			t.Fatalf("sandbox_create: %v %+v", err, res)
		}
		before := deletes.Load()
		clientOut.Close() // stdin EOF, as when the MCP client goes away
		select {
		case err := <-returned:
			if err != nil {
				t.Errorf("run %d: RunStdio: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("run %d: RunStdio did not return after stdin closed", i)
		}
		cancel()
		if deletes.Load() == before {
			t.Fatalf("run %d: RunStdio returned before the session's sandbox was deleted", i)
		}
	}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
