package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/history"
	"github.com/agentbox/agentbox/internal/sandbox"
)

type historyOut struct {
	Resolution float64         `json:"resolution_seconds"`
	Points     []history.Point `json:"points"`
}

// metricsHistory serves GET /v1/sandboxes/{id}/metrics: the sandbox's
// sampled resource usage with start and end (unix seconds or RFC 3339,
// both optional) bounding the points' times.
func (s *Server) metricsHistory(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.History == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "metrics history is off on this server (METRICS_HISTORY_RESOLUTION=0)")
	}
	start, err := timeParam(r, "start")
	if err != nil {
		return err
	}
	end, err := timeParam(r, "end")
	if err != nil {
		return err
	}
	if !start.IsZero() && !end.IsZero() && start.After(end) {
		return badRequest("start", "start must not be after end")
	}
	// The owner's check: a tenant reads only its own sandboxes' history.
	if _, err := s.m.Get(r.Context(), userOf(r), sandboxID(r)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, historyOut{Resolution: s.cfg.History.Resolution().Seconds(),
		Points: s.cfg.History.RangeStored(r.Context(), sandboxID(r), start, end)})
	return nil
}

// timeParam reads the query parameter name as unix seconds or RFC 3339
// (zero when absent).
func timeParam(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	// Unix seconds, the fraction read exactly (a float64 loses the
	// nanoseconds of today's times).
	if sec, frac, _ := strings.Cut(v, "."); sec != "" && len(frac) <= 9 {
		n, err1 := strconv.ParseInt(sec, 10, 64)
		f, err2 := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		if err1 == nil && err2 == nil && n >= 0 && f >= 0 {
			return time.Unix(n, f), nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badRequest(name, "%s must be unix seconds or an RFC 3339 time", name)
	}
	return t, nil
}
