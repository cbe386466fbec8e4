package cluster

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/internal/httpbody"
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
	rec := httpbody.NewAnswer()
	if !f.ServeBy(rec, req, id) {
		// Not on a live replica (any more): gone, or its replica lost.
		return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s: the replica running it did not take the delete (it may just have stopped); retry", id)
	}
	switch {
	case rec.Status == http.StatusNoContent || rec.Status == http.StatusOK:
		return nil
	case rec.Status == http.StatusNotFound:
		return sandbox.ErrNotFound(id)
	case rec.Status >= 500:
		return sandbox.Errorf(sandbox.ClassUnavailable, "delete sandbox %s on its replica: status %d: %s", id, rec.Status, rec.FirstLine())
	default:
		return fmt.Errorf("delete sandbox %s on its replica: status %d: %s", id, rec.Status, rec.FirstLine())
	}
}
