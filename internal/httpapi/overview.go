package httpapi

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/overview"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// overviewMaxPages bounds the event pages one overview replays (of
// events.MaxLimit each): EVENTS_MAX is 50000 by default.
const overviewMaxPages = 200

type overviewOut struct {
	Range       string            `json:"range"`
	Start       time.Time         `json:"start"`
	End         time.Time         `json:"end"`
	StepSeconds float64           `json:"step_seconds"`
	Buckets     []overview.Bucket `json:"buckets"`
	Capacity    capacityOut       `json:"capacity"`
	Now         overview.Bucket   `json:"now"`
	Tenants     []tenantOut       `json:"tenants,omitempty"`
	// Partial: the event log was longer than one overview reads, so the
	// oldest buckets may undercount.
	Partial bool `json:"partial,omitempty"`
}

type capacityOut struct {
	CPUs        int   `json:"cpus"`
	MemoryBytes int64 `json:"memory_bytes"`
}

type tenantOut struct {
	User        string  `json:"user"`
	Sandboxes   int     `json:"sandboxes"`
	Running     int     `json:"running"`
	Creates     int     `json:"creates"`
	Failures    int     `json:"failures"`
	CPUCores    float64 `json:"cpu_cores"`
	MemoryBytes int64   `json:"memory_bytes"`
	MemoryLimit int64   `json:"memory_limit_bytes"`
}

// overviewSeries serves GET /v1/overview: the caller's sandboxes over
// range (1h, 24h, 7d) in buckets, from the event log and the metrics
// history; the operator's covers every tenant (or owner=) with a row per
// tenant.
func (s *Server) overviewSeries(w http.ResponseWriter, r *http.Request) error {
	el, err := s.eventLog()
	if err != nil {
		return err
	}
	rg, err := overview.ParseRange(r.URL.Query().Get("range"))
	if err != nil {
		return badRequest("range", "%v", err)
	}
	op := s.isTemplateAdmin(r)
	owner := userOf(r)
	if op {
		owner = r.URL.Query().Get("owner")
	} else if o := r.URL.Query().Get("owner"); o != "" && o != owner {
		return sandbox.Errorf(sandbox.ClassForbidden, "only the operator reads other users' overview")
	}
	end := time.Now().UTC()
	n := int(rg.Span / rg.Step)
	start := end.Truncate(rg.Step).Add(rg.Step - rg.Span)

	var evs []events.Event
	q := events.Query{Owner: owner, Limit: events.MaxLimit}
	out := overviewOut{Range: rg.Name, Start: start, End: end, StepSeconds: rg.Step.Seconds()}
	for page := 0; ; page++ {
		if page == overviewMaxPages {
			out.Partial = true
			break
		}
		p, err := el.Query(r.Context(), q)
		if err != nil {
			return err
		}
		evs = append(evs, p.Events...)
		if !p.More {
			break
		}
		q.After = p.Next
	}

	ov := s.m.Overview()
	var live []overview.Live
	tenants := map[string]*tenantOut{}
	tenant := func(u string) *tenantOut {
		if tenants[u] == nil {
			tenants[u] = &tenantOut{User: u}
		}
		return tenants[u]
	}
	for _, sb := range ov.Sandboxes {
		if owner != "" && sb.Owner != owner {
			continue
		}
		live = append(live, overview.Live{ID: string(sb.ID), State: string(sb.State)})
	}
	out.Buckets = overview.Buckets(evs, live, start, rg.Step, n)
	for _, sb := range ov.Sandboxes {
		if owner != "" && sb.Owner != owner {
			continue
		}
		t := tenant(sb.Owner)
		t.Sandboxes++
		if sb.State == sandbox.StateRunning {
			t.Running++
		}
		if s.cfg.History == nil {
			continue
		}
		pts := s.cfg.History.Range(sb.ID, start, time.Time{})
		overview.AddUsage(out.Buckets, start, rg.Step, pts)
		if len(pts) > 0 {
			last := pts[len(pts)-1]
			t.CPUCores += last.CPUUsedPct / 100 * float64(last.CPUCount)
			t.MemoryBytes += last.MemoryBytes
			out.Now.CPUCores += last.CPUUsedPct / 100 * float64(last.CPUCount)
			out.Now.MemoryBytes += last.MemoryBytes
		}
	}
	if len(out.Buckets) > 0 {
		last := out.Buckets[len(out.Buckets)-1]
		out.Now.Time, out.Now.Running, out.Now.Paused, out.Now.Stopped, out.Now.Total = end, last.Running, last.Paused, last.Stopped, last.Total
	}
	for i := range evs {
		e := &evs[i]
		if e.Time.Before(start) {
			continue
		}
		if e.Type == events.Created {
			tenant(e.Owner).Creates++
		}
		if overview.Failure(e) {
			tenant(e.Owner).Failures++
		}
	}
	for _, u := range ov.Tenants {
		if t, ok := tenants[u.User]; ok {
			t.MemoryLimit = u.MemoryBytes
		}
	}
	if op {
		for _, t := range tenants {
			out.Tenants = append(out.Tenants, *t)
		}
		slices.SortFunc(out.Tenants, func(a, b tenantOut) int { return strings.Compare(a.User, b.User) })
	}
	out.Capacity = capacityOut{CPUs: runtime.NumCPU(), MemoryBytes: hostMemory()}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// hostMemory is the daemon host's memory (MemTotal), 0 when unknown.
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemTotal:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
