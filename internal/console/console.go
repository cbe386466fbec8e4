// Package console serves the web console: a single-page app built from
// web/console by `make build` (npm, vite) into static/dist and embedded in
// the daemon. The build output is not committed; a binary built without it
// (a plain `go build`) serves a page that says how to build the console.
//
// The console holds no data: it is a static shell that calls the /v1 API
// with the key its user typed (kept in the tab's sessionStorage), so every
// route here is public and every answer is the same for everyone.
package console

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

// dist is the built console, nil when the binary was built without it.
var dist = func() fs.FS {
	sub, err := fs.Sub(static, "static/dist")
	if err != nil {
		return nil
	}
	if _, err := fs.Stat(sub, "index.html"); err != nil {
		return nil
	}
	return sub
}()

// Built reports whether the console's assets are in this binary.
func Built() bool { return dist != nil }

// AssetPrefix is where the built assets are served (vite's assetsDir).
const AssetPrefix = "/console-assets/"

// CSP is the Content-Security-Policy of every console response: scripts,
// styles, images and connections only from the daemon itself, frames only
// of the daemon's own pages (the sandbox page embeds the desktop page of
// a signed desktop link), no forms, no plugins, and the console itself
// framed by nobody. Styles also allow inline ones: the terminal
// (xterm.js) writes its theme into a <style> element it creates; scripts
// never run inline.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; manifest-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// secure sets the headers every console response carries.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), clipboard-read=(self), clipboard-write=(self)")
}

// Index serves the console's page (GET /).
func Index(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	w.Header().Set("Cache-Control", "no-store")
	if dist == nil {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(notBuilt))
		return
	}
	b, err := fs.ReadFile(dist, "index.html")
	if err != nil {
		http.Error(w, "console index missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// Asset serves one built file under AssetPrefix. Names are vite's hashed
// file names, so they are cached for good.
func Asset(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	name := strings.TrimPrefix(r.URL.Path, "/")
	if dist == nil || name != path.Clean(name) || strings.Contains(name, "..") || !strings.HasPrefix("/"+name, AssetPrefix) {
		http.NotFound(w, r)
		return
	}
	if _, err := fs.Stat(dist, name); err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.Header().Add("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		if gz, ok := gzipped(name); ok {
			w.Header().Set("Content-Encoding", "gzip")
			if ct := contentType(name); ct != "" {
				w.Header().Set("Content-Type", ct)
			}
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(gz))
			return
		}
	}
	http.ServeFileFS(w, r, dist, name) //nolint:gosec // G703: name is a path inside the embedded console assets (an fs.FS cannot leave them)
}

// gzCache holds each asset compressed once (they never change in a
// binary): the script is about 370 KiB, 100 KiB gzipped.
var gzCache sync.Map // name → []byte

// minGzip is the size under which an asset is served as it is.
const minGzip = 1024

func gzipped(name string) ([]byte, bool) {
	if v, ok := gzCache.Load(name); ok {
		return v.([]byte), true
	}
	raw, err := fs.ReadFile(dist, name)
	if err != nil || len(raw) < minGzip {
		return nil, false
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(raw); err != nil || zw.Close() != nil {
		return nil, false
	}
	gzCache.Store(name, buf.Bytes())
	return buf.Bytes(), true
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	}
	return ""
}

// acceptsGzip reports whether the request's Accept-Encoding names gzip
// without q=0.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(name), "gzip") {
				q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
				return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
			}
		}
	}
	return false
}

const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentbox console not built</title></head>
<body><main><h1>agentbox console not built</h1>
<p>This daemon was compiled without the web console's assets. Run <code>make build</code>
(it builds the console with npm, then the daemon) and start the daemon again.</p>
<p>The API is served as usual under <code>/v1</code>.</p></main></body></html>
`
