package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/history"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// metricOut is one E2B SandboxMetric.
type metricOut struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// cpuSamples remembers each sandbox's last CPU reading, so that a metric
// reports the CPU share since the previous one (the first since start).
type cpuSamples struct {
	mu   sync.Mutex
	last map[sandbox.ID]cpuSample
}

type cpuSample struct {
	at      time.Time
	seconds float64
}

var samples = &cpuSamples{last: map[sandbox.ID]cpuSample{}}

// usedPct returns the CPU used since the previous sample (or since start)
// as a percentage of cpus cores.
func (c *cpuSamples) usedPct(id sandbox.ID, start time.Time, now time.Time, cpuSeconds float64, cpus int) float64 {
	c.mu.Lock()
	prev, ok := c.last[id]
	c.last[id] = cpuSample{at: now, seconds: cpuSeconds}
	if len(c.last) > 10000 {
		// Forget sandboxes long gone; the next reading averages since start.
		for k, v := range c.last {
			if now.Sub(v.at) > time.Hour {
				delete(c.last, k)
			}
		}
	}
	c.mu.Unlock()
	if !ok || prev.seconds > cpuSeconds || now.Sub(prev.at) < 100*time.Millisecond {
		prev = cpuSample{at: start}
	}
	elapsed := now.Sub(prev.at).Seconds()
	if elapsed <= 0 {
		return 0
	}
	pct := (cpuSeconds - prev.seconds) / elapsed / float64(cpus) * 100
	return math.Round(math.Min(math.Max(pct, 0), 100)*100) / 100
}

// metrics serves GET /sandboxes/{id}/metrics: the metrics history's
// points in the start/end range; without history (METRICS_HISTORY_
// RESOLUTION=0, or before the first sample) one sample of the cgroup now,
// or none when now is outside the range.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, user string) error {
	id := sandboxID(r)
	start, err := unixParam(r, "start")
	if err != nil {
		return err
	}
	end, err := unixParam(r, "end")
	if err != nil {
		return err
	}
	if start != nil && end != nil && *start > *end {
		return sandbox.Errorf(sandbox.ClassInvalid, "start must not be after end")
	}
	rec, err := s.m.Get(r.Context(), user, id)
	if err != nil {
		return err
	}
	if h := s.cfg.History; h != nil && h.Len(id) > 0 {
		writeJSON(w, http.StatusOK, historyMetrics(r.Context(), h, id, rec.Resources.MemoryBytes, start, end))
		return nil
	}
	// No history (off, or no sample yet): one sample, now.
	// The range is in whole seconds, as the SDKs round it: now is in it
	// when its second is. A sample is taken only for a range holding now.
	if now := time.Now().Unix(); (start != nil && now < *start-1) || (end != nil && now > *end) {
		writeJSON(w, http.StatusOK, []metricOut{})
		return nil
	}
	st, err := s.m.Stats(r.Context(), user, id)
	if err != nil {
		return err
	}
	now := time.Now()
	cpus := int(math.Max(1, math.Ceil(rec.Resources.CPUs)))
	m := metricOut{Timestamp: now.UTC(), TimestampUnix: now.Unix(), CPUCount: cpus,
		CPUUsedPct: samples.usedPct(id, rec.CreatedAt, now, st.CPUSeconds, cpus),
		MemUsed:    st.MemoryBytes, MemTotal: st.MemoryLimit, DiskUsed: st.DiskUsedBytes, DiskTotal: st.DiskTotalBytes}
	if m.MemTotal <= 0 {
		m.MemTotal = rec.Resources.MemoryBytes
	}
	writeJSON(w, http.StatusOK, []metricOut{m})
	return nil
}

// unixParam reads the query parameter name as unix seconds (nil when
// absent).
func unixParam(r *http.Request, name string) (*int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "%s must be unix seconds", name)
	}
	return &n, nil
}

