package mcpserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

// testService serves /mcp with users authenticated by key ("key-<user>").
func testService(t *testing.T) (*HTTP, *httptest.Server) {
	t.Helper()
	verify := func(key string) (string, error) {
		user, ok := strings.CutPrefix(key, "key-")
		if !ok {
			return "", errors.New("bad key")
		}
		return user, nil
	}
	h := NewHTTP(HTTPConfig{
		NewClient: func(key, host string) (*client.Client, error) { return client.New("http://127.0.0.1:1") },
		Verify:    verify,
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := verify(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if err != nil {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		h.ServeMCP(w, r, user)
	}))
	t.Cleanup(func() { srv.Close(); h.Close() })
	return h, srv
}

type keyRT struct{ key string }

func (k keyRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return http.DefaultTransport.RoundTrip(r)
}

func connect(t *testing.T, url, key string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: keyRT{key}}, MaxRetries: -1}, nil)
}

func TestSessionsPerUserBounded(t *testing.T) {
	_, srv := testService(t)
	var open []*mcp.ClientSession
	defer func() {
		for _, cs := range open {
			cs.Close()
		}
	}()
	for i := 0; i < MaxSessionsPerUser; i++ {
		cs, err := connect(t, srv.URL, "key-alice")
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		open = append(open, cs)
	}
	if cs, err := connect(t, srv.URL, "key-alice"); err == nil || !strings.Contains(err.Error(), "too many MCP sessions") {
		if cs != nil {
			cs.Close()
		}
		t.Fatalf("session %d: %v, want a refusal", MaxSessionsPerUser+1, err)
	}
	// Another user is not affected; an ended session frees a place.
	bob, err := connect(t, srv.URL, "key-bob")
	if err != nil {
		t.Fatalf("bob: %v", err)
	}
	bob.Close()
	open[0].Close()
	open = open[1:]
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs, err := connect(t, srv.URL, "key-alice")
		if err == nil {
			open = append(open, cs)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no place after a session ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSessionServedOnlyToItsUser(t *testing.T) {
	_, srv := testService(t)
	cs, err := connect(t, srv.URL, "key-alice")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// Bob replays alice's session id.
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer key-bob")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob with alice's session id: %d, want 403", resp.StatusCode)
	}
	// Alice herself still can.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Errorf("alice: %v", err)
	}
}
