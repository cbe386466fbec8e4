// Package httpapi serves the native HTTP API (/v1), health and metrics
// routes, over the manager. Errors have one JSON shape, mapped from error
// classes in errors.go.
package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/history"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/template/autobuild"
	"github.com/agentbox/agentbox/internal/version"
	"github.com/agentbox/agentbox/internal/webhook"
)

// Config configures the API.
type Config struct {
	// APIKeys maps keys to users. Empty: no authentication, every caller is
	// user "default".
	APIKeys map[string]string
	// MaxUploadBytes caps file uploads.
	MaxUploadBytes int64
	Logger         *slog.Logger
	// Registry receives HTTP metrics and is served at /metrics.
	Registry *prometheus.Registry
	// PreviewDomain, when set, serves port P of sandbox ID at the host name
	// P-ID.PreviewDomain, each its own browser origin. Every name under it
	// belongs to previews, never to the API.
	PreviewDomain string
	// MetricsToken is the operator's bearer token for /metrics. Empty:
	// /metrics is refused when API keys are configured (tenants must not
	// read other tenants' figures), and open on a keyless loopback server.
	MetricsToken string
	// PreviewSecret signs preview tokens; keep it across restarts so issued
	// tokens stay valid.
	PreviewSecret []byte
	// PreviewMaxPerUser bounds the preview requests one user has in flight
	// (PREVIEW_MAX_PER_USER; 0: no bound).
	PreviewMaxPerUser int
	// PreviewHeaderTimeout bounds the wait for the response headers of a
	// sandbox's server (PREVIEW_HEADER_TIMEOUT; 0: its default).
	PreviewHeaderTimeout time.Duration
	// NoVNCDir holds noVNC's client for the desktop page (default
	// DESKTOP_NOVNC_DIR's).
	NoVNCDir string

	// Templates is the template store (nil: the template routes answer
	// unavailable).
	Templates TemplateStore
	// TemplateAdmins are the users who may pull, import, export and delete
	// templates (default: DefaultUser, the keyless operator and the
	// BEARER_TOKEN user).
	TemplateAdmins []string
	// MaxImportBytes caps an imported tarball (default MaxUploadBytes).
	MaxImportBytes int64
	// ImportDir receives uploaded tarballs while they are imported (the
	// store's tmp dir; default the system's).
	ImportDir string
	// AcquireTemplateOp waits for a turn among the server's concurrent
	// template operations (default: NewTemplateGate(TEMPLATE_MAX_PULLS's default)).
	AcquireTemplateOp func(ctx context.Context) (release func(), err error)

	// DataPlane is the service every route that works inside a sandbox
	// goes through (default: one over the manager).
	DataPlane *dataplane.Service

	// Nodes lists the replicas for GET /v1/nodes (nil: the route answers
	// that there is no node registry).
	Nodes NodeLister
	// BuiltinTemplates reports the built-in templates' states (ready,
	// building with progress, failed with why, not built) for GET
	// /v1/templates (nil: none are reported).
	BuiltinTemplates func() []autobuild.Status
	// Bootstrap, Builds and Tools, when set, add the routes of template
	// bootstraps, Dockerfile builds and the tool kit (MCP and function
	// calling): see RegisterBootstrap, RegisterBuilds, RegisterTools.
	Bootstrap *BootstrapConfig
	Builds    *BuildConfig
	Tools     *mcpserver.HTTP
	// Events serves GET /v1/events and its stream; Webhooks the webhook
	// routes, whose changes WebhookDispatcher is told about (nil: the
	// routes answer that events are off). WebhookAllowPrivate lets
	// webhooks target private and loopback addresses.
	Events *events.Log
	// History serves GET /v1/sandboxes/{id}/metrics (nil: 503, history
	// is off).
	History *history.History
	// Audit records every state-changing request and serves GET
	// /v1/audit (nil: none recorded, the route answers 503).
	Audit *audit.Log
	// Secrets serves /v1/secrets (nil: 503).
	Secrets             *secrets.Vault
	Webhooks            *webhook.Registry
	WebhookDispatcher   *webhook.Dispatcher
	WebhookAllowPrivate bool
	// Doors are the protocol front ends sharing the server's port,
	// mounted in this order (see Door): the first that owns a refused
	// request words its refusal.
	Doors []Door
}

