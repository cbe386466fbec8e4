package e2b

import (
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Pause and resume go to the manager's Pause/Resume (the cgroup freezer):
// E2B answers 409 to pausing a sandbox that is not running.

func (s *Server) pauseSandbox(r *http.Request, user string, id sandbox.ID) error {
	return sandbox.Errorf(sandbox.ClassUnavailable, "pause is not available on this server")
}

func (s *Server) resumeSandbox(r *http.Request, user string, id sandbox.ID, timeout time.Duration) (*store.Record, error) {
	return nil, sandbox.Errorf(sandbox.ClassUnavailable, "resume is not available on this server")
}

func setAutoPause(req *manager.CreateRequest, autoPause *bool) error {
	if autoPause != nil && *autoPause {
		return sandbox.Errorf(sandbox.ClassInvalid, "autoPause is not available on this server")
	}
	return nil
}
