package e2b

import (
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/httpapi"
)

// The front end is a door of the shared server (httpapi.PortDoor): its
// control-plane routes, its data plane for the sandbox ports of its
// protocol, its error shape for requests the browser guard refuses.
var _ httpapi.PortDoor = (*Server)(nil)

// controlPrefixes are the path trees of E2B's control plane.
var controlPrefixes = []string{"/sandboxes", "/v2/sandboxes", "/events/sandboxes", "/events/webhooks", "/v2/templates/", "/v3/templates", "/templates",
	"/volumes", "/volumecontent", "/snapshots"}

// Owns reports whether r is for E2B's control plane, whose refusals the
// SDKs read in E2B's shape.
func (s *Server) Owns(r *http.Request) bool {
	p := r.URL.Path
	for _, prefix := range controlPrefixes {
		if p == prefix || strings.HasPrefix(p, prefix+"/") || (strings.HasSuffix(prefix, "/") && strings.HasPrefix(p, prefix)) {
			return true
		}
	}
	return false
}

// WriteRefusal answers a refused request as E2B does: {code, message}.
func (s *Server) WriteRefusal(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

// Bodies: the signed /files upload of the SDKs' upload URLs is multipart;
// the Volume SDK's makeDir (POST /volumecontent/{id}/dir) sends no body,
// and needs an Authorization header a page cannot send unprompted.
func (s *Server) Bodies() []httpapi.BodyRule {
	return []httpapi.BodyRule{{MediaType: "multipart/form-data", Match: IsSignedUpload}, {Match: isVolumeMakeDir}}
}

func isVolumeMakeDir(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/volumecontent/") && strings.HasSuffix(r.URL.Path, "/dir")
}

// Close does nothing: the front end holds nothing beyond its requests.
func (s *Server) Close() error { return nil }
