package e2b

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
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
		{403, sandbox.ClassUnavailable, nil},
		{502, sandbox.ClassUnavailable, ErrProviderDown},
		{418, sandbox.ClassUnavailable, nil},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Retry-After": {"7"}}}
		err := classify("e2b", resp, "why")
		if sandbox.ClassOf(err) != tc.class || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("HTTP %d: %v (class %s)", tc.status, err, sandbox.ClassOf(err))
		}
		if tc.status == 429 && !strings.Contains(err.Error(), "retry in 7s") {
			t.Errorf("429 does not say when to retry: %v", err)
		}
	}
}

// The list filter is what E2B's SDKs send: metadata as one parameter of
// escaped k=v pairs, pages followed by X-Next-Token; the key goes as
// X-API-Key and nowhere else.
func TestListWire(t *testing.T) {
	const key = "e2b_secret"
	pages := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != key || strings.Contains(r.URL.String(), key) {
			t.Errorf("key not (only) in X-API-Key: %s", r.URL)
		}
		md, err := url.ParseQuery(r.URL.Query().Get("metadata"))
		if err != nil || md.Get(LabelNode) != "node a/b" {
			t.Errorf("metadata filter %q: %v", r.URL.Query().Get("metadata"), err)
		}
		pages++
		if r.URL.Query().Get("nextToken") == "" {
			w.Header().Set("X-Next-Token", "p2")
			_, _ = w.Write([]byte(`[{"sandboxID":"r1","metadata":{}}]`))
			return
		}
		_, _ = w.Write([]byte(`[{"sandboxID":"r2","metadata":{}}]`))
	}))
	defer srv.Close()
	a := &api{base: srv.URL, key: key, provider: "e2b", http: srv.Client()}
	got, err := a.list(context.Background(), map[string]string{LabelNode: "node a/b"})
	if err != nil || len(got) != 2 || pages != 2 {
		t.Fatalf("list: %+v %v (%d pages)", got, err, pages)
	}
	srv.Close()
	if _, err := a.list(context.Background(), map[string]string{LabelNode: "x"}); !errors.Is(err, ErrProviderDown) || strings.Contains(err.Error(), key) {
		t.Fatalf("provider down: %v", err)
	}
}