// Server is the HTTP API.
type Server struct {
	cfg     Config
	m       *manager.Manager
	dp      *dataplane.Service // everything inside a sandbox
	log     *slog.Logger
	mux     *http.ServeMux
	handler http.Handler
	reqDur  *prometheus.HistogramVec
	nodes   NodeLister // GET /v1/nodes (nodes.go)
	doors   []Door     // the protocol front ends (door.go)

	previewTransport *http.Transport
	previews         previewGate // preview requests in flight per user (preview.go)
	tickets          ptyTickets  // the console's terminal tickets (console.go)
	started          time.Time
	// bodyRules are POST routes whose body is not JSON (BodyRule).
	bodyRules []BodyRule
	// previewHeaders carry preview tokens for doors' clients
	// (PreviewTokenDoor).
	previewHeaders []string
	// sandboxPorts are the doors' data planes (PortDoor, dataplane.go).
	sandboxPorts []sandboxPortHandler
	// streamsEnd is closed by EndStreams: event streams end (events.go).
	streamsEnd chan struct{}
	endStreams sync.Once
	// patterns are the /v1 route patterns (every one), for checking them
	// against the OpenAPI document (openapi_test.go).
	patterns []string
}

// DefaultUser is who callers are when no API keys are configured.
const DefaultUser = "default"

// New builds the API over m.
func New(cfg Config, m *manager.Manager) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = defaults.MaxUploadBytes
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.TemplateAdmins == nil {
		cfg.TemplateAdmins = []string{DefaultUser}
	}
	if cfg.MaxImportBytes == 0 {
		cfg.MaxImportBytes = cfg.MaxUploadBytes
	}
	if cfg.AcquireTemplateOp == nil {
		cfg.AcquireTemplateOp = NewTemplateGate(defaults.TemplateMaxPulls)
	}
	if cfg.DataPlane == nil {
		cfg.DataPlane = dataplane.New(dataplane.Config{Logger: cfg.Logger}, m, m.Admission())
	}
	if cfg.PreviewHeaderTimeout <= 0 {
		cfg.PreviewHeaderTimeout = defaults.PreviewHeaderTimeout
	}
	s := &Server{cfg: cfg, m: m, dp: cfg.DataPlane, log: cfg.Logger, mux: http.NewServeMux(), started: time.Now(), nodes: cfg.Nodes,
		streamsEnd: make(chan struct{})}
	s.reqDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "agentbox_http_request_seconds", Help: "HTTP request latency by route and status class.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
	}, []string{"route", "code"})
	cfg.Registry.MustRegister(s.reqDur)
	if len(s.cfg.PreviewSecret) == 0 {
		s.cfg.PreviewSecret = []byte(newRequestID() + newRequestID())
	}
	s.previewTransport = s.newPreviewTransport()
	s.previews = previewGate{max: cfg.PreviewMaxPerUser}
	s.routes()
	if cfg.Bootstrap != nil {
		s.RegisterBootstrap(*cfg.Bootstrap)
	}
	if cfg.Builds != nil {
		s.RegisterBuilds(*cfg.Builds)
	}
	if cfg.Tools != nil {
		s.RegisterTools(cfg.Tools)
	}
	s.mountDoors(cfg.Doors)
	s.cfg.PreviewDomain = strings.ToLower(s.cfg.PreviewDomain)
	s.handler = s.withRequestContext(s.withPreviewHosts(s.withSandboxHeaders(s.withBrowserGuard(s.mux))))
	return s
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() {
	v1 := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		s.patterns = append(s.patterns, pattern)
		s.mux.Handle(pattern, s.instrument(pattern, s.authenticated(h)))
	}
	v1("POST /v1/sandboxes", s.createSandbox)
	v1("GET /v1/sandboxes", s.listSandboxes)
	v1("GET /v1/sandboxes/{id}", s.getSandbox)
	v1("DELETE /v1/sandboxes/{id}", s.deleteSandbox)
	v1("POST /v1/sandboxes/{id}/timeout", s.setTimeout)
	v1("POST /v1/sandboxes/{id}/refresh", s.refresh)
	v1("GET /v1/sandboxes/{id}/stats", s.stats)
	v1("GET /v1/sandboxes/{id}/metrics", s.metricsHistory)
	s.auditRoutes()
	v1("GET /v1/sandboxes/{id}/logs", s.logs)
	v1("POST /v1/sandboxes/{id}/exec", s.exec)
	v1("GET /v1/sandboxes/{id}/execs", s.execHistory)
	v1("POST /v1/sandboxes/{id}/code", s.execCode)
	v1("POST /v1/sandboxes/{id}/code/contexts", s.createCodeContext)
	v1("GET /v1/sandboxes/{id}/code/contexts", s.listCodeContexts)
	v1("POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart", s.restartCodeContext)
	v1("DELETE /v1/sandboxes/{id}/code/contexts/{ctx}", s.deleteCodeContext)
	v1("GET /v1/sandboxes/{id}/pty", s.pty)
	v1("GET /v1/sandboxes/{id}/files", s.download)
	v1("PUT /v1/sandboxes/{id}/files", s.upload)
	v1("DELETE /v1/sandboxes/{id}/files", s.removeFile)
	v1("GET /v1/sandboxes/{id}/files/stat", s.statFile)
	v1("GET /v1/sandboxes/{id}/files/list", s.listFiles)
	v1("POST /v1/sandboxes/{id}/files/mkdir", s.makeDir)
	v1("POST /v1/sandboxes/{id}/files/move", s.moveFile)
	v1("GET /v1/sandboxes/{id}/files/watch", s.watchFiles)
	v1("PUT /v1/sandboxes/{id}/network", s.updateNetwork)
	v1("POST /v1/sandboxes/{id}/stop", s.stopSandbox)
	v1("POST /v1/sandboxes/{id}/start", s.startSandbox)
	v1("POST /v1/sandboxes/{id}/snapshot", s.snapshotSandbox)
	v1("POST /v1/sandboxes/{id}/fork", s.forkSandbox)
	v1("POST /v1/sandboxes/{id}/pause", s.pauseSandbox)
	v1("POST /v1/sandboxes/{id}/resume", s.resumeSandbox)
	v1("POST /v1/sandboxes/{id}/preview-tokens", s.createPreviewToken)
	// Previews: every method (the patterns are recorded for the route
	// check against the OpenAPI document, which describes them under GET).
	s.patterns = append(s.patterns, "/v1/sandboxes/{id}/ports/{port}/{path...}", "/v1/sandboxes/{id}/ports/{port}")
	s.mux.Handle("/v1/sandboxes/{id}/ports/{port}/{path...}", s.instrument("/v1/sandboxes/{id}/ports/{port}/", http.HandlerFunc(s.previewByPath)))
	s.mux.Handle("/v1/sandboxes/{id}/ports/{port}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only the path and query: an absolute-form request line
		// ("GET http://elsewhere/v1/…") would otherwise send the client
		// to its host.
		u := url.URL{Path: r.URL.Path + "/", RawQuery: r.URL.RawQuery}
		http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
	}))
	v1("POST /v1/sessions/{session_id}/connect", s.connectSession)
	v1("POST /v1/sessions/{session_id}/release", s.releaseSession)
	s.templatesRoutes(v1)
	s.volumeRoutes(v1)
	s.consoleRoutes(v1)
	s.browserRoutes(v1)
	s.desktopRoutes(v1)
	s.recordRoutes(v1)
	s.eventRoutes(v1)
	s.secretRoutes(v1)
	v1("GET /v1/info", s.info)
	s.nodesRoutes(v1)
	v1("GET /v1/openapi.yaml", func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/yaml")
		_, err := w.Write(api.OpenAPI)
		return err
	})
	// Anything else under /v1 is a JSON 404, not the mux's text page.
	v1("/v1/", func(w http.ResponseWriter, r *http.Request) error {
		return sandbox.Errorf(sandbox.ClassNotFound, "no route %s %s", r.Method, r.URL.Path)
	})
	s.mux.Handle("GET /metrics", s.metricsHandler(promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{})))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.m.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyUser
	keyLogger
	keyAccess
)

