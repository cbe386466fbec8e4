package httpapi

import (
	"errors"
	"net/http"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// admit admits a heavy request (one holding buffers or agent connections
// while it runs) of the caller against the manager's per-user and memory
// limits. bodyLimit > 0 means the handler reads a body of up to that many
// bytes into memory and holds copies of it: a larger declared body is
// refused before anything is read, and the body is charged copies times
// its declared length (twice the limit when the length is unknown, the
// worst case of reading it in growing pieces).
func (s *Server) admit(r *http.Request, bodyLimit, copies int64) (release func(), err error) {
	var bytes int64
	if bodyLimit > 0 {
		if r.ContentLength > bodyLimit {
			return nil, sandbox.Errorf(sandbox.ClassTooLarge, "request body of %d bytes is over the limit of %d bytes", r.ContentLength, bodyLimit)
		}
		bytes = copies * r.ContentLength
		if r.ContentLength < 0 {
			bytes = (copies + 1) * bodyLimit
		}
	}
	return s.m.Admit(userOf(r), bytes)
}

// setRetryAfter adds Retry-After to the answer of a refusal that carries
// one.
func setRetryAfter(w http.ResponseWriter, err error) {
	var ra *manager.RetryAfterError
	if errors.As(err, &ra) {
		w.Header().Set("Retry-After", ra.Seconds())
	}
}
