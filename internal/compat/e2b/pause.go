package e2b

import (
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Pause and resume are the manager's (the cgroup freezer, docs/pause.md).
// E2B answers 409 to pausing a sandbox that is not running (its SDK's
// pause then returns false), and resume (or connect) of a paused one gives
// back its processes, memory and servers as they were.

func (s *Server) pauseSandbox(r *http.Request, user string, id sandbox.ID) error {
	rec, err := s.m.Get(r.Context(), user, id)
	if err != nil {
		return err
	}
	if rec.State != sandbox.StateRunning {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s, not running", id, stateOf(rec.State))
	}
	_, err = s.m.Pause(r.Context(), user, id)
	return err
}

func (s *Server) resumeSandbox(r *http.Request, user string, id sandbox.ID, timeout time.Duration) (*store.Record, error) {
	rec, err := s.m.Get(r.Context(), user, id)
	if err != nil {
		return nil, err
	}
	if rec.State != sandbox.StatePaused {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s, not paused", id, stateOf(rec.State))
	}
	return s.m.Resume(r.Context(), user, id, timeout)
}

// setAutoPause maps E2B's autoPause (the SDK's lifecycle.onTimeout:
// "pause") onto the manager's.
func setAutoPause(req *manager.CreateRequest, autoPause *bool) error {
	req.AutoPause = autoPause != nil && *autoPause
	return nil
}
