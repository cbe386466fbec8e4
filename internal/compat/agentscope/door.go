package agentscope

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/httpapi"
)

var _ httpapi.Door = (*Server)(nil)

// Owns claims every request: agentscope's manager methods are POST
// /{method} for any name at the root, so FastAPI's {"detail"} is the
// shape of every path outside the native API and the doors with trees of
// their own. Mount it after those doors.
func (s *Server) Owns(*http.Request) bool { return true }

// WriteRefusal answers a refused request in FastAPI's shape {"detail"}.
func (s *Server) WriteRefusal(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	writeDetail(w, status, msg)
}

// Bodies: the sandbox API's batch upload is multipart (IsMultipartUpload).
func (s *Server) Bodies() []httpapi.BodyRule {
	return []httpapi.BodyRule{{MediaType: "multipart/form-data", Match: IsMultipartUpload}}
}
