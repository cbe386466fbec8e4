package httpapi

import (
	"crypto/subtle"
	"net/http"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// metricsHandler serves /metrics to the operator only. Metrics describe the
// whole server (every tenant's sandboxes, request rates, pools), so a
// tenant's API key does not open them: with METRICS_TOKEN set that token is
// required; without it a server with API keys refuses everyone, and a
// keyless server (loopback only, behind the browser guard) serves them.
func (s *Server) metricsHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.authorizeMetrics(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentbox-metrics"`)
			writeError(w, r, err)
			return
		}
		SetUser(r, "metrics")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) authorizeMetrics(r *http.Request) error {
	tok := bearerToken(r)
	switch {
	case s.cfg.MetricsToken != "":
		if tok == "" {
			return sandbox.Errorf(sandbox.ClassUnauth, "missing metrics token (Authorization: Bearer <METRICS_TOKEN>)")
		}
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.MetricsToken)) != 1 {
			return sandbox.Errorf(sandbox.ClassForbidden, "/metrics needs the operator's METRICS_TOKEN, not an API key")
		}
	case len(s.cfg.APIKeys) > 0:
		return sandbox.Errorf(sandbox.ClassForbidden, "/metrics is for the operator: set METRICS_TOKEN to read it")
	}
	return nil
}