// access is what the access log line of a request reports beyond the
// request itself; handlers deeper in the chain fill it in.
type access struct {
	user    string
	preview bool // the preview proxy served it (not audited)
}

// SetUser records who a request was authenticated as, for the access log.
// Every route family calls it once it knows the user.
func SetUser(r *http.Request, user string) {
	if a, ok := r.Context().Value(keyAccess).(*access); ok {
		a.user = user
	}
}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(keyRequestID).(string)
	return id
}

func logger(r *http.Request) *slog.Logger {
	if l, ok := r.Context().Value(keyLogger).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// userOf returns the authenticated user of a request.
func userOf(r *http.Request) string {
	u, _ := r.Context().Value(keyUser).(string)
	return u
}

// withRequestContext gives every request an id (kept from X-Request-Id when
// sane), a logger carrying it, an access log line and panic recovery.
func (s *Server) withRequestContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if len(id) == 0 || len(id) > 64 || strings.ContainsAny(id, " \t\r\n") {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		log := s.log.With("request_id", id)
		acc := &access{}
		ctx, span := startRequestSpan(r)
		if sc := span.SpanContext(); sc.IsValid() {
			log = log.With("trace_id", sc.TraceID().String())
		}
		ctx = context.WithValue(context.WithValue(ctx, keyRequestID, id), keyLogger, log)
		ctx = context.WithValue(ctx, keyAccess, acc)
		r = r.WithContext(ctx)
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(p)
				}
				log.Error("panic serving request", "panic", p, "path", r.URL.Path)
				if !rec.wrote {
					writeError(rec, r, fmt.Errorf("panic: %v", p))
				}
			}
			level := slog.LevelInfo
			if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/metrics" {
				level = slog.LevelDebug
			}
			log.Log(r.Context(), level, "request", "method", r.Method, "path", r.URL.Path,
				"status", rec.status(), "duration_ms", float64(time.Since(start).Microseconds())/1000, "user", acc.user)
			s.recordAudit(r, acc, rec.status(), time.Since(start))
			endRequestSpan(span, r, acc, rec.status())
		}()
		next.ServeHTTP(rec, r)
	})
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// instrument records latency per route pattern.
func (s *Server) instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		code := "2xx"
		if rec, ok := w.(*statusRecorder); ok {
			code = fmt.Sprintf("%dxx", rec.status()/100)
		}
		s.reqDur.WithLabelValues(route, code).Observe(time.Since(start).Seconds())
	})
}

