package daemon

import (
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
)

// AuthHeader is on every answer of a keyless server: "off". A client can
// tell that the key it sent was not checked.
const AuthHeader = "Agentbox-Auth"

// keylessNotice marks a keyless server's answers (AuthHeader: off) and,
// when a request carries an API key, adds a Warning saying it was not
// checked, and logs that once. A keyless server does not refuse such
// requests: E2B's SDK cannot send none (it requires E2B_API_KEY), and
// agentscope's clients send theirs when configured, so refusing would lock
// the unmodified SDKs out of a local server. Keyless servers only listen on
// loopback (Run refuses otherwise).
func keylessNotice(next http.Handler, log *slog.Logger) http.Handler {
	var logged atomic.Bool
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set(AuthHeader, "off")
		if carriesKey(r) {
			h.Add("Warning", `299 agentbox "authentication is off on this server: the API key sent was not checked"`)
			if logged.CompareAndSwap(false, true) {
				log.Warn("a client sent an API key, but this server has none configured: authentication is off and the key is not checked (set BEARER_TOKEN or API_KEYS to check keys)",
					"remote", r.RemoteAddr, "path", r.URL.Path)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// carriesKey reports whether r carries an API key the way one of the
// front ends takes it: a bearer token (native, agentscope) or X-API-Key
// (E2B).
func carriesKey(r *http.Request) bool {
	if strings.TrimSpace(r.Header.Get("X-API-Key")) != "" {
		return true
	}
	a := r.Header.Get("Authorization")
	return len(a) > 7 && strings.EqualFold(a[:7], "bearer ") && strings.TrimSpace(a[7:]) != ""
}
