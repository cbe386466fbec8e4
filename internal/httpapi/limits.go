package httpapi

import (
	"errors"
	"net/http"

	"github.com/agentbox/agentbox/internal/admission"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// admit admits a heavy request that is not about a sandbox (a template
// operation) against the caller's share of the daemon; see bodyWeight.
func (s *Server) admit(r *http.Request, bodyLimit, copies int64) (release func(), err error) {
	bytes, err := bodyWeight(r, bodyLimit, copies)
	if err != nil {
		return nil, err
	}
	return s.m.Admit(userOf(r), bytes)
}

// RootHeader confines the paths of a request to the directories it names
// (repeatable): the sandbox's agent resolves them under those roots,
// symbolic links included, and refuses a path leading out of all of them
// (403 with reason outside_root). Tool kits confine their file tools to
// /workspace this way.
const RootHeader = "Agentbox-Root"

// maxRoots bounds the roots of one request.
const maxRoots = 16

// begin opens the data-plane request of r on the sandbox of its {id}:
// admitted against the caller's share of the daemon (429 beyond it), the
// sandbox the caller's (404 otherwise), confined to the request's
// RootHeader directories if any. The caller must End it.
func (s *Server) begin(r *http.Request, opts ...dataplane.Option) (*dataplane.Request, error) {
	if roots := r.Header.Values(RootHeader); len(roots) > 0 {
		if len(roots) > maxRoots {
			return nil, badRequest(RootHeader, "at most %d %s headers", maxRoots, RootHeader)
		}
		opts = append(opts, dataplane.Confine(roots...))
	}
	return s.dp.Begin(r.Context(), userOf(r), sandboxID(r), opts...)
}

// beginWithBody is begin for a handler that reads a body of up to
// bodyLimit bytes into memory and holds copies of it (see bodyWeight).
func (s *Server) beginWithBody(r *http.Request, bodyLimit, copies int64) (*dataplane.Request, error) {
	bytes, err := bodyWeight(r, bodyLimit, copies)
	if err != nil {
		return nil, err
	}
	return s.begin(r, dataplane.Weight(bytes))
}

// bodyWeight is what a request body held in memory costs: a larger
// declared body than bodyLimit is refused before anything is read, and
// the body is charged copies times its declared length (copies+1 times
// the limit when the length is unknown, the worst case of reading it in
// growing pieces).
func bodyWeight(r *http.Request, bodyLimit, copies int64) (int64, error) {
	if bodyLimit <= 0 {
		return 0, nil
	}
	if r.ContentLength > bodyLimit {
		return 0, sandbox.Errorf(sandbox.ClassTooLarge, "request body of %d bytes is over the limit of %d bytes", r.ContentLength, bodyLimit)
	}
	if r.ContentLength < 0 {
		return (copies + 1) * bodyLimit, nil
	}
	return copies * r.ContentLength, nil
}

// SetRetryAfter adds Retry-After to the answer of a refusal that carries
// one.
func SetRetryAfter(w http.ResponseWriter, err error) {
	var ra *admission.RetryAfterError
	if errors.As(err, &ra) {
		w.Header().Set("Retry-After", ra.Seconds())
	}
}
