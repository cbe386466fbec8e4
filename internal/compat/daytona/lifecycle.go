package daytona

import (
	"net/http"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Daytona's lifecycle beyond start and stop, on agentbox's:
//
//   - autoStopInterval: the sandbox's lifetime (minutes; 0: the server's
//     MAX_TIMEOUT). At its end a backend that can pause pauses it (its
//     memory and disk kept, shown as stopped; start resumes it, and it
//     is destroyed once it stayed paused for the server's PAUSED_TTL);
//     on another backend it is destroyed.
//   - stop keeps the filesystem; the stopped sandbox then lives
//     autoDeleteInterval minutes (0: deleted at once; -1, the default:
//     the server's MAX_TIMEOUT), start gives it its auto-stop lifetime
//     again.
//   - archive: agentbox keeps a stopped sandbox's filesystem on the
//     host's disk either way, so an archived sandbox is a stopped one
//     marked archived (state "archived"); start and recover boot it. The
//     auto-archive interval is kept and shown; it changes nothing.
//   - resize: no backend changes a sandbox's resources after create.

// Front-end data of the lifecycle.
const (
	extraArchived    = "daytona_archived"
	extraAutoArchive = "daytona_autoarchive"
	extraAutoDelete  = "daytona_autodelete"
)

// defaultAutoArchive is Daytona's default auto-archive interval (7 days).
const defaultAutoArchive = 7 * 24 * 60

func (s *Server) registerLifecycle(h func(string, handler)) {
	h("POST /sandbox/{id}/archive", s.archive)
	h("POST /sandbox/{id}/autoarchive/{interval}", s.setAutoArchive)
	h("POST /sandbox/{id}/autodelete/{interval}", s.setAutoDelete)
	h("POST /sandbox/{id}/resize", s.resize)
	h("POST /sandbox/{id}/network-settings", s.updateNetworkSettings)
}

// intervals reads a create's auto-archive and auto-delete intervals into
// the record's front-end data.
func intervals(extra map[string]string, autoArchive, autoDelete *int) error {
	if autoArchive != nil {
		if *autoArchive < 0 {
			return sandbox.Invalid("autoArchiveInterval", "autoArchiveInterval must not be negative")
		}
		extra[extraAutoArchive] = strconv.Itoa(*autoArchive)
	}
	if autoDelete != nil {
		extra[extraAutoDelete] = strconv.Itoa(max(*autoDelete, -1))
	}
	return nil
}

// setLifecycleOut fills the record's lifecycle fields.
func setLifecycleOut(o *sandboxOut, rec *store.Record) {
	o.AutoArchiveInterval = defaultAutoArchive
	if v, err := strconv.Atoi(rec.Extra[extraAutoArchive]); err == nil {
		o.AutoArchiveInterval = v
	}
	o.AutoDeleteInterval = -1
	if v, err := strconv.Atoi(rec.Extra[extraAutoDelete]); err == nil {
		o.AutoDeleteInterval = v
	}
	o.State = daytonaState(rec)
}

// daytonaState is the record's state as Daytona names it (archived: a
// stopped sandbox marked so).
func daytonaState(rec *store.Record) string {
	if rec.Extra[extraArchived] != "" && rec.State == sandbox.StateStopped {
		return "archived"
	}
	return stateOf(rec.State)
}

// stoppedLife is what a sandbox stopped through the API has left to
// live: its auto-delete interval (-1: the server's maximum); del: delete
// it now.
func (s *Server) stoppedLife(rec *store.Record) (d time.Duration, del bool) {
	n, err := strconv.Atoi(rec.Extra[extraAutoDelete])
	switch {
	case err != nil || n < 0:
		return s.lifetime(0), false
	case n == 0:
		return 0, true
	}
	return s.lifetime(n), false
}

// afterStop applies the auto-delete interval to a sandbox just stopped.
func (s *Server) afterStop(r *http.Request, user string, rec *store.Record) (*store.Record, error) {
	d, del := s.stoppedLife(rec)
	if del {
		if err := s.m.Delete(r.Context(), user, rec.ID); err != nil {
			return nil, err
		}
		cp := rec.Clone()
		return cp, nil
	}
	if d <= 0 {
		return rec, nil
	}
	return s.m.SetTimeout(r.Context(), user, rec.ID, d)
}

// afterStart gives a sandbox booted again its auto-stop lifetime and
// clears its archived mark.
func (s *Server) afterStart(r *http.Request, user string, rec *store.Record) (*store.Record, error) {
	if rec.Extra[extraArchived] != "" {
		var err error
		if rec, err = s.m.SetExtra(r.Context(), user, rec.ID, map[string]string{extraArchived: ""}); err != nil {
			return nil, err
		}
	}
	n, _ := strconv.Atoi(rec.Extra[extraAutoStop])
	if d := s.lifetime(n); d > 0 && rec.State == sandbox.StateRunning {
		return s.m.SetTimeout(r.Context(), user, rec.ID, d)
	}
	return rec, nil
}

// archive marks a stopped sandbox archived (Daytona: only a stopped
// sandbox can be archived). A sandbox paused by its auto-stop is
// resumed and stopped first: archived, it holds no memory.
func (s *Server) archive(w http.ResponseWriter, r *http.Request, user string) error {
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	switch rec.State {
	case sandbox.StateStopped:
	case sandbox.StatePaused:
		if _, err := s.m.Resume(r.Context(), user, rec.ID, 0); err != nil {
			return err
		}
		if rec, err = s.m.StopSandbox(r.Context(), user, rec.ID); err != nil {
			return err
		}
	default:
		return sandbox.Errorf(sandbox.ClassInvalid, "Sandbox %s is not stopped: stop it before archiving", rec.ID)
	}
	if _, err := s.m.SetExtra(r.Context(), user, rec.ID, map[string]string{extraArchived: "1"}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) setAutoArchive(w http.ResponseWriter, r *http.Request, user string) error {
	n, err := strconv.Atoi(r.PathValue("interval"))
	if err != nil || n < 0 {
		return sandbox.Invalid("interval", "interval must be a non-negative number of minutes")
	}
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	if n == 0 {
		n = defaultAutoArchive * 4 // Daytona's 0: the maximum (30 days)
	}
	if _, err := s.m.SetExtra(r.Context(), user, rec.ID, map[string]string{extraAutoArchive: strconv.Itoa(n)}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// setAutoDelete sets the auto-delete interval; a sandbox stopped already
// gets it from now (0: deleted at once).
func (s *Server) setAutoDelete(w http.ResponseWriter, r *http.Request, user string) error {
	n, err := strconv.Atoi(r.PathValue("interval"))
	if err != nil {
		return sandbox.Invalid("interval", "interval must be a number of minutes (negative: never)")
	}
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	if rec, err = s.m.SetExtra(r.Context(), user, rec.ID, map[string]string{extraAutoDelete: strconv.Itoa(max(n, -1))}); err != nil {
		return err
	}
	if rec.State == sandbox.StateStopped {
		if _, err := s.afterStop(r, user, rec); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// resize: agentbox's backends fix a sandbox's cpu, memory and disk at
// create.
func (s *Server) resize(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		CPU    *float64 `json:"cpu"`
		Memory *float64 `json:"memory"`
		Disk   *float64 `json:"disk"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.CPU == nil && in.Memory == nil && in.Disk == nil {
		return sandbox.Invalid("cpu", "at least one of cpu, memory or disk must be given")
	}
	if _, err := s.find(r, user, r.PathValue("id")); err != nil {
		return err
	}
	return unsupported("resizing a sandbox (agentbox's backends fix cpu, memory and disk at create; create a new sandbox with the resources it needs, or fork it)")
}
