package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/settings"
	"github.com/agentbox/agentbox/internal/store"
)

const maxJSONBody = 4 << 20

// size is a byte count given as a JSON number or a string like "512M".
type size int64

func (s *size) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		*s = size(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("want a number of bytes or a size string like \"512M\"")
	}
	v, err := settings.ParseSize(str)
	if err != nil {
		return err
	}
	*s = size(v)
	return nil
}

type resourcesIn struct {
	Memory size    `json:"memory"`
	CPUs   float64 `json:"cpus"`
	PIDs   int64   `json:"pids"`
	Disk   size    `json:"disk"`
}

type networkJSON struct {
	Mode     string   `json:"mode,omitempty"`
	AllowOut []string `json:"allow_out,omitempty"`
	DenyOut  []string `json:"deny_out,omitempty"`
	// Rules are the egress broker's (docs/secrets.md).
	Rules []sandbox.EgressRule `json:"rules,omitempty"`
}

type createBody struct {
	Template  string            `json:"template"`
	Timeout   float64           `json:"timeout"`
	Env       map[string]string `json:"env"`
	Metadata  map[string]string `json:"metadata"`
	Resources *resourcesIn      `json:"resources"`
	Network   *networkJSON      `json:"network"`
	// Service false creates the sandbox without its template's service.
	Service *bool `json:"service"`
	// AutoPause pauses the sandbox at its timeout instead of deleting it.
	AutoPause bool `json:"auto_pause"`
	// Isolation is "container" or "gvisor" ("": the server's default).
	Isolation string `json:"isolation"`
	// Volumes are the caller's volumes to mount.
	Volumes []sandbox.VolumeMount `json:"volumes"`
}

// seconds converts a JSON seconds value to a duration, refusing nonsense.
func seconds(field string, v float64) (time.Duration, error) {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 10*365*24*3600 {
		return 0, badRequest(field, "%s must be a positive number of seconds", field)
	}
	return time.Duration(v * float64(time.Second)), nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var body createBody
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	isolation, err := sandbox.ParseIsolation(body.Isolation)
	if err != nil {
		return badRequest("isolation", "isolation must be \"container\" or \"gvisor\", not %q", body.Isolation)
	}
	req := manager.CreateRequest{Template: body.Template, Timeout: timeout, Env: body.Env, Metadata: body.Metadata,
		NoService: body.Service != nil && !*body.Service, AutoPause: body.AutoPause, Isolation: isolation, Volumes: body.Volumes}
	if body.Resources != nil {
		req.Resources = sandbox.Resources{MemoryBytes: int64(body.Resources.Memory), CPUs: body.Resources.CPUs,
			PIDs: body.Resources.PIDs, DiskBytes: int64(body.Resources.Disk)}
	}
	if body.Network != nil {
		req.Network = sandbox.Network{Mode: sandbox.NetworkMode(body.Network.Mode),
			AllowOut: body.Network.AllowOut, DenyOut: body.Network.DenyOut, Rules: body.Network.Rules}
	}
	rec, err := s.m.Create(r.Context(), userOf(r), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sandboxJSON(rec))
	return nil
}

// sandboxOut is the Sandbox schema of the spec.
type sandboxOut struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"`
	Type        string            `json:"type,omitempty"`
	State       string            `json:"state"`
	CreatedAt   time.Time         `json:"created_at"`
	EndAt       time.Time         `json:"end_at"`
	Metadata    map[string]string `json:"metadata"`
	Env         map[string]string `json:"env"`
	Resources   resourcesOut      `json:"resources"`
	Network     networkJSON       `json:"network"`
	SessionKey  string            `json:"session_key,omitempty"`
	AccessToken string            `json:"access_token"`
	FromPool    bool              `json:"from_pool"`
	AutoPause   bool              `json:"auto_pause"`
	Isolation   string            `json:"isolation"`
	// Volumes are the volumes mounted at create.
	Volumes []sandbox.VolumeMount `json:"volumes,omitempty"`
	// Provider names the remote provider the sandbox runs at.
	Provider string `json:"provider,omitempty"`
	// PausedAt and RemainingSeconds are set while the sandbox is paused:
	// when it was paused and the running time Resume gives back.
	PausedAt         *time.Time `json:"paused_at,omitempty"`
	RemainingSeconds *float64   `json:"remaining_seconds,omitempty"`
}

type resourcesOut struct {
	Memory int64   `json:"memory"`
	CPUs   float64 `json:"cpus"`
	PIDs   int64   `json:"pids"`
	Disk   int64   `json:"disk"`
}