// authenticated checks the bearer key, puts the user in the context and
// turns a handler's error into the JSON error response.
func (s *Server) authenticated(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := s.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentbox"`)
			writeError(w, r, err)
			return
		}
		SetUser(r, user)
		r = r.WithContext(context.WithValue(r.Context(), keyUser, user))
		if err := h(w, r); err != nil {
			if rec, ok := w.(*statusRecorder); ok && rec.wrote {
				// Too late for an error response (a stream was under way).
				logger(r).Warn("request failed after the response started", "err", err)
				return
			}
			writeError(w, r, err)
		}
	})
}

// authenticate returns the user of the request's API key. Without keys
// everyone is DefaultUser; what keeps web pages out of a keyless server is
// the browser guard (guard.go), in front of every route.
func (s *Server) authenticate(r *http.Request) (string, error) {
	if len(s.cfg.APIKeys) == 0 {
		return DefaultUser, nil
	}
	if user, ok, err := s.ticketUser(r); ok {
		return user, err
	}
	return UserForKey(s.cfg.APIKeys, bearerToken(r))
}

// LoopbackHost reports whether a Host header names this machine's loopback.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// UserForKey returns the user a key belongs to, comparing in constant time.
func UserForKey(keys map[string]string, key string) (string, error) {
	if key == "" {
		return "", sandbox.Errorf(sandbox.ClassUnauth, "missing API key (Authorization: Bearer <key>)")
	}
	user := ""
	for k, u := range keys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			user = u
		}
	}
	if user == "" {
		return "", sandbox.Errorf(sandbox.ClassUnauth, "invalid API key")
	}
	return user, nil
}

// KeyUser returns the user of the API key a request carries (as a bearer
// token, or E2B's X-API-Key), DefaultUser without keys, "" when it carries
// no key of keys. A replica forwarding a request uses it to count the
// request against its user; the replica that serves it authenticates it.
func KeyUser(keys map[string]string, r *http.Request) string {
	if len(keys) == 0 {
		return DefaultUser
	}
	for _, key := range []string{bearerToken(r), strings.TrimSpace(r.Header.Get("X-API-Key"))} {
		if key == "" {
			continue
		}
		if user, err := UserForKey(keys, key); err == nil {
			return user
		}
	}
	return ""
}

func bearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// decodeJSON reads a JSON body of at most limit bytes into v. Unknown
// fields, trailing data, and oversized bodies are errors naming the problem.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, optional bool) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) && optional:
		return nil
	case errors.Is(err, io.EOF):
		return badRequest("", "request body is empty; a JSON object is required")
	default:
		var tooBig *http.MaxBytesError
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return sandbox.Errorf(sandbox.ClassTooLarge, "request body is over %d bytes", limit)
		case errors.As(err, &syntax):
			return badRequest("", "malformed JSON at byte %d: %v", syntax.Offset, err)
		case errors.As(err, &typeErr):
			return badRequest(typeErr.Field, "field %q: want %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badRequest(field, "unknown field %q", field)
		}
		return badRequest("", "invalid JSON: %v", err)
	}
	if dec.More() {
		return badRequest("", "trailing data after the JSON object")
	}
	return nil
}

// statusRecorder remembers the status code and whether anything was written.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if !s.wrote {
		s.code, s.wrote = http.StatusOK, true
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// templateKinds maps each registered template name to its kind ("host",
// "dir"): where an operator's directory lives on the host is none of a
// tenant's business.
func templateKinds(templates map[string]string) map[string]string {
	kinds := make(map[string]string, len(templates))
	for name, t := range templates {
		kind, _, _ := strings.Cut(t, ":")
		kinds[name] = kind
	}
	return kinds
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{
		"version":      version.Version,
		"backend":      s.m.Backend().Name(),
		"capabilities": s.m.Backend().Capabilities(),
		"templates":    templateKinds(s.m.Templates()),
		"pools":        s.m.PoolLevels(),
		"user":         userOf(r),
		// The isolation levels this server creates sandboxes at, and the
		// one a create of this user naming none gets.
		"isolation": map[string]any{"levels": s.m.Isolations(), "default": s.m.DefaultIsolation(userOf(r))},
	})
	return nil
}
