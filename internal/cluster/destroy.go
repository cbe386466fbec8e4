package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// callerKey carries the caller's request (Wrap keeps it for the routes
// that act on sandboxes of several replicas at once: native sessions).
type callerKey struct{}

// DestroyBy deletes sandbox id on the live replica that runs it, as a
// DELETE /v1/sandboxes/{id} of the caller whose request ctx belongs to: it
// carries the caller's own credentials, and the hosting daemon checks them
// and the sandbox's owner as for a delete it got directly (manager.
// PeerDestroy). A sandbox gone meanwhile is a not-found error.
func (f *Forwarder) DestroyBy(ctx context.Context, id sandbox.ID) error {
	in, _ := ctx.Value(callerKey{}).(*http.Request)
	if in == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s runs on another replica, which this request cannot reach", id)
	}
	req := in.Clone(ctx)
	req.Method, req.URL.Path, req.URL.RawPath, req.URL.RawQuery = http.MethodDelete, "/v1/sandboxes/"+string(id), "", ""
	req.RequestURI = ""
	req.Body, req.ContentLength = http.NoBody, 0
	for _, h := range []string{"Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding", "Expect"} {
		req.Header.Del(h)
	}
	req.TransferEncoding = nil
	rec := &recorder{header: http.Header{}}
	if !f.ServeBy(rec, req, id) {
		// Not on a live replica (any more): gone, or its replica lost.
		return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s: the replica running it did not take the delete (it may just have stopped); retry", id)
	}
	switch {
	case rec.status == http.StatusNoContent || rec.status == http.StatusOK:
		return nil
	case rec.status == http.StatusNotFound:
		return sandbox.ErrNotFound(id)
	case rec.status >= 500:
		return sandbox.Errorf(sandbox.ClassUnavailable, "delete sandbox %s on its replica: status %d: %s", id, rec.status, firstLine(rec.body.Bytes()))
	default:
		return fmt.Errorf("delete sandbox %s on its replica: status %d: %s", id, rec.status, firstLine(rec.body.Bytes()))
	}
}

// recorder is the ResponseWriter of a request made to another replica on
// the caller's behalf (bounded: the answer of a delete is a few bytes).
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(p) > 64<<10 {
		return 0, errors.New("answer too large")
	}
	return r.body.Write(p)
}

// firstLine is the start of an answer's body, for an error message.
func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
