package agentscope

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/internal/httpbody"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Peers reaches the other replicas that share the daemon's store
// (cluster.Forwarder). The daemon's forwarder already sends a method that
// names an identity to the replica running that sandbox; the front-end
// needs Peers where the sandbox that serves a call is only known once its
// record is read: a recycled session restored on another replica (the old
// identity redirects there), and cleanup, which releases sandboxes of
// every replica.
type Peers interface {
	// ServeBy serves r by the live replica that runs sandbox id, with the
	// caller's own credentials, reporting false (nothing written) when that
	// is this daemon, none (the sandbox is gone, or its replica is lost),
	// or r was itself forwarded by a replica: the caller serves it then.
	ServeBy(w http.ResponseWriter, r *http.Request, id sandbox.ID) bool
}

// errElsewhere asks the method handler to serve the request by the replica
// that runs id (the method changed nothing before it returned this).
type errElsewhere struct{ id sandbox.ID }

func (e errElsewhere) Error() string {
	return fmt.Sprintf("sandbox %s runs on another replica", e.id)
}

// elsewhere reports whether c is to be served by another replica because
// the sandbox id it acts on runs there.
func (s *Server) elsewhere(c *call, id sandbox.ID) bool {
	return s.cfg.Peers != nil && c != nil && c.req != nil && !c.local && !s.m.Hosts(id)
}

// serveElsewhere hands the request of a method that returned errElsewhere
// to the replica running the sandbox, reporting whether it did. When it
// did not (that replica is lost, or the sandbox went meanwhile) the method
// is run again here, told to stay local.
func (s *Server) serveElsewhere(w http.ResponseWriter, r *http.Request, c *call, id sandbox.ID) bool {
	r.Body = io.NopCloser(bytes.NewReader(c.body))
	r.ContentLength = int64(len(c.body))
	if s.cfg.Peers.ServeBy(w, r, id) {
		return true
	}
	c.local = true
	return false
}

// releaseBy releases r on the live replica that runs it, as a release
// request of the caller's (cleanup on this replica of a sandbox another
// runs). It reports false when no other replica runs it.
func (s *Server) releaseBy(ctx context.Context, c *call, r *record) (bool, error) {
	if !s.elsewhere(c, r.ID) {
		return false, nil
	}
	body, _ := json.Marshal(map[string]string{"identity": r.Name})
	req := c.req.Clone(ctx)
	req.Method, req.URL.Path, req.URL.RawPath, req.URL.RawQuery = http.MethodPost, "/release", "", ""
	req.RequestURI = ""
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Del("Content-Length")
	rec := httpbody.NewAnswer()
	if !s.cfg.Peers.ServeBy(rec, req, r.ID) {
		return false, nil
	}
	var out struct {
		Data   any    `json:"data"`
		Detail string `json:"detail"`
	}
	if rec.Status != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Data != true {
		return true, fmt.Errorf("release %s on its replica: status %d %s", r.Name, rec.Status, rec.FirstLine())
	}
	return true, nil
}
