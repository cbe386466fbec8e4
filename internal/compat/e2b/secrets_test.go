package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/store"
)

func testVault(t *testing.T) *secrets.Vault {
	t.Helper()
	v, err := secrets.New(store.NewMemory(), bytes.Repeat([]byte{7}, secrets.KeySize), 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSecretRefs: Secret.fill's placeholder becomes the broker's
// reference, to the name as the caller has it or lower-cased; a name the
// vault cannot hold is refused.
func TestSecretRefs(t *testing.T) {
	ctx := context.Background()
	v := testVault(t)
	if _, _, err := v.Put(ctx, "alice", "API_TOKEN", "x"); err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{Secrets: v}}
	rules := []sandbox.EgressRule{{Host: "api.test", Headers: map[string]string{
		"Authorization": "Bearer ${e2b.secrets.API_TOKEN}",
		"X-Other":       "${e2b.secrets.OpenAI-Key} and ${secret:kept}",
	}}}
	if err := s.secretRefs(ctx, "alice", rules); err != nil {
		t.Fatal(err)
	}
	if got := rules[0].Headers["Authorization"]; got != "Bearer ${secret:API_TOKEN}" {
		t.Errorf("a name the caller has: %q", got)
	}
	if got := rules[0].Headers["X-Other"]; got != "${secret:openai-key} and ${secret:kept}" {
		t.Errorf("a name the caller has not got is lower-cased: %q", got)
	}
	bad := []sandbox.EgressRule{{Host: "api.test", Headers: map[string]string{"A": "${e2b.secrets.has.dots}"}}}
	if err := s.secretRefs(ctx, "alice", bad); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("a name agentbox cannot hold: %v", err)
	}
}

// TestSecretListPages: GET /secrets pages by name with X-Next-Token, and
// shows only the caller's secrets.
func TestSecretListPages(t *testing.T) {
	ctx := context.Background()
	v := testVault(t)
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if _, err := v.Create(ctx, "alice", n, "v-"+n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.Create(ctx, "bob", "bobs", "v", nil); err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{Secrets: v}}
	var names []string
	token := ""
	for range 10 {
		r := httptest.NewRequest("GET", "/secrets?limit=2&nextToken="+token, nil)
		w := httptest.NewRecorder()
		if err := s.listSecrets(w, r, "alice"); err != nil {
			t.Fatal(err)
		}
		var page []secretOut
		if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil || w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		if strings.Contains(w.Body.String(), "v-") {
			t.Fatalf("a value in the list: %s", w.Body)
		}
		for _, p := range page {
			names = append(names, p.Name)
		}
		if token = w.Header().Get("X-Next-Token"); token == "" {
			break
		}
	}
	if strings.Join(names, ",") != "a,b,c,d,e" {
		t.Fatalf("pages: %v", names)
	}
	w := httptest.NewRecorder()
	if err := s.listSecrets(w, httptest.NewRequest("GET", "/secrets?nextToken=not*base64", nil), "alice"); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("a bad token: %v", err)
	}
}
