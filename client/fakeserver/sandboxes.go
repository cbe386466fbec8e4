package fakeserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sandbox is the spec's Sandbox shape (kept apart from the SDK's types so
// the fake checks the wire format, not the SDK against itself).
type sandbox struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"`
	Type        string            `json:"type,omitempty"`
	State       string            `json:"state"`
	CreatedAt   time.Time         `json:"created_at"`
	EndAt       time.Time         `json:"end_at"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Resources   map[string]any    `json:"resources,omitempty"`
	SessionKey  string            `json:"session_key,omitempty"`
	AccessToken string            `json:"access_token"`
	seq         int
}

// AddSandbox inserts a running sandbox directly, bypassing create, and
// returns its id. age backdates its creation.
func (s *Server) AddSandbox(template string, metadata map[string]string, age, life time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UTC()
	return s.addLocked(&sandbox{Template: template, State: "running", Metadata: metadata,
		CreatedAt: now.Add(-age), EndAt: now.Add(life)})
}

// SetState changes a sandbox's state ("running" or "stopped").
func (s *Server) SetState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		sb.State = state
	}
}

// Exists reports whether sandbox id exists.
func (s *Server) Exists(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxes[id] != nil
}

func (s *Server) addLocked(sb *sandbox) string {
	s.seq++
	sb.seq = s.seq
	sb.ID = fmt.Sprintf("sb%04d", s.seq)
	sb.AccessToken = "token-" + sb.ID
	s.sandboxes[sb.ID] = sb
	s.fs[sb.ID] = newFsys()
	return sb.ID
}

// withSandbox resolves {id} or answers 404.
func (s *Server) withSandbox(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !s.Exists(id) {
			writeError(w, errf(404, "not_found", "sandbox %s not found", id))
			return
		}
		h(w, r, id)
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Template  string            `json:"template"`
		Timeout   *float64          `json:"timeout"`
		Env       map[string]string `json:"env"`
		Metadata  map[string]string `json:"metadata"`
		Resources map[string]any    `json:"resources"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Template == "" {
		req.Template = "host"
	}
	if strings.HasPrefix(req.Template, "dir:") {
		writeError(w, invalid("template", "template %q refused: a host directory becomes a template only by the operator's configuration (SANDBOX_TEMPLATES)", req.Template))
		return
	}
	if req.Template != "host" && req.Template != "base" {
		writeError(w, invalid("template", "unknown template %q", req.Template))
		return
	}
	life := 300 * time.Second
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			writeError(w, invalid("timeout", "timeout must be positive"))
			return
		}
		life = time.Duration(*req.Timeout * float64(time.Second))
	}
	for _, k := range []string{"memory", "disk"} {
		// The spec allows integers or "512M"-style strings; the SDK must
		// send integers, so that is all the fake takes.
		if v, ok := req.Resources[k]; ok {
			if _, isNum := v.(json.Number); !isNum {
				writeError(w, invalid("resources."+k, "want an integer number of bytes"))
				return
			}
		}
	}
	now := time.Now().UTC()
	sb := &sandbox{Template: req.Template, State: "running", CreatedAt: now, EndAt: now.Add(life),
		Env: req.Env, Metadata: req.Metadata, Resources: req.Resources}
	s.mu.Lock()
	s.addLocked(sb)
	out := *sb
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := s.PageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, invalid("limit", "limit must be 1..1000"))
			return
		}
		limit = n
	}
	md, err := url.ParseQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, invalid("metadata", "bad metadata filter: %v", err))
		return
	}
	var states []string
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
	}
	offset := 0
	if tok := q.Get("next_token"); tok != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(tok, "page-"))
		if err != nil || !strings.HasPrefix(tok, "page-") {
			writeError(w, invalid("next_token", "bad next_token"))
			return
		}
		offset = n
	}

	s.mu.Lock()
	var all []sandbox
	for _, sb := range s.sandboxes {
		if len(states) > 0 && !slices.Contains(states, sb.State) {
			continue
		}
		match := true
		for k := range md {
			if sb.Metadata[k] != md.Get(k) {
				match = false
			}
		}
		if match {
			all = append(all, *sb)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b sandbox) int { return b.seq - a.seq }) // newest first

	page := struct {
		Sandboxes []sandbox `json:"sandboxes"`
		NextToken string    `json:"next_token,omitempty"`
	}{Sandboxes: []sandbox{}}
	if offset < len(all) {
		end := min(offset+limit, len(all))
		page.Sandboxes = all[offset:end]
		if end < len(all) {
			page.NextToken = fmt.Sprintf("page-%d", end)
		}
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) snapshot(id string) sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.sandboxes[id]
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, id string) {
	writeJSON(w, http.StatusOK, s.snapshot(id))
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	delete(s.sandboxes, id)
	delete(s.fs, id)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Timeout *float64 `json:"timeout"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Timeout == nil || *req.Timeout < 1 {
		writeError(w, invalid("timeout", "timeout must be at least 1 second"))
		return
	}
	s.mu.Lock()
	s.sandboxes[id].EndAt = time.Now().UTC().Add(time.Duration(*req.Timeout * float64(time.Second)))
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.snapshot(id))
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Duration float64 `json:"duration"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Duration <= 0 {
		req.Duration = 300
	}
	s.mu.Lock()
	sb := s.sandboxes[id]
	if end := time.Now().UTC().Add(time.Duration(req.Duration * float64(time.Second))); end.After(sb.EndAt) {
		sb.EndAt = end
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.snapshot(id))
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request, id string) {
	writeJSON(w, http.StatusOK, map[string]any{
		"memory_bytes": 1 << 20, "memory_max_bytes": 2 << 20, "memory_limit": 512 << 20,
		"cpu_seconds": 1.5, "pids": 3, "pids_limit": 256, "oom_kills": 0, "pids_limit_hits": 0,
		"disk_used_bytes": 4096, "disk_total_bytes": 1 << 30,
	})
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request, id string) {
	limit := 1000
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, invalid("limit", "limit must be 1..10000"))
			return
		}
		limit = n
	}
	sb := s.snapshot(id)
	type entry struct {
		Timestamp time.Time      `json:"timestamp"`
		Level     string         `json:"level"`
		Message   string         `json:"message"`
		Fields    map[string]any `json:"fields,omitempty"`
	}
	logs := []entry{
		{sb.CreatedAt, "info", "sandbox created", map[string]any{"template": sb.Template}},
		{sb.CreatedAt.Add(time.Millisecond), "info", "agent ready", nil},
		{sb.CreatedAt.Add(2 * time.Millisecond), "warn", "fake warning", nil},
	}
	if len(logs) > limit {
		logs = logs[len(logs)-limit:]
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": logs})
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"version": "fake", "backend": "fake", "user": "tester",
		"capabilities": map[string]any{"pty": true}, "templates": map[string]string{"host": "the host's /usr"},
	})
}
