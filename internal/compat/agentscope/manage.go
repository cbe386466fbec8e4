package agentscope

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxRedirects bounds following redirect_to from replaced records.
const maxRedirects = 10

func errNoContainer(identity string) error {
	return fmt.Errorf("No container found with id: %s.", identity) //nolint:staticcheck // agentscope's exact text
}

func identityArg(c *call) (string, error) { return c.str("identity") }

// follow resolves a replaced record to the sandbox that replaced it.
func (s *Server) follow(ctx context.Context, r *record) *record {
	for i := 0; i < maxRedirects && r.State == stateReplaced && r.RedirectTo != ""; i++ {
		next := s.reg.get(ctx, r.RedirectTo)
		if next == nil || next.Owner != r.Owner {
			break
		}
		r = next
	}
	return r
}

// apiRelease is POST /release: destroy the sandbox, keep its record as
// "released" for an hour. true also for an unknown identity.
func (s *Server) apiRelease(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	r := s.lookup(ctx, c.owner, identity)
	for i := 0; r != nil && i <= maxRedirects; i++ {
		next := r.RedirectTo
		if err := s.release(ctx, c, r); err != nil {
			var ee errElsewhere
			if errors.As(err, &ee) {
				return nil, err // the replica running it releases the chain
			}
			s.log.Warn("agentscope release failed", "sandbox", r.Name, "err", err)
			return false, nil
		}
		if next == "" || r.State != stateReplaced {
			break
		}
		r = s.reg.find(ctx, c.owner, "", next)
	}
	return true, nil
}

// release destroys r's sandbox (if it still runs), copies its workspace
// to storage, and marks the record released and unbound from its session.
// A sandbox another replica runs is released there: errElsewhere.
func (s *Server) release(ctx context.Context, c *call, r *record) error {
	if r.live() && s.elsewhere(c, r.ID) {
		return errElsewhere{r.ID}
	}
	// Held for the session, so that a restore of it (which may replace
	// this very sandbox) is not interleaved.
	return s.withSession(ctx, r.Owner, r.Session, func(ctx context.Context, _ *manager.Session) error {
		return s.releaseHeld(ctx, r.Name)
	})
}

// releaseHeld is release with the session held.
func (s *Server) releaseHeld(ctx context.Context, name string) error {
	r := s.reg.get(ctx, name) // the state may have changed while waiting
	if r == nil || r.State == stateReleased {
		return nil
	}
	s.stopProcesses(r.ID)
	if r.live() {
		if r.MountDir == "" && r.Storage != "" {
			if err := s.saveWorkspace(ctx, r); err != nil {
				s.log.Error("agentscope: copy workspace to storage", "sandbox", r.Name, "err", err)
			}
		}
		if err := s.m.Delete(ctx, r.Owner, r.ID); err != nil && !sandbox.IsNotFound(err) {
			return err
		}
		if r.MountDir != "" && r.Storage != "" {
			if err := s.saveWorkspace(ctx, r); err != nil {
				s.log.Error("agentscope: copy workspace to storage", "sandbox", r.Name, "err", err)
			}
		}
	}
	now := time.Now()
	s.reg.update(ctx, r.Name, func(x *record) {
		if x.State != stateReplaced {
			x.State = stateReleased
		}
		x.ReleasedAt, x.Session = now, ""
	})
	s.log.Info("agentscope sandbox released", "sandbox", r.Name)
	return nil
}

// apiStart is POST /start: true when the sandbox runs (sandboxes are never
// stopped here, see apiStop).
func (s *Server) apiStart(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	r := s.lookup(ctx, c.owner, identity)
	if r == nil {
		return false, nil
	}
	r = s.checkLive(ctx, s.follow(ctx, r))
	if !r.live() {
		return false, nil
	}
	if s.elsewhere(c, r.ID) {
		return nil, errElsewhere{r.ID}
	}
	if _, err := s.m.StartSandbox(ctx, r.Owner, r.ID); err != nil {
		s.log.Warn("agentscope start", "sandbox", r.ID, "err", err)
		return false, nil
	}
	return true, nil
}

// apiStop is POST /stop: the sandbox's processes end, its files stay, and
// /start boots it again. An unknown identity answers true, as agentscope
// does.
func (s *Server) apiStop(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	r := s.lookup(ctx, c.owner, identity)
	if r == nil {
		return true, nil
	}
	r = s.checkLive(ctx, s.follow(ctx, r))
	if !r.live() {
		return true, nil
	}
	if s.elsewhere(c, r.ID) {
		return nil, errElsewhere{r.ID}
	}
	if _, err := s.m.StopSandbox(ctx, r.Owner, r.ID); err != nil {
		s.log.Warn("agentscope stop", "sandbox", r.ID, "err", err)
		return false, nil
	}
	return true, nil
}

// apiGetStatus is POST /get_status: "running", or null when the sandbox
// does not run (released, recycled, unknown).
func (s *Server) apiGetStatus(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	r := s.lookup(ctx, c.owner, identity)
	if r == nil {
		return nil, nil
	}
	if r = s.checkLive(ctx, r); r.live() {
		if rec, err := s.m.Get(ctx, r.Owner, r.ID); err == nil && rec.State == sandbox.StateStopped {
			return "exited", nil
		}
		return "running", nil
	}
	return nil, nil
}

// apiGetInfo is POST /get_info: the sandbox model.
func (s *Server) apiGetInfo(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	r := s.lookup(ctx, c.owner, identity)
	if r == nil {
		return nil, errNoContainer(identity)
	}
	r = s.checkLive(ctx, r)
	return r.model(c.baseURL, c.port, s.cfg.SandboxTimeout), nil
}

// apiCheckHealth is POST /check_health: true when the sandbox's agent
// answers. It counts as session activity (and restores a recycled one).
func (s *Server) apiCheckHealth(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	r, err := s.touch(ctx, c, identity)
	if err != nil {
		return nil, err
	}
	dr, done, err := s.work(ctx, r)
	if err != nil {
		return false, nil
	}
	defer done()
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return dr.Health(hctx) == nil, nil
}

// apiCleanup is POST /cleanup: release every sandbox of the caller, on
// every replica (a sandbox another replica runs is released there, as a
// release request of the caller's).
func (s *Server) apiCleanup(ctx context.Context, c *call) (any, error) {
	// Adopt the caller's sandboxes created elsewhere too: cleanup destroys
	// every sandbox, as in agentscope.
	cursor := ""
	for page := 0; page < 100; page++ {
		p, err := s.m.List(ctx, c.owner, manager.ListOptions{Limit: 1000, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, rec := range p.Records {
			s.lookup(ctx, c.owner, string(rec.ID))
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	owned, err := s.reg.owned(ctx, c.owner)
	if err != nil {
		return nil, err
	}
	var failed []string
	for _, r := range owned {
		done, err := s.releaseBy(ctx, c, r)
		if !done && err == nil {
			err = s.release(ctx, &call{owner: c.owner, local: true}, r)
		}
		if err != nil {
			s.log.Error("agentscope cleanup: release", "sandbox", r.Name, "err", err)
			failed = append(failed, r.Name)
		}
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("cleanup could not release %d sandboxes (%s); retry", len(failed), strings.Join(failed, ", "))
	}
	return nil, nil
}
