package daytona

import (
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/httpapi"
)

var _ httpapi.PreviewTokenDoor = (*Server)(nil)

// PreviewTokenHeaders: Daytona's SDK users send getPreviewLink's token in
// X-Daytona-Preview-Token.
func (s *Server) PreviewTokenHeaders() []string { return []string{"X-Daytona-Preview-Token"} }

// Owns claims /api and everything below it: Daytona's SDK reads refusals
// there in Daytona's shape.
func (s *Server) Owns(r *http.Request) bool {
	return r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/")
}

// WriteRefusal answers a refused request as Daytona does.
func (s *Server) WriteRefusal(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeErrorBody(w, r, status, strings.ToUpper(strings.ReplaceAll(http.StatusText(status), " ", "_")), "", msg)
}

// Bodies: uploads are multipart; Daytona's action routes (start, stop,
// folder, move...) are POSTs without a body, which the SDK sends without
// a Content-Type.
func (s *Server) Bodies() []httpapi.BodyRule {
	return []httpapi.BodyRule{
		{MediaType: "multipart/form-data", Match: IsMultipartUpload},
		// The S3 CompleteMultipartUpload of a build context
		// (objectstore.go); its session token header needs a preflight.
		{MediaType: "application/xml", Match: isS3Complete},
		{MediaType: "", Match: s.Owns},
	}
}

// Close ends the sessions' processes.
func (s *Server) Close() error {
	s.sessions.closeAll()
	return nil
}
