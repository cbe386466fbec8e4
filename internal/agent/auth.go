package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// authorize enforces the access token on everything but GET /health.
// Rejections use the caller's protocol: a connect/gRPC error for RPC
// requests, a JSON error body with HTTP 401 for REST.
func (s *Server) authorize(next http.Handler) http.Handler {
	if s.cfg.AccessToken == "" {
		return next
	}
	// Comparing digests keeps the comparison constant-time even when the
	// lengths differ.
	want := sha256.Sum256([]byte(s.cfg.AccessToken))
	errWriter := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && r.Method == http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		got := sha256.Sum256([]byte(r.Header.Get("X-Access-Token")))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		err := errors.New("missing or invalid X-Access-Token")
		if isRPCPath(r.URL.Path) && errWriter.IsSupported(r) {
			_ = errWriter.Write(w, r, connect.NewError(connect.CodeUnauthenticated, err))
			return
		}
		writeError(w, http.StatusUnauthorized, err.Error())
	})
}

// isRPCPath reports whether path names an RPC procedure
// ("/package.Service/Method"): the first segment of every Connect and gRPC
// route has a dot, REST routes (/files, /execute, ...) have none.
func isRPCPath(path string) bool {
	svc, _, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return ok && strings.Contains(svc, ".")
}
