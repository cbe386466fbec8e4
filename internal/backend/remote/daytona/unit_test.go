package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		class  sandbox.Class
		is     error
	}{
		{404, sandbox.ClassNotFound, nil},
		{409, sandbox.ClassConflict, nil},
		{400, sandbox.ClassInvalid, nil},
		{429, sandbox.ClassQuota, ErrRateLimited},
		{401, sandbox.ClassUnavailable, nil},
		{502, sandbox.ClassUnavailable, ErrProviderDown},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Retry-After": {"7"}}}
		err := classify("daytona", resp, "why")
		if sandbox.ClassOf(err) != tc.class || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("HTTP %d: %v (class %s)", tc.status, err, sandbox.ClassOf(err))
		}
		if tc.status == 429 && !strings.Contains(err.Error(), "retry in 7s") {
			t.Errorf("429 does not say when to retry: %v", err)
		}
	}
}

// The list filter is Daytona's labels JSON; both answer shapes (the
// paginated object with a cursor, the plain array) are read; the key goes
// as a bearer token and nowhere else.
func TestListWire(t *testing.T) {
	const key = "dtn_secret"
	calls := 0
	plain := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.Header.Get("Authorization") != "Bearer "+key || strings.Contains(r.URL.String(), key) {
			t.Errorf("key not (only) in Authorization: %s", r.URL)
		}
		var labels map[string]string
		if err := json.Unmarshal([]byte(r.URL.Query().Get("labels")), &labels); err != nil || labels[LabelNode] != "node a/b" {
			t.Errorf("labels filter %q: %v", r.URL.Query().Get("labels"), err)
		}
		switch {
		case plain:
			_, _ = w.Write([]byte(`[{"id":"r3","labels":{}}]`))
		case r.URL.Query().Get("cursor") == "":
			_, _ = w.Write([]byte(`{"items":[{"id":"r1","labels":{}}],"nextCursor":"c2"}`))
		default:
			_, _ = w.Write([]byte(`{"items":[{"id":"r2","labels":{}}],"nextCursor":null}`))
		}
	}))
	defer srv.Close()
	a := &api{base: srv.URL, key: key, provider: "daytona", http: srv.Client()}
	got, err := a.list(context.Background(), map[string]string{LabelNode: "node a/b"})
	if err != nil || len(got) != 2 || calls != 2 {
		t.Fatalf("list: %+v %v (%d calls)", got, err, calls)
	}
	plain = true
	if got, err := a.list(context.Background(), map[string]string{LabelNode: "node a/b"}); err != nil || len(got) != 1 || got[0].ID != "r3" {
		t.Fatalf("plain list: %+v %v", got, err)
	}
	srv.Close()
	if _, err := a.list(context.Background(), map[string]string{LabelNode: "x"}); !errors.Is(err, ErrProviderDown) || strings.Contains(err.Error(), key) {
		t.Fatalf("provider down: %v", err)
	}
}

// A command's words reach the provider's shell as they were.
func TestShellQuote(t *testing.T) {
	words := []string{"printf", "%s|", "a b", "it's", "", "$HOME", "x;y", "ok-1.2"}
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, shellQuote(w))
	}
	out, err := exec.Command("/bin/sh", "-c", strings.Join(quoted, " ")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "a b|it's||$HOME|x;y|ok-1.2|"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}
