package daytona

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Front-end data kept with a sandbox's record.
const (
	extraName     = "daytona_name"
	extraUser     = "daytona_user"
	extraSnapshot = "daytona_snapshot"
	extraAutoStop = "daytona_autostop"
)

// DefaultUser is the user a Daytona sandbox reports when the caller names
// none: agentbox's templates run as `user` (home /home/user, work
// directory /workspace), where Daytona's images use `daytona`.
const DefaultUser = "user"

// organizationID is what the records report as their organization: one
// organization per agentbox tenant is all there is.
const organizationID = "agentbox"

func (s *Server) registerControl(h func(string, handler)) {
	h("GET /config", s.config)
	h("POST /sandbox", s.create)
	h("GET /sandbox", s.list)
	h("GET /sandbox/{id}", s.get)
	h("DELETE /sandbox/{id}", s.remove)
	h("POST /sandbox/{id}/start", s.start)
	h("POST /sandbox/{id}/stop", s.stop)
	h("POST /sandbox/{id}/pause", s.stop)
	h("POST /sandbox/{id}/recover", s.start)
	h("PUT /sandbox/{id}/labels", s.replaceLabels)
	h("POST /sandbox/{id}/autostop/{interval}", s.autostop)
	h("POST /sandbox/{id}/last-activity", s.lastActivity)
	h("GET /sandbox/{id}/toolbox-proxy-url", s.toolboxProxyURL)
	h("GET /sandbox/{id}/ports/{port}/preview-url", s.previewURL)
	h("GET /sandbox/{id}/ports/{port}/signed-preview-url", s.signedPreviewURL)
	s.registerLifecycle(h)
	s.registerVolumes(h)
	for _, route := range []string{"POST /sandbox/{id}/fork",
		"POST /sandbox/{id}/snapshot", "POST /sandbox/{id}/backup", "POST /sandbox/{id}/ssh-access", "PUT /sandbox/{id}/secrets",
		"POST /sandbox/{id}/autopause/{interval}",
		"POST /sandbox/{id}/ttl/{ttl}", "POST /sandbox/{id}/public/{public}",
		"GET /sandbox/{id}/signing-key", "POST /sandbox/{id}/signing-key/rotate",
		"GET /secrets", "GET /warm-pools"} {
		h(route, func(w http.ResponseWriter, r *http.Request, _ string) error {
			return unsupported(r.Method + " " + r.Pattern[len(r.Method)+1:])
		})
	}
}

// config is the part of Daytona's GET /config the SDK reads.
func (s *Server) config(w http.ResponseWriter, r *http.Request, _ string) error {
	writeJSON(w, http.StatusOK, map[string]any{"version": "agentbox", "analyticsApiUrl": nil,
		"proxyToolboxUrl": baseURL(r) + Prefix + "/toolbox", "defaultSnapshot": DefaultSnapshot})
	return nil
}

type createIn struct {
	Name             string            `json:"name"`
	Snapshot         string            `json:"snapshot"`
	BuildInfo        json.RawMessage   `json:"buildInfo"`
	User             string            `json:"user"`
	Env              map[string]string `json:"env"`
	Labels           map[string]string `json:"labels"`
	CPU              *float64          `json:"cpu"`
	Memory           *float64          `json:"memory"` // GiB
	Disk             *float64          `json:"disk"`   // GiB
	GPU              *float64          `json:"gpu"`
	AutoStopInterval *int              `json:"autoStopInterval"`
	// network.go, lifecycle.go, volumes.go
	netSettings
	AutoArchiveInterval *int            `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int            `json:"autoDeleteInterval"`
	Volumes             []sandboxVolume `json:"volumes"`
}

// sandboxOut is Daytona's Sandbox DTO, the fields the SDK reads.
type sandboxOut struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name"`
	OrganizationID      string            `json:"organizationId"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	NetworkAllowList    *string           `json:"networkAllowList,omitempty"`
	DomainAllowList     *string           `json:"domainAllowList,omitempty"`
	Target              string            `json:"target"`
	CPU                 int               `json:"cpu"`
	GPU                 int               `json:"gpu"`
	Memory              int64             `json:"memory"`
	Disk                int64             `json:"disk"`
	State               string            `json:"state"`
	DesiredState        string            `json:"desiredState"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Recoverable         bool              `json:"recoverable"`
	BackupState         string            `json:"backupState"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
	Volumes             []sandboxVolume   `json:"volumes"`
	CreatedAt           string            `json:"createdAt"`
	UpdatedAt           string            `json:"updatedAt"`
	LastActivityAt      string            `json:"lastActivityAt,omitempty"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
	DaemonVersion       string            `json:"daemonVersion"`
}

