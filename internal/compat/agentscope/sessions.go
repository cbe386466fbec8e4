package agentscope

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// touch records session activity for a call on identity (check_health,
// list_tools, call_tool, add_mcp_servers), restores the session first if
// the heartbeat recycled it, and returns the record that serves the call:
// the sandbox that replaced identity's, if it was replaced.
func (s *Server) touch(ctx context.Context, owner, identity string) (*record, error) {
	r := s.lookup(ctx, owner, identity)
	if r == nil {
		return nil, errNoContainer(identity)
	}
	if r.Session != "" && s.needsRestore(owner, r.Session) {
		s.restoreSession(ctx, owner, r.Session)
	}
	r = s.follow(s.reg.get(r.Name))
	if !r.live() {
		return nil, errNoContainer(identity)
	}
	now := time.Now()
	s.m.Touch(r.ID)
	if now.Sub(r.LastActive) > time.Second {
		r = s.reg.update(r.Name, func(x *record) { x.LastActive = now })
		// Agentscope sandboxes live until released: keep the end time far
		// ahead of any activity.
		if _, err := s.m.Refresh(ctx, r.Owner, r.ID, s.cfg.SandboxTimeout); err != nil {
			s.log.Debug("agentscope: extend sandbox end time", "sandbox", r.Name, "err", err)
		}
	}
	return r, nil
}

func (s *Server) needsRestore(owner, key string) bool {
	for _, r := range s.reg.session(owner, key) {
		if r.State == stateRecycled {
			return true
		}
	}
	return false
}

// restoreSession replaces every recycled sandbox of the session with a new
// one of the same type, on the same workspace (its mount directory, or the
// copy in storage). The old record becomes "replaced" with redirect_to.
func (s *Server) restoreSession(ctx context.Context, owner, key string) {
	unlock := s.sessionLock(owner, key)
	defer unlock()
	for _, old := range s.reg.session(owner, key) {
		if old.State != stateRecycled {
			continue
		}
		nr, err := s.createSandbox(ctx, owner, createOpts{
			typ: old.Type, session: key, mountDir: old.MountDir, storage: old.Storage,
			fromPool: old.MountDir == "" && old.Storage == "",
		})
		if err != nil {
			s.log.Warn("agentscope: restore recycled sandbox", "sandbox", old.Name, "session", key, "err", err)
			continue
		}
		s.reg.update(old.Name, func(x *record) {
			x.State, x.RedirectTo, x.Session = stateReplaced, nr.Name, ""
		})
		s.log.Info("agentscope sandbox restored", "old", old.Name, "new", nr.Name, "session", key)
	}
}

// onRecycle runs (from the manager's heartbeat loop) before an idle
// session sandbox is destroyed: it saves the workspace and marks the
// record recycled, keeping its session binding for the restore.
func (s *Server) onRecycle(ctx context.Context, rec *store.Record) {
	if rec.Extra[extraMarker] == "" {
		return // not an agentscope sandbox: the native session rules apply
	}
	name := s.cfg.Prefix + string(rec.ID)
	r := s.reg.get(name)
	if r == nil {
		r = s.adopt(rec.Owner, rec)
		s.reg.put(r)
	}
	s.stopProcesses(r.ID)
	if r.Storage != "" {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		if err := s.saveWorkspace(sctx, r); err != nil {
			s.log.Error("agentscope: copy workspace to storage before recycle", "sandbox", name, "err", err)
		}
		cancel()
	}
	now := time.Now()
	s.reg.update(name, func(x *record) {
		x.State, x.RecycledAt, x.RecycleReason = stateRecycled, now, "heartbeat_timeout"
	})
	s.log.Info("agentscope sandbox recycled", "sandbox", name, "session", r.Session)
}

// apiGetSessionMapping is POST /get_session_mapping: the sandbox names
// bound to a session_ctx_id.
func (s *Server) apiGetSessionMapping(ctx context.Context, c *call) (any, error) {
	key, err := c.str("session_ctx_id")
	if err != nil {
		return nil, err
	}
	s.adoptSession(ctx, c.owner, key)
	names := []string{}
	for _, r := range s.reg.session(c.owner, key) {
		names = append(names, r.Name)
	}
	return names, nil
}

// apiListSessionKeys is POST /list_session_keys.
func (s *Server) apiListSessionKeys(ctx context.Context, c *call) (any, error) {
	for _, key := range s.m.SessionKeys(c.owner) {
		s.adoptSession(ctx, c.owner, key)
	}
	return s.reg.sessionKeys(c.owner), nil
}

// adoptSession makes sure the manager's agentscope sandboxes of a session
// have records (after a daemon restart the registry starts empty).
func (s *Server) adoptSession(ctx context.Context, owner, key string) {
	for _, rec := range s.m.SessionSandboxes(owner, key) {
		if rec.Extra[extraMarker] != "" {
			s.lookup(ctx, owner, string(rec.ID))
		}
	}
}
