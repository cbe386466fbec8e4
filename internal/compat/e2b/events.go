package e2b

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// e2bEvent is a lifecycle event as E2B's events API answers it; the
// native event's cause and exit status ride in eventData.
type e2bEvent struct {
	Version           string         `json:"version"`
	ID                string         `json:"id"`
	Type              string         `json:"type"`
	EventData         map[string]any `json:"eventData"`
	SandboxID         string         `json:"sandboxId"`
	SandboxTeamID     string         `json:"sandboxTeamId"`
	SandboxTemplateID string         `json:"sandboxTemplateId"`
	Timestamp         string         `json:"timestamp"`
}

// e2bTypes maps native types onto E2B's names (E2B has no started,
// stopped, lost or recovered: they are "updated", with the native type
// in eventData).
var e2bTypes = map[events.Type]string{
	events.Created: "sandbox.lifecycle.created", events.Paused: "sandbox.lifecycle.paused",
	events.Resumed: "sandbox.lifecycle.resumed", events.Killed: "sandbox.lifecycle.killed",
	events.Expired: "sandbox.lifecycle.killed", events.Snapshotted: "sandbox.lifecycle.checkpointed",
}

func e2bType(t events.Type) string {
	if n, ok := e2bTypes[t]; ok {
		return n
	}
	return "sandbox.lifecycle.updated"
}

func toE2B(e events.Event) e2bEvent {
	data := map[string]any{"agentbox_type": e.Type, "cause": e.Cause}
	if e.Exit != nil {
		data["exit"] = e.Exit
	}
	for k, v := range e.Data {
		data[k] = v
	}
	if end, ok := e.Data["end_at"]; ok {
		data["set_timeout"] = end
	}
	return e2bEvent{Version: "v1", ID: strconv.FormatUint(e.ID, 10), Type: e2bType(e.Type), EventData: data,
		SandboxID: e.SandboxID, SandboxTeamID: e.Owner, SandboxTemplateID: e.Template,
		Timestamp: e.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00")}
}

// events serves GET /events/sandboxes[/{id}]: the caller's events, newest
// first unless orderAsc=true, with offset, limit (1 to 100, default 10)
// and types (repeated) as E2B takes them.
func (s *Server) events(w http.ResponseWriter, r *http.Request, user string) error {
	if s.cfg.Events == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "events are off on this server (EVENTS_ENABLED=false)")
	}
	v := r.URL.Query()
	offset, limit := 0, 10
	if raw := v.Get("offset"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			return sandbox.Invalid("offset", "offset must be 0 or more")
		}
		offset = n
	}
	if raw := v.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 100 {
			return sandbox.Invalid("limit", "limit must be 1 to 100")
		}
		limit = n
	}
	asc := strings.EqualFold(v.Get("orderAsc"), "true")
	want := v["types"]
	q := events.Query{Owner: user, Sandbox: r.PathValue("id"), Limit: events.MaxLimit}
	// Every matching event of the caller (bounded by retention), then the
	// page: E2B pages newest first by offset.
	var all []e2bEvent
	for range 1000 { // bounded: the log's retention bounds it anyway
		page, err := s.cfg.Events.Query(r.Context(), q)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			if !e.Type.OfSandbox() {
				continue // E2B's events are sandboxes' only
			}
			ev := toE2B(e)
			if len(want) == 0 || slices.Contains(want, ev.Type) {
				all = append(all, ev)
			}
		}
		q.After = page.Next
		if !page.More {
			break
		}
	}
	if !asc {
		slices.Reverse(all)
	}
	out := []e2bEvent{}
	if offset < len(all) {
		out = all[offset:min(len(all), offset+limit)]
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
