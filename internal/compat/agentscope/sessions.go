package agentscope

import (
	"context"
	"sort"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
)

// touch records session activity for a call on identity (check_health,
// list_tools, call_tool, add_mcp_servers), restores the session first if
// the heartbeat recycled it, and returns the record that serves the call:
// the sandbox that replaced identity's, if it was replaced. When that
// sandbox runs on another replica the call is served there: errElsewhere.
func (s *Server) touch(ctx context.Context, c *call, identity string) (*record, error) {
	owner := c.owner
	r := s.lookup(ctx, owner, identity)
	if r == nil {
		return nil, errNoContainer(identity)
	}
	if r.Session != "" && s.needsRestore(ctx, owner, r.Session) {
		if err := s.restoreSession(ctx, owner, r.Session); err != nil {
			return nil, err
		}
	}
	// Read again (a restore replaced it); with the store away, the record
	// the lookup adopted from the manager serves (a running sandbox keeps
	// working without Redis).
	if g := s.reg.get(ctx, r.Name); g != nil {
		r = g
	}
	r = s.follow(ctx, r)
	if !r.live() {
		return nil, errNoContainer(identity)
	}
	if s.elsewhere(c, r.ID) {
		return nil, errElsewhere{r.ID}
	}
	now := time.Now()
	s.m.Touch(r.ID)
	if now.Sub(r.LastActive) > time.Second {
		if u := s.reg.update(ctx, r.Name, func(x *record) { x.LastActive = now }); u != nil {
			r = u
		}
		// Agentscope sandboxes live until released: keep the end time far
		// ahead of any activity.
		if _, err := s.m.Refresh(ctx, r.Owner, r.ID, s.cfg.SandboxTimeout); err != nil {
			s.log.Debug("agentscope: extend sandbox end time", "sandbox", r.Name, "err", err)
		}
	}
	return r, nil
}

func (s *Server) needsRestore(ctx context.Context, owner, key string) bool {
	recs, err := s.reg.session(ctx, owner, key)
	if err != nil {
		s.log.Warn("agentscope: read session", "session", key, "err", err)
		return false
	}
	for _, r := range recs {
		if r.State == stateRecycled {
			return true
		}
	}
	return false
}

// restoreSession replaces every recycled sandbox of the session with a new
// one of the same type, on the same workspace (its mount directory, or the
// copy in storage). The old record becomes "replaced" with redirect_to.
// The session's lock spans replicas: a session is restored once, by the
// replica whose call came first.
func (s *Server) restoreSession(ctx context.Context, owner, key string) error {
	return s.withSession(ctx, owner, key, func(ctx context.Context, sess *manager.Session) error {
		recs, err := s.reg.session(ctx, owner, key)
		if err != nil {
			return err
		}
		for _, old := range recs {
			if old.State != stateRecycled {
				continue
			}
			nr, err := s.createSandbox(ctx, owner, createOpts{
				typ: old.Type, sess: sess, mountDir: old.MountDir, storage: old.Storage,
				fromPool: old.MountDir == "" && old.Storage == "",
			})
			if err != nil {
				s.log.Warn("agentscope: restore recycled sandbox", "sandbox", old.Name, "session", key, "err", err)
				continue
			}
			s.reg.update(ctx, old.Name, func(x *record) {
				x.State, x.RedirectTo, x.Session = stateReplaced, nr.Name, ""
			})
			s.log.Info("agentscope sandbox restored", "old", old.Name, "new", nr.Name, "session", key)
		}
		return nil
	})
}

// onRecycle runs (from the manager's heartbeat loop) before an idle
// session sandbox is destroyed: it saves the workspace and marks the
// record recycled, keeping its session binding for the restore.
func (s *Server) onRecycle(ctx context.Context, rec *store.Record) {
	name := s.cfg.Prefix + string(rec.ID)
	r := s.reg.get(ctx, name)
	if r == nil && rec.Extra[legacyMarker] != "" {
		r = s.reg.adopt(ctx, s.adopt(rec.Owner, rec)) // made by an earlier version
	}
	if r == nil || !r.Ours {
		return // not an agentscope sandbox: the native session rules apply
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
	s.reg.update(ctx, name, func(x *record) {
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
	recs, err := s.reg.session(ctx, c.owner, key)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, r := range s.stillBound(ctx, recs) {
		names = append(names, r.Name)
	}
	return names, nil
}

// apiListSessionKeys is POST /list_session_keys.
func (s *Server) apiListSessionKeys(ctx context.Context, c *call) (any, error) {
	for _, key := range s.m.SessionKeys(c.owner) {
		s.adoptSession(ctx, c.owner, key)
	}
	recs, err := s.reg.all(ctx, c.owner)
	if err != nil {
		return nil, err
	}
	var bound []*record
	for _, r := range recs {
		if r.Session != "" && (r.live() || r.State == stateRecycled) {
			bound = append(bound, r)
		}
	}
	seen := map[string]bool{}
	keys := []string{}
	for _, r := range s.stillBound(ctx, bound) {
		if !seen[r.Session] {
			seen[r.Session] = true
			keys = append(keys, r.Session)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// stillBound drops the live records whose sandbox is gone (it went while
// no gone hook could see it: a host crash, say), turning them released.
func (s *Server) stillBound(ctx context.Context, recs []*record) []*record {
	out := recs[:0]
	for _, r := range recs {
		if r.live() {
			if r = s.checkLive(ctx, r); !r.live() {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// adoptSession makes sure the agentscope sandboxes of a session that an
// earlier version made have records (it kept none in the store); those
// made since have one from their create.
func (s *Server) adoptSession(ctx context.Context, owner, key string) {
	for _, rec := range s.m.SessionSandboxes(owner, key) {
		if rec.Extra[legacyMarker] != "" {
			s.lookup(ctx, owner, string(rec.ID))
		}
	}
}

// onGone runs (manager.GoneHook) once a sandbox is gone, whichever API or
// timer ended it: the MCP servers and browser connection this replica
// keeps for it go, and a live record of it becomes "released" (in the
// shared store: every replica answers so). A record already recycled,
// replaced or released stays as it is.
func (s *Server) onGone(ctx context.Context, rec *store.Record, reason string) {
	if s.stopProcesses(rec.ID) {
		s.log.Info("agentscope: dropped the MCP servers and browser connection of a gone sandbox", "sandbox", rec.ID, "reason", reason)
	}
	now := time.Now()
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s.reg.update(uctx, s.cfg.Prefix+string(rec.ID), func(x *record) {
		if x.live() && x.ID == rec.ID {
			x.State, x.ReleasedAt, x.Session = stateReleased, now, ""
		}
	})
}
