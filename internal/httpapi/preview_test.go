package httpapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// portBackend is the fake backend with sandbox ports: every sandbox's port
// P is ports[P], a listener of the test.
type portBackend struct {
	*fake.Backend
	ports map[int]string
}

func (b portBackend) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	addr, ok := b.ports[port]
	if !ok {
		return nil, fmt.Errorf("nothing listens on port %d", port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// silentPort accepts connections and never answers: each stays open,
// unread, until the test ends. accepted counts them.
type silentPort struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted chan struct{}
}

func newSilentPort(t *testing.T) *silentPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentPort{ln: ln, accepted: make(chan struct{}, 64)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			p.accepted <- struct{}{}
		}
	}()
	t.Cleanup(p.close)
	return p
}

// close ends every connection it holds (the previews waiting on them fail).
func (p *silentPort) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// previewServer is an API over the fake backend whose sandboxes' port 8000
// never answers and port 8001 streams (its headers at once, its body in
// two pieces, the second after wait).
func previewServer(t *testing.T, cfg Config, wait time.Duration) (*httptest.Server, *manager.Manager, *silentPort) {
	t.Helper()
	silent := newSilentPort(t)
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second")
	}))
	t.Cleanup(stream.Close)
	fb := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { fb.Close() })
	b := portBackend{Backend: fb, ports: map[int]string{8000: silent.ln.Addr().String(), 8001: stream.Listener.Addr().String()}}
	m := manager.New(manager.Config{}, b, store.NewMemory())
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	hs := httptest.NewServer(New(cfg, m).Handler())
	t.Cleanup(hs.Close)
	// Before the server's close, which waits for the previews held there.
	t.Cleanup(silent.close)
	return hs, m, silent
}

// previewGet fetches url with the header pairs hdr, bounded by limit.
func previewGet(ctx context.Context, url string, limit time.Duration, hdr ...string) (int, http.Header, string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, nil, "", err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body), err
}

// A user's previews in flight are bounded (PREVIEW_MAX_PER_USER): with its
// previews waiting on a port that never answers, the user's next preview
// is refused at once with 429 and Retry-After, whichever credential it
// carries, while another user's preview is served; once they end, the user
// is served again.
func TestSecurityPreviewPerUser(t *testing.T) {
	hs, m, silent := previewServer(t, Config{APIKeys: map[string]string{"ka": "alice", "kb": "bob"},
		PreviewMaxPerUser: 2, PreviewHeaderTimeout: time.Minute}, 0)
	ctx := context.Background()
	a, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, "bob", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	port := func(id sandbox.ID, p int) string { return fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d/", hs.URL, id, p) }

	waiting := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, _, err := previewGet(ctx, port(a.ID, 8000), time.Minute, "Authorization", "Bearer ka")
			waiting <- err
		}()
	}
	for i := range 2 {
		select {
		case <-silent.accepted:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of alice's 2 previews reached the sandbox's port", i)
		}
	}
	for name, hdr := range map[string][]string{"API key": {"Authorization", "Bearer ka"}, "access token": {"X-Access-Token", a.AccessToken}} {
		code, h, body, err := previewGet(ctx, port(a.ID, 8001), 10*time.Second, hdr...)
		if err != nil || code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(body, "PREVIEW_MAX_PER_USER") {
			t.Fatalf("alice's third preview (%s), two waiting: %d %q Retry-After %q %v; want 429 at once", name, code, body, h.Get("Retry-After"), err)
		}
	}
	if code, _, body, err := previewGet(ctx, port(b.ID, 8001), 10*time.Second, "Authorization", "Bearer kb"); err != nil || code != http.StatusOK || body != "first second" {
		t.Fatalf("bob's preview while alice is at her limit: %d %q %v", code, body, err)
	}
	silent.close()
	for range 2 {
		if err := <-waiting; err != nil {
			t.Fatalf("alice's waiting preview: %v", err)
		}
	}
	if code, _, body, err := previewGet(ctx, port(a.ID, 8001), 10*time.Second, "Authorization", "Bearer ka"); err != nil || code != http.StatusOK || body != "first second" {
		t.Fatalf("alice's preview once hers ended: %d %q %v", code, body, err)
	}
}

// A preview of a port that does not answer fails with 504 after
// PREVIEW_HEADER_TIMEOUT; a response whose headers came in time streams on
// for as long as it takes, past that timeout.
func TestSecurityPreviewHeaderTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	hs, m, silent := previewServer(t, Config{PreviewHeaderTimeout: timeout}, 3*timeout)
	ctx := context.Background()
	sb, err := m.Create(ctx, "alice", manager.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	url := func(p int) string { return fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d/", hs.URL, sb.ID, p) }
	code, _, body, err := previewGet(ctx, url(8000), 30*time.Second, "X-Access-Token", sb.AccessToken)
	if err != nil || code != http.StatusGatewayTimeout || !strings.Contains(body, "PREVIEW_HEADER_TIMEOUT") {
		t.Fatalf("preview of a port that never answers: %d %q %v; want 504 after %s", code, body, err, timeout)
	}
	if len(silent.accepted) != 1 {
		t.Fatalf("the silent port accepted %d connections, want 1", len(silent.accepted))
	}
	code, _, body, err = previewGet(ctx, url(8001), 30*time.Second, "X-Access-Token", sb.AccessToken)
	if err != nil || code != http.StatusOK || body != "first second" {
		t.Fatalf("a stream longer than the header timeout: %d %q %v", code, body, err)
	}
}
