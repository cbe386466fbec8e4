package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// recordAudit queues the audit entry of a finished state-changing request
// (withRequestContext calls it for every route family and door). Preview
// traffic is the sandbox's own, not an API call, and is not audited.
func (s *Server) recordAudit(r *http.Request, acc *access, status int, took time.Duration) {
	if s.cfg.Audit == nil || acc.preview || !audit.Mutating(r.Method) {
		return
	}
	s.cfg.Audit.Record(audit.Entry{User: acc.user, Remote: clientHost(r.RemoteAddr), Method: r.Method, Path: r.URL.Path, Route: r.Pattern,
		Target: auditTarget(r), Status: status, Duration: float64(took.Microseconds()) / 1000, RequestID: requestID(r)})
}

// auditTarget is the sandbox (or other object) a request acts on: the
// route's {id}, else the sandbox of the data-plane headers, else the path
// segment after "sandboxes" (doors with routes of their own).
func auditTarget(r *http.Request) string {
	for _, name := range []string{"id", "sandboxID", "sandbox", "webhook", "name"} {
		if v := r.PathValue(name); v != "" {
			return v
		}
	}
	if v := r.Header.Get("E2b-Sandbox-Id"); v != "" {
		return v
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "sandboxes" || parts[i] == "sandbox" {
			return parts[i+1]
		}
	}
	return ""
}

func (s *Server) auditRoutes() {
	s.patterns = append(s.patterns, "GET /v1/audit")
	s.mux.Handle("GET /v1/audit", s.instrument("GET /v1/audit", s.authenticated(s.listAudit)))
}

// listAudit serves GET /v1/audit to the operator: filters user, target,
// method, path (a prefix), status (404 or 4xx), since and until (RFC
// 3339), after (the cursor) and limit; format=jsonl (or Accept:
// application/x-ndjson) streams every matching entry as JSON lines.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	if err := s.operator(r, "the audit log"); err != nil {
		return err
	}
	if s.cfg.Audit == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "the audit log is off on this server (AUDIT_ENABLED=false, or a store without one)")
	}
	v := r.URL.Query()
	q := audit.Query{User: v.Get("user"), Target: v.Get("target"), Method: v.Get("method"), PathPrefix: v.Get("path")}
	if st := v.Get("status"); st != "" {
		if len(st) == 3 && strings.HasSuffix(st, "xx") && st[0] >= '1' && st[0] <= '5' {
			q.StatusClass = int(st[0] - '0')
		} else if n, err := strconv.Atoi(st); err == nil && n >= 100 && n <= 599 {
			q.Status = n
		} else {
			return badRequest("status", "status must be an HTTP status (404) or a class (4xx)")
		}
	}
	window, err := parseLogPage(v, "")
	if err != nil {
		return err
	}
	q.Since, q.Until, q.After, q.Limit = window.Since, window.Until, window.After, window.Limit
	if v.Get("format") == "jsonl" || strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		return s.exportAudit(w, r, q)
	}
	page, err := s.cfg.Audit.Query(r.Context(), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// exportAudit writes every entry matching q from q.After on, one JSON
// object a line, page by page (limit is the page size here).
func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request, q audit.Query) error {
	q.Limit = audit.MaxLimit
	if err := q.Check(); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="audit.jsonl"`)
	enc := json.NewEncoder(w)
	for range 100000 { // bounded: 10^8 entries at most
		page, err := s.cfg.Audit.Query(r.Context(), q)
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			if err := enc.Encode(e); err != nil {
				return nil // the client went away
			}
		}
		if !page.More {
			return nil
		}
		q.After = page.Next
	}
	return nil
}