func sandboxJSON(rec *store.Record) sandboxOut {
	md, env := rec.Metadata, rec.Env
	if md == nil {
		md = map[string]string{}
	}
	if env == nil {
		env = map[string]string{}
	}
	out := sandboxOut{
		ID: string(rec.ID), Template: rec.Template, Type: rec.Type, State: string(rec.State),
		CreatedAt: rec.CreatedAt, EndAt: rec.EndAt, Metadata: md, Env: env,
		Resources: resourcesOut{Memory: rec.Resources.MemoryBytes, CPUs: rec.Resources.CPUs,
			PIDs: rec.Resources.PIDs, Disk: rec.Resources.DiskBytes},
		Network:    networkJSON{Mode: string(rec.Network.Mode), AllowOut: rec.Network.AllowOut, DenyOut: rec.Network.DenyOut, Rules: rec.Network.Rules},
		SessionKey: rec.SessionKey, AccessToken: rec.AccessToken, FromPool: rec.FromPool, AutoPause: rec.AutoPause,
		Isolation: string(rec.Isolation.Or(sandbox.IsolationContainer)),
		Volumes:   rec.Volumes,
		Provider:  rec.Provider,
	}
	if rec.State == sandbox.StatePaused {
		at, left := rec.PausedAt, rec.Remaining.Seconds()
		out.PausedAt, out.RemainingSeconds = &at, &left
	}
	return out
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	opts := manager.ListOptions{Cursor: q.Get("next_token")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("limit", "limit must be an integer from 1 to 1000")
		}
		opts.Limit = n
	}
	if v := q.Get("metadata"); v != "" {
		md, err := url.ParseQuery(v)
		if err != nil {
			return badRequest("metadata", "metadata must be URL-encoded k=v pairs")
		}
		opts.Metadata = map[string]string{}
		for k, vs := range md {
			opts.Metadata[k] = vs[0]
		}
	}
	if v := q.Get("state"); v != "" {
		for _, st := range strings.Split(v, ",") {
			switch sandbox.State(st) {
			case sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopped, sandbox.StateLost:
				opts.States = append(opts.States, sandbox.State(st))
			default:
				return badRequest("state", "unknown state %q", st)
			}
		}
	}
	page, err := s.m.List(r.Context(), userOf(r), opts)
	if err != nil {
		return err
	}
	out := struct {
		Sandboxes []sandboxOut `json:"sandboxes"`
		NextToken string       `json:"next_token,omitempty"`
	}{Sandboxes: make([]sandboxOut, 0, len(page.Records)), NextToken: page.NextCursor}
	for _, rec := range page.Records {
		out.Sandboxes = append(out.Sandboxes, sandboxJSON(rec))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) error {
	var body networkJSON
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	rec, err := s.m.UpdateNetwork(r.Context(), userOf(r), sandboxID(r), sandbox.Network{
		Mode: sandbox.NetworkMode(body.Mode), AllowOut: body.AllowOut, DenyOut: body.DenyOut, Rules: body.Rules})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.m.StopSandbox(r.Context(), userOf(r), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}

func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.m.StartSandbox(r.Context(), userOf(r), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}

func sandboxID(r *http.Request) sandbox.ID { return sandbox.ID(r.PathValue("id")) }

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.m.Get(r.Context(), userOf(r), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.Delete(r.Context(), userOf(r), sandboxID(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Timeout *float64 `json:"timeout"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	if body.Timeout == nil {
		return badRequest("timeout", "timeout is required")
	}
	d, err := seconds("timeout", *body.Timeout)
	if err != nil {
		return err
	}
	rec, err := s.m.SetTimeout(r.Context(), userOf(r), sandboxID(r), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Duration float64 `json:"duration"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, true); err != nil {
		return err
	}
	d, err := seconds("duration", body.Duration)
	if err != nil {
		return err
	}
	rec, err := s.m.Refresh(r.Context(), userOf(r), sandboxID(r), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	st, err := s.m.Stats(r.Context(), userOf(r), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request) error {
	limit := 1000
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return badRequest("limit", "limit must be an integer from 1 to 10000")
		}
		limit = n
	}
	entries, err := s.m.Logs(r.Context(), userOf(r), sandboxID(r), limit)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []manager.LogEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": entries})
	return nil
}

// Sessions.

type sessionBody struct {
	UserID  string            `json:"user_id"`
	Types   []string          `json:"types"`
	Timeout float64           `json:"timeout"`
	Env     map[string]string `json:"env"`
}

func (s *Server) connectSession(w http.ResponseWriter, r *http.Request) error {
	var body sessionBody
	if err := decodeJSON(w, r, maxJSONBody, &body, true); err != nil {
		return err
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	key := manager.SessionKey(r.PathValue("session_id"), body.UserID)
	recs, err := s.m.ConnectSession(r.Context(), userOf(r), key, body.Types, manager.CreateRequest{Timeout: timeout, Env: body.Env})
	if err != nil {
		return err
	}
	out := struct {
		SessionKey string       `json:"session_key"`
		Sandboxes  []sandboxOut `json:"sandboxes"`
	}{SessionKey: key}
	for _, rec := range recs {
		out.Sandboxes = append(out.Sandboxes, sandboxJSON(rec))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) releaseSession(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		UserID string `json:"user_id"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, true); err != nil {
		return err
	}
	key := manager.SessionKey(r.PathValue("session_id"), body.UserID)
	ids, err := s.m.ReleaseSession(r.Context(), userOf(r), key)
	if err != nil {
		return err
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, string(id))
	}
	writeJSON(w, http.StatusOK, map[string]any{"released": out})
	return nil
}

func (s *Server) snapshotSandbox(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Name string `json:"name"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	info, err := s.m.Snapshot(r.Context(), userOf(r), sandboxID(r), body.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}
