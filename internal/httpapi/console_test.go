package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecurityConsoleBehindGuard: the console's routes sit behind the
// browser guard like every other family: a keyless server serves its page
// only on loopback names, and a preview origin is refused.
func TestSecurityConsoleBehindGuard(t *testing.T) {
	keyless := New(Config{}, manager.New(manager.Config{}, nil, store.NewMemory()))
	keyed := New(Config{APIKeys: map[string]string{"k": "alice"}, PreviewDomain: "localhost"}, manager.New(manager.Config{}, nil, store.NewMemory()))
	for _, tc := range []struct {
		s            *Server
		host, origin string
		want         int
	}{
		{keyless, "127.0.0.1:8000", "", 200},
		{keyless, "evil.example:8000", "", 403},
		{keyless, "127.0.0.1:8000", "http://evil.example", 403},
		{keyed, "agentbox.example:8000", "", 200},
		{keyed, "agentbox.example:8000", "http://8080-abc.localhost:8000", 403},
	} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		rec := httptest.NewRecorder()
		tc.s.Handler().ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET / host %s origin %q: %d, want %d", tc.host, tc.origin, rec.Code, tc.want)
		}
	}
}

func TestSecurityPTYTickets(t *testing.T) {
	var tk ptyTickets
	tok, exp, err := tk.issue("alice", "sb1")
	if err != nil || len(tok) != 48 || time.Until(exp) > ptyTicketTTL {
		t.Fatalf("issue: %q %v %v", tok, exp, err)
	}
	if _, ok := tk.redeem(tok, "sb2"); ok {
		t.Error("a ticket opened another sandbox")
	}
	if _, ok := tk.redeem(tok, "sb1"); ok {
		t.Error("a ticket tried on the wrong sandbox stayed usable")
	}
	tok, _, _ = tk.issue("alice", "sb1")
	if u, ok := tk.redeem(tok, "sb1"); !ok || u != "alice" {
		t.Errorf("redeem: %q %v", u, ok)
	}
	if _, ok := tk.redeem(tok, "sb1"); ok {
		t.Error("a ticket worked twice")
	}
	// Expired tickets are refused and swept.
	tok, _, _ = tk.issue("alice", "sb1")
	tk.mu.Lock()
	e := tk.m[tok]
	e.expires = time.Now().Add(-time.Second)
	tk.m[tok] = e
	tk.mu.Unlock()
	if _, ok := tk.redeem(tok, "sb1"); ok {
		t.Error("an expired ticket worked")
	}
	// A bounded number outstanding, per user and in all.
	var full ptyTickets
	for i := 0; i < maxUserTickets; i++ {
		if _, _, err := full.issue("alice", "sb1"); err != nil {
			t.Fatalf("ticket %d: %v", i, err)
		}
	}
	if _, _, err := full.issue("alice", "sb1"); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Errorf("ticket over the user's cap: %v", err)
	}
	for i := maxUserTickets; i < maxPTYTickets; i++ {
		if _, _, err := full.issue(fmt.Sprintf("user%d", i), "sb1"); err != nil {
			t.Fatalf("ticket %d: %v", i, err)
		}
	}
	if _, _, err := full.issue("bob", "sb1"); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Errorf("ticket over the server's cap: %v", err)
	}
	// Only the PTY route reads a ticket from the subprotocol header.
	r := httptest.NewRequest("GET", "/v1/sandboxes/sb1/pty", nil)
	r.Header.Set("Sec-WebSocket-Protocol", "agentbox.pty, agentbox.ticket.abc")
	if got := wsTicket(r); got != "abc" {
		t.Errorf("wsTicket: %q", got)
	}
}

// TestOperatorRoutes: pools and the overview are the operator's, and the
// overview shows every tenant's sandboxes with their owner.
func TestOperatorRoutes(t *testing.T) {
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	m := manager.New(manager.Config{MaxPerUser: 7}, b, store.NewMemory())
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	sb, err := m.Create(context.Background(), "alice", manager.CreateRequest{Metadata: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{APIKeys: map[string]string{"op": "ops", "k": "alice"}, TemplateAdmins: []string{"ops"}}, m)
	for _, path := range []string{"/v1/pools", "/v1/admin/overview"} {
		for key, want := range map[string]int{"op": 200, "k": 403, "": 401} {
			req := httptest.NewRequest("GET", path, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != want {
				t.Errorf("GET %s with %q: %d, want %d: %s", path, key, rec.Code, want, rec.Body)
			}
			if want == 403 && !strings.Contains(rec.Body.String(), "permission_denied") {
				t.Errorf("refusal body %s", rec.Body)
			}
			if want == 200 && path == "/v1/admin/overview" {
				var ov struct {
					Ready    bool
					Overview manager.Overview
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &ov); err != nil {
					t.Fatal(err)
				}
				o := ov.Overview
				if !ov.Ready || o.Live != 1 || len(o.Tenants) != 1 || o.Tenants[0].User != "alice" || o.Tenants[0].Running != 1 ||
					len(o.Sandboxes) != 1 || o.Sandboxes[0].ID != sb.ID || o.Sandboxes[0].Owner != "alice" || o.Quotas.MaxPerUser != 7 {
					t.Errorf("overview %+v", ov)
				}
			}
		}
	}
}
