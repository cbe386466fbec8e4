package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestIndexHeaders(t *testing.T) {
	rec := httptest.NewRecorder()
	Index(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	h := rec.Header()
	if h.Get("Content-Security-Policy") != CSP || !strings.Contains(CSP, "script-src 'self';") || !strings.Contains(CSP, "default-src 'none'") {
		t.Errorf("CSP %q", h.Get("Content-Security-Policy"))
	}
	for k, v := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
		"Cache-Control": "no-store", "Content-Type": "text/html; charset=utf-8"} {
		if h.Get(k) != v {
			t.Errorf("%s: %q, want %q", k, h.Get(k), v)
		}
	}
	body := rec.Body.String()
	if Built() {
		if !strings.Contains(body, AssetPrefix) {
			t.Errorf("the built page does not load its assets from %s", AssetPrefix)
		}
	} else if !strings.Contains(body, "Run <code>make build</code>") {
		t.Errorf("the not-built page does not say what to do: %s", body)
	}
}

func TestAssetRefusals(t *testing.T) {
	for _, p := range []string{"/console-assets/nope.js", "/console-assets/../index.html", "/console-assets/%2e%2e/README.md", "/console-assets/"} {
		rec := httptest.NewRecorder()
		Asset(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, rec.Code)
		}
		if rec.Header().Get("Content-Security-Policy") != CSP {
			t.Errorf("%s: no CSP", p)
		}
	}
}

// TestNotBuilt serves the page of a binary built without the console (a
// plain go build): it says how to build it, with the same headers.
func TestNotBuilt(t *testing.T) {
	saved := dist
	dist = nil
	defer func() { dist = saved }()
	rec := httptest.NewRecorder()
	Index(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "Run <code>make build</code>") {
		t.Errorf("%d %s", rec.Code, rec.Body.String())
	}
	if rec.Header().Get("Content-Security-Policy") != CSP {
		t.Error("no CSP on the not-built page")
	}
	rec = httptest.NewRecorder()
	Asset(rec, httptest.NewRequest("GET", "/console-assets/index.js", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("asset without a build: %d", rec.Code)
	}
}
