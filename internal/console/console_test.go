package console

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
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

// TestAssets serves a build's assets, gzipped for clients that take it,
// with the console's headers, and nothing outside the build.
func TestAssets(t *testing.T) {
	saved := dist
	defer func() { dist = saved }()
	script := strings.Repeat("console.log('agentbox');\n", 200)
	dist = fstest.MapFS{
		"index.html":                  {Data: []byte(`<script type="module" src="/console-assets/index-abc.js"></script>`)},
		"console-assets/index-abc.js": {Data: []byte(script)},
		"console-assets/small.css":    {Data: []byte("body{}")},
	}
	get := func(path, enc string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		rec := httptest.NewRecorder()
		Asset(rec, req)
		return rec
	}
	rec := get("/console-assets/index-abc.js", "")
	if rec.Code != 200 || rec.Body.String() != script || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/javascript") ||
		rec.Header().Get("Content-Encoding") != "" || rec.Header().Get("Content-Security-Policy") != CSP {
		t.Errorf("plain: %d %v", rec.Code, rec.Header())
	}
	if !strings.Contains(rec.Header().Get("Cache-Control"), "immutable") {
		t.Errorf("cache: %q", rec.Header().Get("Cache-Control"))
	}
	for range 2 { // the second answer comes from the cache
		rec = get("/console-assets/index-abc.js", "br, gzip;q=0.8")
		if rec.Header().Get("Content-Encoding") != "gzip" || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/javascript") {
			t.Fatalf("gzip: %v", rec.Header())
		}
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(zr)
		if string(b) != script || rec.Body.Len() >= len(script)/4 {
			t.Errorf("gzipped body: %d bytes, unpacks to %d", rec.Body.Len(), len(b))
		}
	}
	if rec := get("/console-assets/index-abc.js", "gzip;q=0"); rec.Header().Get("Content-Encoding") != "" {
		t.Error("gzip;q=0 got gzip")
	}
	if rec := get("/console-assets/small.css", "gzip"); rec.Header().Get("Content-Encoding") != "" || rec.Body.String() != "body{}" {
		t.Errorf("small asset: %v %q", rec.Header(), rec.Body)
	}
	for _, p := range []string{"/console-assets/index.html", "/index.html", "/console-assets/../index.html"} {
		if rec := get(p, ""); rec.Code != 404 {
			t.Errorf("%s: %d", p, rec.Code)
		}
	}
	rec = httptest.NewRecorder()
	Index(rec, httptest.NewRequest("GET", "/", nil))
	if !strings.Contains(rec.Body.String(), "/console-assets/index-abc.js") {
		t.Errorf("index: %s", rec.Body)
	}
}
