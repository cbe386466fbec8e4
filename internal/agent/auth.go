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
	if s.cfg.AccessToken != "" {
		// Comparing digests keeps the comparison constant-time even when
		// the lengths differ.
		want := sha256.Sum256([]byte(s.cfg.AccessToken))
		s.token.Store(&want)
		start := want
		s.startToken = &start
	}
	errWriter := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := s.token.Load()
		// The reset routes check the host's control token instead: the
		// sandbox's user holds the access token.
		if want == nil || r.URL.Path == "/health" && r.Method == http.MethodGet || s.reset != nil && strings.HasPrefix(r.URL.Path, "/reset/") {
			next.ServeHTTP(w, r)
			return
		}
		got := sha256.Sum256([]byte(r.Header.Get("X-Access-Token")))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		if host, _ := r.Context().Value(hostConn{}).(bool); host && s.startToken != nil &&
			subtle.ConstantTimeCompare(got[:], s.startToken[:]) == 1 {
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

// setAccessToken replaces the access token (POST /init, by a caller that
// holds the current one): a sandbox handed out from a warm pool whose
// agents all started with the pool's token gets a token of its own, and
// the pool's stops working for it. Requests already admitted finish.
func (s *Server) setAccessToken(token string) {
	d := sha256.Sum256([]byte(token))
	s.token.Store(&d)
}

// isRPCPath reports whether path names an RPC procedure
// ("/package.Service/Method"): the first segment of every Connect and gRPC
// route has a dot, REST routes (/files, /execute, ...) have none.
func isRPCPath(path string) bool {
	svc, _, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return ok && strings.Contains(svc, ".")
}
