package fakeserver

import (
	"net/http"
	"time"
)

func sessionKey(sessionID, userID string) string {
	if userID == "" {
		return sessionID
	}
	return sessionID + "_" + userID
}

func (s *Server) connectSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UserID  string            `json:"user_id"`
		Types   []string          `json:"types"`
		Timeout float64           `json:"timeout"`
		Env     map[string]string `json:"env"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if len(req.Types) == 0 {
		req.Types = []string{"base"}
	}
	life := 300 * time.Second
	if req.Timeout > 0 {
		life = time.Duration(req.Timeout * float64(time.Second))
	}
	key := sessionKey(r.PathValue("session_id"), req.UserID)

	s.mu.Lock()
	have := map[string]*sandbox{}
	for _, id := range s.sessions[key] {
		if sb := s.sandboxes[id]; sb != nil {
			have[sb.Type] = sb
		}
	}
	out := []sandbox{}
	for _, typ := range req.Types {
		sb := have[typ]
		if sb == nil {
			now := time.Now().UTC()
			sb = &sandbox{Template: "host", Type: typ, State: "running", CreatedAt: now,
				EndAt: now.Add(life), Env: req.Env, SessionKey: key}
			s.sessions[key] = append(s.sessions[key], s.addLocked(sb))
			have[typ] = sb
		}
		out = append(out, *sb)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"session_key": key, "sandboxes": out})
}

func (s *Server) releaseSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UserID string `json:"user_id"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	key := sessionKey(r.PathValue("session_id"), req.UserID)
	s.mu.Lock()
	released := []string{}
	for _, id := range s.sessions[key] {
		if s.sandboxes[id] != nil {
			delete(s.sandboxes, id)
			delete(s.fs, id)
			released = append(released, id)
		}
	}
	delete(s.sessions, key)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"released": released})
}