type logOut struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// logsV2 serves GET /v2/sandboxes/{id}/logs: the sandbox's lifecycle
// events and its service's, from the manager and the agent. cursor (unix
// milliseconds) and direction (forward, the default, or backward) page
// through them, limit (default 1000) caps a page.
func (s *Server) logsV2(w http.ResponseWriter, r *http.Request, user string) error {
	entries, err := s.logEntries(r, user)
	if err != nil {
		return err
	}
	out := make([]logOut, 0, len(entries))
	for _, e := range entries {
		fields := map[string]string{}
		for k, v := range e.Fields {
			fields[k] = toString(v)
		}
		out = append(out, logOut{Timestamp: e.Time.UTC(), Level: e.Level, Message: e.Message, Fields: fields})
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": out})
	return nil
}

// logsV1 serves the older GET /sandboxes/{id}/logs.
func (s *Server) logsV1(w http.ResponseWriter, r *http.Request, user string) error {
	entries, err := s.logEntries(r, user)
	if err != nil {
		return err
	}
	type line struct {
		Timestamp time.Time `json:"timestamp"`
		Line      string    `json:"line"`
	}
	logs := make([]line, 0, len(entries))
	for _, e := range entries {
		// E2B's line is a JSON object (level, logger, message and the
		// fields), which E2B's CLI parses (`e2b sandbox logs`).
		obj := map[string]any{}
		for k, v := range e.Fields {
			obj[k] = toString(v)
		}
		obj["level"], obj["logger"], obj["message"] = e.Level, "agentbox", e.Message
		b, err := json.Marshal(obj)
		if err != nil {
			return fmt.Errorf("log line: %w", err)
		}
		logs = append(logs, line{Timestamp: e.Time.UTC(), Line: string(b)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": logs, "logEntries": []any{}})
	return nil
}

func (s *Server) logEntries(r *http.Request, user string) ([]manager.LogEntry, error) {
	q := r.URL.Query()
	limit := 1000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return nil, sandbox.Errorf(sandbox.ClassInvalid, "limit must be an integer from 1 to 10000")
		}
		limit = n
	}
	var cursor time.Time
	v := q.Get("cursor")
	if v == "" {
		v = q.Get("start") // the v1 route's name for it
	}
	if v == "" {
	} else if ms, err := strconv.ParseInt(v, 10, 64); err != nil || ms < 0 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "cursor must be a unix time in milliseconds")
	} else {
		cursor = time.UnixMilli(ms)
	}
	backward := false
	switch q.Get("direction") {
	case "", "forward":
	case "backward":
		backward = true
	default:
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "direction must be forward or backward")
	}
	all, err := s.m.Logs(r.Context(), user, sandboxID(r), 0)
	if err != nil {
		return nil, err
	}
	var out []manager.LogEntry
	if backward {
		for i := len(all) - 1; i >= 0 && len(out) < limit; i-- {
			if cursor.IsZero() || all[i].Time.Before(cursor) {
				out = append(out, all[i])
			}
		}
		return out, nil
	}
	for _, e := range all {
		if len(out) < limit && (cursor.IsZero() || !e.Time.Before(cursor)) {
			out = append(out, e)
		}
	}
	return out, nil
}

func toString(v any) string {
	if x, ok := v.(string); ok {
		return x
	}
	return fmt.Sprint(v)
}

// historyMetrics are h's points of id in [start, end] as E2B metrics. The
// range is in whole seconds, as the SDKs round it: a point is in it when
// its second is.
func historyMetrics(ctx context.Context, h *history.History, id sandbox.ID, memory int64, start, end *int64) []metricOut {
	var from, to time.Time
	if start != nil {
		from = time.Unix(*start, 0)
	}
	if end != nil {
		to = time.Unix(*end+1, 0).Add(-time.Nanosecond)
	}
	pts := h.RangeStored(ctx, id, from, to)
	out := make([]metricOut, 0, len(pts))
	for _, p := range pts {
		m := metricOut{Timestamp: p.Time, TimestampUnix: p.Time.Unix(), CPUCount: p.CPUCount, CPUUsedPct: p.CPUUsedPct,
			MemUsed: p.MemoryBytes, MemTotal: p.MemoryLimit, DiskUsed: p.DiskUsedBytes, DiskTotal: p.DiskTotalBytes}
		if m.MemTotal <= 0 {
			m.MemTotal = memory
		}
		out = append(out, m)
	}
	return out
}