// stateOf is Daytona's state of an agentbox sandbox.
func stateOf(st sandbox.State) string {
	switch st {
	case sandbox.StateRunning:
		return "started"
	case sandbox.StateCreating:
		return "creating"
	case sandbox.StateStopped, sandbox.StatePaused:
		return "stopped"
	case sandbox.StateError, sandbox.StateLost:
		return "error"
	}
	return "unknown"
}

func (s *Server) out(r *http.Request, rec *store.Record) sandboxOut {
	name := rec.Extra[extraName]
	if name == "" {
		name = string(rec.ID)
	}
	user := rec.Extra[extraUser]
	if user == "" {
		user = DefaultUser
	}
	snap := rec.Extra[extraSnapshot]
	if snap == "" {
		snap = rec.Template
	}
	autostop, _ := strconv.Atoi(rec.Extra[extraAutoStop])
	o := sandboxOut{ID: string(rec.ID), Name: name, OrganizationID: organizationID, Snapshot: snap, User: user,
		Env: rec.Env, Labels: rec.Metadata, Target: "agentbox", State: stateOf(rec.State), BackupState: "None",
		CPU:    int(math.Max(1, math.Ceil(rec.Resources.CPUs))),
		Memory: int64(math.Ceil(float64(rec.Resources.MemoryBytes) / (1 << 30))), Disk: int64(math.Ceil(float64(rec.Resources.DiskBytes) / (1 << 30))),
		AutoStopInterval: autostop, Volumes: volumesOut(rec),
		CreatedAt: rec.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: rec.LastActive.UTC().Format(time.RFC3339Nano),
		LastActivityAt:  rec.LastActive.UTC().Format(time.RFC3339Nano),
		ToolboxProxyURL: baseURL(r) + Prefix + "/toolbox", DaemonVersion: "agentbox"}
	setNetworkOut(&o, rec)
	setLifecycleOut(&o, rec)
	o.DesiredState = o.State
	if o.Env == nil {
		o.Env = map[string]string{}
	}
	if o.Labels == nil {
		o.Labels = map[string]string{}
	}
	if rec.State == sandbox.StateError || rec.State == sandbox.StateLost {
		o.ErrorReason = "sandbox is " + string(rec.State)
	}
	return o
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, user string) error {
	var in createIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if len(in.BuildInfo) > 0 && string(in.BuildInfo) != "null" {
		return s.createFromImage(w, r, user, in) // image.go
	}
	if in.GPU != nil && *in.GPU > 0 {
		return unsupported("GPUs")
	}
	if in.Name != "" {
		if _, err := s.find(r, user, in.Name); err == nil {
			return sandbox.Errorf(sandbox.ClassConflict, "a sandbox named %q already exists", in.Name)
		}
	}
	tmpl := in.Snapshot
	if tmpl == "" {
		tmpl = DefaultSnapshot
	}
	// The caller's own snapshot of that name first (snapshots.go), then
	// Daytona's default snapshot names.
	if ref := s.snapshotRef(r.Context(), user, tmpl); ref != tmpl {
		tmpl = ref
	} else {
		tmpl = snapshotAlias(tmpl)
	}
	req := manager.CreateRequest{Template: tmpl, Env: in.Env, Metadata: in.Labels, Extra: map[string]string{}}
	if in.Name != "" {
		req.Extra[extraName] = in.Name
	}
	if in.User != "" {
		req.Extra[extraUser] = in.User
	}
	if in.Snapshot != "" {
		req.Extra[extraSnapshot] = in.Snapshot
	}
	// Daytona stops an idle sandbox after autoStopInterval minutes (15 by
	// default, 0: never); agentbox ends a sandbox at its timeout, which
	// is what it gets, capped by the server's maximum.
	autostop := 15
	if in.AutoStopInterval != nil {
		if *in.AutoStopInterval < 0 {
			return sandbox.Invalid("autoStopInterval", "autoStopInterval must not be negative")
		}
		autostop = *in.AutoStopInterval
	}
	req.Extra[extraAutoStop] = strconv.Itoa(autostop)
	req.Timeout = s.lifetime(autostop)
	// Auto-stop keeps the sandbox (paused) where the backend can pause.
	req.AutoPause = s.m.Backend().Capabilities().Pause
	if err := intervals(req.Extra, in.AutoArchiveInterval, in.AutoDeleteInterval); err != nil {
		return err
	}
	mounts, shown, err := s.createVolumes(r.Context(), user, in.Volumes)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		req.Volumes, req.Extra[extraVolumes] = mounts, shown
	}
	if in.CPU != nil {
		req.Resources.CPUs = *in.CPU
	}
	if in.Memory != nil {
		req.Resources.MemoryBytes = int64(*in.Memory * (1 << 30))
	}
	if in.Disk != nil {
		req.Resources.DiskBytes = int64(*in.Disk * (1 << 30))
	}
	if n, ok, err := s.createNetwork(in.netSettings); err != nil {
		return err
	} else if ok {
		req.Network = n
	}
	rec, err := s.m.Create(r.Context(), user, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.out(r, rec))
	return nil
}

