package e2b

import (
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// extraTemplate keeps the template ID the E2B caller asked for, reported
// back as templateID (agentbox's own name may differ: code-interpreter-v1
// is agentbox's code-interpreter).
const extraTemplate = "e2b_template"

// clientID is what E2B reports as the node a sandbox runs on.
const clientID = "agentbox"

type networkIn struct {
	AllowOut []string `json:"allowOut"`
	DenyOut  []string `json:"denyOut"`
	// Rules are E2B's per-domain transforms: host -> rules, each setting
	// headers on HTTPS requests to the host (agentbox's egress broker).
	Rules map[string][]ruleIn `json:"rules"`
}

type ruleIn struct {
	Transform *struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
}

// rulesOf maps E2B's rules onto egress rules, one per host (E2B applies
// the rules of one host together), in a stable order.
func rulesOf(in map[string][]ruleIn) []sandbox.EgressRule {
	hosts := make([]string, 0, len(in))
	for h := range in {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	var out []sandbox.EgressRule
	for _, h := range hosts {
		r := sandbox.EgressRule{Host: strings.ToLower(h), Headers: map[string]string{}}
		for _, rule := range in[h] {
			if rule.Transform != nil {
				for k, v := range rule.Transform.Headers {
					r.Headers[k] = v
				}
			}
		}
		out = append(out, r)
	}
	return out
}

type createIn struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *float64          `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             *networkIn        `json:"network"`
	// VolumeMounts are E2B's volumes to mount: {name, path}, read-write.
	VolumeMounts []volumeMountOut `json:"volumeMounts"`
}

// volumeMountOut is E2B's SandboxVolumeMount.
type volumeMountOut struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// sandboxOut is E2B's Sandbox (create, connect) merged with its
// SandboxDetail and ListedSandbox: the SDKs read the fields they know.
type sandboxOut struct {
	SandboxID          string            `json:"sandboxID"`
	TemplateID         string            `json:"templateID"`
	Alias              string            `json:"alias,omitempty"`
	ClientID           string            `json:"clientID"`
	EnvdVersion        string            `json:"envdVersion"`
	EnvdAccessToken    string            `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string           `json:"trafficAccessToken"`
	Domain             *string           `json:"domain"`
	StartedAt          *time.Time        `json:"startedAt,omitempty"`
	EndAt              *time.Time        `json:"endAt,omitempty"`
	CPUCount           int               `json:"cpuCount,omitempty"`
	MemoryMB           int64             `json:"memoryMB,omitempty"`
	DiskSizeMB         int64             `json:"diskSizeMB,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	State              string            `json:"state,omitempty"`
	VolumeMounts       []volumeMountOut  `json:"volumeMounts,omitempty"`
}

// mapTemplate maps an E2B template ID or alias onto agentbox's names:
// E2B's default code-interpreter template is agentbox's code-interpreter,
// its default sandbox template is base; every other name (a user template,
// "name:tag") is agentbox's own.
func mapTemplate(id string) string {
	switch id {
	case "", "base":
		return "base"
	case "code-interpreter-v1", "code-interpreter-beta":
		return "code-interpreter"
	}
	return id
}

func (s *Server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

// short is the create/connect answer.
func (s *Server) short(rec *store.Record) sandboxOut {
	traffic := trafficToken(rec.AccessToken)
	return sandboxOut{SandboxID: string(rec.ID), TemplateID: templateOf(rec), Alias: templateOf(rec), ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: rec.AccessToken, TrafficAccessToken: &traffic, Domain: s.domain()}
}

// listed is E2B's ListedSandbox; detail adds the access token and domain.
func (s *Server) listed(rec *store.Record) sandboxOut {
	out := sandboxOut{SandboxID: string(rec.ID), TemplateID: templateOf(rec), Alias: templateOf(rec), ClientID: clientID,
		EnvdVersion: EnvdVersion, Metadata: rec.Metadata, State: stateOf(rec.State)}
	started, end := rec.CreatedAt, rec.EndAt
	out.StartedAt, out.EndAt = &started, &end
	out.CPUCount = int(math.Max(1, math.Ceil(rec.Resources.CPUs)))
	out.MemoryMB = rec.Resources.MemoryBytes >> 20
	out.DiskSizeMB = rec.Resources.DiskBytes >> 20
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	for _, vm := range rec.Volumes {
		out.VolumeMounts = append(out.VolumeMounts, volumeMountOut{Name: vm.Name, Path: vm.Path})
	}
	return out
}

func (s *Server) detail(rec *store.Record) sandboxOut {
	out := s.listed(rec)
	out.EnvdAccessToken = rec.AccessToken
	traffic := trafficToken(rec.AccessToken)
	out.TrafficAccessToken = &traffic
	out.Domain = s.domain()
	return out
}

// templateMatches reports whether rec was created from the template E2B
// calls name: the ID it was created with (code-interpreter-v1), or the
// agentbox template that name maps to, with or without its tag.
func templateMatches(rec *store.Record, name string) bool {
	if templateOf(rec) == name {
		return true
	}
	untag := func(s string) string { return strings.TrimSuffix(s, ":latest") }
	return untag(rec.Template) == untag(mapTemplate(name))
}

func templateOf(rec *store.Record) string {
	if t := rec.Extra[extraTemplate]; t != "" {
		return t
	}
	return rec.Template
}

// stateOf is E2B's state of a sandbox: running or paused. A stopped
// agentbox sandbox (its processes gone, its disk kept) is reported as
// paused, the nearest E2B state: it is not running and it can come back.
func stateOf(st sandbox.State) string {
	if st == sandbox.StateStopped {
		return string(sandbox.StatePaused)
	}
	return string(st)
}

// networkOf maps E2B's network settings onto agentbox's. Without any, the
// server's default mode applies (DEFAULT_NETWORK_MODE, locked down to
// loopback only unless the operator opened it).
func networkOf(in createIn) sandbox.Network {
	var n sandbox.Network
	if in.Network != nil && (len(in.Network.AllowOut) > 0 || len(in.Network.DenyOut) > 0 || len(in.Network.Rules) > 0) {
		n = sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: in.Network.AllowOut, DenyOut: in.Network.DenyOut,
			Rules: rulesOf(in.Network.Rules)}
	}
	if in.AllowInternetAccess != nil {
		switch {
		case *in.AllowInternetAccess && n.Mode == "":
			n.Mode = sandbox.NetworkEgress
		case !*in.AllowInternetAccess && len(n.AllowOut) == 0:
			n = sandbox.Network{Mode: sandbox.NetworkNone}
		case !*in.AllowInternetAccess:
			// No internet but for the allowed destinations.
			n.DenyOut = append(n.DenyOut, "0.0.0.0/0")
		}
	}
	return n
}

// isolationMetadata is the metadata key an E2B create names its
// sandbox's isolation level with (docs/gvisor.md).
const isolationMetadata = "agentbox.isolation"

func (s *Server) create(w http.ResponseWriter, r *http.Request, user string) error {
	var in createIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	timeout, err := seconds("timeout", in.Timeout)
	if err != nil {
		return err
	}
	req := manager.CreateRequest{Template: mapTemplate(in.TemplateID), Timeout: timeout, Env: in.EnvVars,
		Metadata: in.Metadata, Network: networkOf(in)}
	for _, vm := range in.VolumeMounts {
		req.Volumes = append(req.Volumes, sandbox.VolumeMount{Name: vm.Name, Path: vm.Path})
	}
	if in.TemplateID != "" && in.TemplateID != req.Template {
		req.Extra = map[string]string{extraTemplate: in.TemplateID}
	}
	if err := setAutoPause(&req, in.AutoPause); err != nil {
		return err
	}
	// E2B has no isolation field: the metadata entry names the level
	// (TEMPLATE_ISOLATION sets it per template without one).
	if v, ok := in.Metadata[isolationMetadata]; ok {
		if req.Isolation, err = sandbox.ParseIsolation(v); err != nil || req.Isolation == "" {
			return sandbox.Invalid("metadata", "metadata %s must be \"container\" or \"gvisor\", not %q", isolationMetadata, v)
		}
	}
	rec, err := s.m.Create(r.Context(), user, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.short(rec))
	return nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, user string) error {
	rec, err := s.m.Get(r.Context(), user, sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.detail(rec))
	return nil
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request, user string) error {
	if err := s.m.Delete(r.Context(), user, sandboxID(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, user string) error {
	d, given, err := decodeTimeout(w, r)
	if err != nil {
		return err
	}
	if !given {
		return sandbox.Errorf(sandbox.ClassInvalid, "timeout is required")
	}
	if _, err := s.m.SetTimeout(r.Context(), user, sandboxID(r), d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// updateNetwork serves PUT /sandboxes/{id}/network: the running sandbox's
// allow and deny lists and rules are replaced (an omitted field clears
// it); allow_internet_access false is denyOut 0.0.0.0/0. 204.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		networkIn
		AllowInternetAccess *bool `json:"allow_internet_access"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	n := sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: in.AllowOut, DenyOut: in.DenyOut, Rules: rulesOf(in.Rules)}
	if in.AllowInternetAccess != nil && !*in.AllowInternetAccess {
		n.DenyOut = append(n.DenyOut, "0.0.0.0/0")
	}
	if _, err := s.m.UpdateNetwork(r.Context(), user, sandboxID(r), n); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		Duration *float64 `json:"duration"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	d, err := seconds("duration", in.Duration)
	if err != nil {
		return err
	}
	if d > time.Hour {
		return sandbox.Errorf(sandbox.ClassInvalid, "duration must be at most 3600 seconds")
	}
	if d == 0 {
		d = 60 * time.Second
	}
	if _, err := s.m.Refresh(r.Context(), user, sandboxID(r), d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect returns a running sandbox (200) or resumes a paused one (201);
// a timeout makes it live at least that long from now.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, user string) error {
	d, _, err := decodeTimeout(w, r)
	if err != nil {
		return err
	}
	id := sandboxID(r)
	rec, err := s.m.Get(r.Context(), user, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	switch {
	case rec.State == sandbox.StatePaused:
		if rec, err = s.resumeSandbox(r, user, id, d); err != nil {
			return err
		}
		status = http.StatusCreated
	case rec.State == sandbox.StateStopped:
		// Stopped (its processes gone, its disk kept): boot it again, as
		// E2B resumes a sandbox paused without its memory.
		if rec, err = s.m.StartSandbox(r.Context(), user, id); err != nil {
			return err
		}
		if d > 0 {
			if rec, err = s.m.SetTimeout(r.Context(), user, id, d); err != nil {
				return err
			}
		}
		status = http.StatusCreated
	case d > 0 && time.Now().Add(d).After(rec.EndAt):
		if rec, err = s.m.SetTimeout(r.Context(), user, id, d); err != nil {
			return err
		}
	}
	writeJSON(w, status, s.short(rec))
	return nil
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, user string) error {
	if err := s.pauseSandbox(r, user, sandboxID(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resume is E2B's deprecated POST /sandboxes/{id}/resume: 201 with the
// sandbox, 409 when it is not paused.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, user string) error {
	d, _, err := decodeTimeout(w, r)
	if err != nil {
		return err
	}
	rec, err := s.resumeSandbox(r, user, sandboxID(r), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.short(rec))
	return nil
}

// listOptions parses E2B's list filters: metadata is one query parameter
// holding "k=v&k2=v2" with keys and values URL-encoded (the SDKs encode
// them twice), state a comma-separated list, startedAfter a timestamp,
// template a template ID or alias, order asc or desc (by start time, over
// the whole list before it is paged).
func listOptions(q url.Values) (manager.ListOptions, error) {
	var opts manager.ListOptions
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		opts.Oldest = true
	default:
		return opts, sandbox.Errorf(sandbox.ClassInvalid, "order %q: want asc or desc", o)
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return opts, sandbox.Errorf(sandbox.ClassInvalid, "startedAfter %q: want an RFC 3339 timestamp", v)
		}
		opts.StartedAfter = t
	}
	if name := q.Get("template"); name != "" {
		opts.Match = func(rec *store.Record) bool { return templateMatches(rec, name) }
	}
	if raw := q.Get("metadata"); raw != "" {
		pairs, err := url.ParseQuery(raw)
		if err != nil {
			return opts, sandbox.Errorf(sandbox.ClassInvalid, "metadata: want url-encoded key=value pairs: %v", err)
		}
		opts.Metadata = map[string]string{}
		for k, vs := range pairs {
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(vs[len(vs)-1])
			if err1 != nil || err2 != nil {
				return opts, sandbox.Errorf(sandbox.ClassInvalid, "metadata: bad encoding of %q", k)
			}
			opts.Metadata[key] = val
		}
	}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			switch st = strings.TrimSpace(st); st {
			case "running":
				opts.States = append(opts.States, sandbox.StateRunning)
			case "paused":
				opts.States = append(opts.States, sandbox.StatePaused, sandbox.StateStopped)
			case "":
			default:
				return opts, sandbox.Errorf(sandbox.ClassInvalid, "state %q: want running or paused", st)
			}
		}
	}
	return opts, nil
}

// listV2 serves GET /v2/sandboxes: filters, and pages of at most limit
// (default 100) with the next page's token in X-Next-Token.
func (s *Server) listV2(w http.ResponseWriter, r *http.Request, user string) error {
	q := r.URL.Query()
	opts, err := listOptions(q)
	if err != nil {
		return err
	}
	if len(opts.States) == 0 {
		opts.States = []sandbox.State{sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopped}
	}
	opts.Limit = 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return sandbox.Errorf(sandbox.ClassInvalid, "limit must be an integer from 1 to 100")
		}
		opts.Limit = n
	}
	opts.Cursor = q.Get("nextToken")
	page, err := s.m.List(r.Context(), user, opts)
	if err != nil {
		if sandbox.ClassOf(err) == sandbox.ClassInvalid {
			return sandbox.Errorf(sandbox.ClassInvalid, "invalid nextToken")
		}
		return err
	}
	if page.NextCursor != "" {
		w.Header().Set("X-Next-Token", page.NextCursor)
	}
	writeJSON(w, http.StatusOK, s.listOut(page.Records))
	return nil
}

// listV1 serves the older GET /sandboxes: running sandboxes, one page.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request, user string) error {
	opts, err := listOptions(r.URL.Query())
	if err != nil {
		return err
	}
	opts.States = []sandbox.State{sandbox.StateRunning}
	opts.Limit = 1000
	page, err := s.m.List(r.Context(), user, opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.listOut(page.Records))
	return nil
}

func (s *Server) listOut(recs []*store.Record) []sandboxOut {
	out := make([]sandboxOut, 0, len(recs))
	for _, rec := range recs {
		if slices.Contains([]sandbox.State{sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopped}, rec.State) {
			out = append(out, s.listed(rec))
		}
	}
	return out
}

// decodeTimeout reads the {"timeout": seconds} body of setTimeout, connect
// and resume; given says whether the field was there at all.
func decodeTimeout(w http.ResponseWriter, r *http.Request) (d time.Duration, given bool, err error) {
	var in struct {
		Timeout *float64 `json:"timeout"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return 0, false, err
	}
	d, err = seconds("timeout", in.Timeout)
	return d, in.Timeout != nil, err
}
