package agentscope

import (
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/httpapi"
)

// Exact texts of agentscope's sandbox server, which clients may match.
const (
	detailAuthRequired = "Authentication required"
	detailAuthInvalid  = "Invalid authentication credentials"
)

// authenticate returns the user of the request's bearer key, or writes
// agentscope's 401 and returns ok=false. With no key configured auth is
// off and everyone is the default user, as with the native API.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (user string, ok bool) {
	if len(s.cfg.APIKeys) == 0 {
		httpapi.SetUser(r, httpapi.DefaultUser)
		return httpapi.DefaultUser, true
	}
	token, present := bearer(r)
	if !present {
		unauthorized(w, detailAuthRequired)
		return "", false
	}
	user, err := httpapi.UserForKey(s.cfg.APIKeys, token)
	if err != nil {
		unauthorized(w, detailAuthInvalid)
		return "", false
	}
	httpapi.SetUser(r, user)
	return user, true
}

// bearer extracts the credentials of an "Authorization: Bearer x" header.
// Like FastAPI's HTTPBearer, another scheme or an empty token counts as no
// credentials at all.
func bearer(r *http.Request) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	writeJSON(w, http.StatusUnauthorized, map[string]string{"detail": detail})
}