// lifetime is the agentbox timeout of a Daytona auto-stop interval in
// minutes (0: as long as the server allows).
func (s *Server) lifetime(minutes int) time.Duration {
	d := time.Duration(minutes) * time.Minute
	if s.cfg.MaxTimeout > 0 && (d == 0 || d > s.cfg.MaxTimeout) {
		d = s.cfg.MaxTimeout
	}
	return d
}

// find returns user's sandbox by ID or by Daytona name.
func (s *Server) find(r *http.Request, user, idOrName string) (*store.Record, error) {
	if rec, err := s.m.Get(r.Context(), user, sandbox.ID(idOrName)); err == nil {
		return rec, nil
	} else if sandbox.ClassOf(err) != sandbox.ClassNotFound {
		return nil, err
	}
	page, err := s.m.List(r.Context(), user, manager.ListOptions{Limit: 1,
		Match: func(rec *store.Record) bool { return rec.Extra[extraName] == idOrName }})
	if err != nil {
		return nil, err
	}
	if len(page.Records) == 0 {
		return nil, notFound("Sandbox with ID or name %s not found", idOrName)
	}
	return page.Records[0], nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, user string) error {
	id := r.PathValue("id")
	if pending, realID := s.pendingSandbox(r, user, id); pending != nil { // a create waiting for its image (image.go)
		writeJSON(w, http.StatusOK, pending)
		return nil
	} else if realID != "" {
		id = realID
	}
	rec, err := s.find(r, user, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.out(r, rec))
	return nil
}

type listOut struct {
	Items      []sandboxOut `json:"items"`
	Total      int          `json:"total"`
	Page       int          `json:"page"`
	TotalPages int          `json:"totalPages"`
	NextCursor *string      `json:"nextCursor"`
}

// list is GET /sandbox: labels (a JSON object, all pairs must match),
// name, id and states filters, cursor pagination.
func (s *Server) list(w http.ResponseWriter, r *http.Request, user string) error {
	q := r.URL.Query()
	opts := manager.ListOptions{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return sandbox.Invalid("limit", "limit must be between 1 and 1000")
		}
		opts.Limit = n
	}
	if v := q.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &opts.Metadata); err != nil {
			return sandbox.Invalid("labels", "labels must be a JSON object of strings: %v", err)
		}
	}
	name, id, states := q.Get("name"), q.Get("id"), q["states"]
	if name != "" || id != "" || len(states) > 0 {
		opts.Match = func(rec *store.Record) bool {
			if id != "" && string(rec.ID) != id {
				return false
			}
			if name != "" && rec.Extra[extraName] != name && string(rec.ID) != name {
				return false
			}
			if len(states) == 0 {
				return true
			}
			for _, st := range states {
				if st == daytonaState(rec) {
					return true
				}
			}
			return false
		}
	}
	page, err := s.m.List(r.Context(), user, opts)
	if err != nil {
		return err
	}
	out := listOut{Items: []sandboxOut{}, Page: 1, TotalPages: 1}
	for _, rec := range page.Records {
		out.Items = append(out.Items, s.out(r, rec))
	}
	out.Total = len(out.Items)
	if page.NextCursor != "" {
		c := page.NextCursor
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, user string) error {
	id := r.PathValue("id")
	if o, realID := s.deletePending(r, user, id); o != nil { // a create waiting for its image (image.go)
		writeJSON(w, http.StatusOK, o)
		return nil
	} else if realID != "" {
		id = realID
	}
	rec, err := s.find(r, user, id)
	if err != nil {
		return err
	}
	if err := s.m.Delete(r.Context(), user, rec.ID); err != nil {
		return err
	}
	s.sessions.dropSandbox(rec.ID)
	s.ptys.keepOnly(string(rec.ID), nil)
	o := s.out(r, rec)
	o.State, o.DesiredState = "destroyed", "destroyed"
	writeJSON(w, http.StatusOK, o)
	return nil
}

// start boots a stopped sandbox again (a paused one resumes); a running
// one is left as it is.
func (s *Server) start(w http.ResponseWriter, r *http.Request, user string) error {
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	booted := true
	switch rec.State {
	case sandbox.StateStopped:
		rec, err = s.m.StartSandbox(r.Context(), user, rec.ID)
	case sandbox.StatePaused:
		rec, err = s.m.Resume(r.Context(), user, rec.ID, 0)
	default:
		booted = false
	}
	if err != nil {
		return err
	}
	if booted {
		if rec, err = s.afterStart(r, user, rec); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, s.out(r, rec))
	return nil
}

// stop ends a sandbox's processes and keeps its filesystem (Daytona's
// stop); start boots it again.
func (s *Server) stop(w http.ResponseWriter, r *http.Request, user string) error {
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	if rec.State == sandbox.StateRunning {
		if rec, err = s.m.StopSandbox(r.Context(), user, rec.ID); err != nil {
			return err
		}
		s.sessions.dropSandbox(rec.ID)
		s.ptys.keepOnly(string(rec.ID), nil)
		if rec, err = s.afterStop(r, user, rec); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, s.out(r, rec))
	return nil
}

func (s *Server) replaceLabels(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		Labels map[string]string `json:"labels"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	if rec, err = s.m.SetMetadata(r.Context(), user, rec.ID, in.Labels); err != nil {
		return err
	}
	labels := rec.Metadata
	if labels == nil {
		labels = map[string]string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"labels": labels})
	return nil
}

// autostop sets the sandbox's life from now to interval minutes (0: the
// server's maximum).
func (s *Server) autostop(w http.ResponseWriter, r *http.Request, user string) error {
	n, err := strconv.Atoi(r.PathValue("interval"))
	if err != nil || n < 0 {
		return sandbox.Invalid("interval", "interval must be a non-negative number of minutes")
	}
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, err := s.m.SetExtra(r.Context(), user, rec.ID, map[string]string{extraAutoStop: strconv.Itoa(n)}); err != nil {
		return err
	}
	if d := s.lifetime(n); d > 0 && rec.State == sandbox.StateRunning {
		if _, err := s.m.SetTimeout(r.Context(), user, rec.ID, d); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) lastActivity(w http.ResponseWriter, r *http.Request, user string) error {
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	s.m.Touch(rec.ID)
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) toolboxProxyURL(w http.ResponseWriter, r *http.Request, user string) error {
	if _, err := s.find(r, user, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"url": baseURL(r) + Prefix + "/toolbox"})
	return nil
}

// preview signs a preview token of the path's port for ttl.
func (s *Server) preview(r *http.Request, user string, ttl time.Duration) (rec *store.Record, port int, token, url string, err error) {
	if s.cfg.PreviewToken == nil {
		return nil, 0, "", "", unsupported("preview URLs")
	}
	port, err = strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return nil, 0, "", "", sandbox.Invalid("port", "port must be 1-65535")
	}
	if rec, err = s.find(r, user, r.PathValue("id")); err != nil {
		return nil, 0, "", "", err
	}
	token, path, err := s.cfg.PreviewToken(r.Context(), user, rec.ID, port, ttl)
	if err != nil {
		return nil, 0, "", "", err
	}
	return rec, port, token, baseURL(r) + path + "/", nil
}

// previewURL is getPreviewLink: the preview's URL and a token to send in
// x-daytona-preview-token (valid a week: Daytona's token lives as long as
// the sandbox).
func (s *Server) previewURL(w http.ResponseWriter, r *http.Request, user string) error {
	rec, _, token, url, err := s.preview(r, user, 0)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxId": string(rec.ID), "url": url, "token": token})
	return nil
}

// signedPreviewURL is getSignedPreviewUrl: a URL that carries its token
// (expiresInSeconds, default an hour).
func (s *Server) signedPreviewURL(w http.ResponseWriter, r *http.Request, user string) error {
	ttl := time.Hour
	if v := r.URL.Query().Get("expiresInSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return sandbox.Invalid("expiresInSeconds", "expiresInSeconds must be a positive number")
		}
		ttl = time.Duration(n) * time.Second
	}
	rec, port, token, url, err := s.preview(r, user, ttl)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxId": string(rec.ID), "port": port, "token": token,
		"url": url + "?agentbox_token=" + token})
	return nil
}
