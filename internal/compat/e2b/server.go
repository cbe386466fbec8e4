// Package e2b serves E2B's control plane (the sandbox lifecycle REST API
// the e2b and @e2b/code-interpreter SDKs call) over the manager, and its
// data plane: requests for port 49983 (the in-sandbox agent, E2B's envd)
// and 49999 (code contexts) of a sandbox, on the daemon's own port.
//
// Callers authenticate with X-API-Key, looked up in the daemon's API keys
// (the same keys and tenants as the native API); another tenant's sandbox
// is as unknown as one never created. Errors have E2B's shape
// {"code": <http status>, "message": "..."}.
package e2b

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/history"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/autobuild"
	"github.com/agentbox/agentbox/internal/webhook"
)

// EnvdVersion is the envd version agentbox's agent speaks, as the SDKs
// read it to gate features (0.3.0 stdin, 0.4.0 default user, 0.5.2
// closeStdin, 0.5.7 octet-stream uploads, 0.6.3 watch entries).
const EnvdVersion = "0.6.3"

// Ports of the data plane.
const (
	EnvdPort    = 49983
	JupyterPort = 49999
)

// Config configures the front-end.
type Config struct {
	// APIKeys maps keys to users, as the native API's. Empty: no
	// authentication, every caller is httpapi.DefaultUser.
	APIKeys map[string]string
	// MaxUploadBytes caps one /files upload through the data plane.
	MaxUploadBytes int64
	// Domain is reported to SDKs as the sandbox domain (E2B_DOMAIN);
	// empty leaves it to the SDK's own setting.
	Domain string
	// Templates is the template store (nil: GET /templates is empty).
	Templates TemplateLister
	// Builtins reports the built-in templates' states (the daemon's
	// background builds, TEMPLATE_AUTO_BUILD): GET /templates lists the
	// ones still building or failed with E2B's build status, as the native
	// API and the console do (nil: only stored templates are listed).
	Builtins func() []autobuild.Status
	// Builder runs the Template SDK's builds (nil: builds are unavailable)
	// in BuildDir (default the system's temporary directory).
	Builder  Builder
	BuildDir string
	// TemplateAdmins see every template and may build, as on the native
	// API.
	TemplateAdmins []string
	// DataPlane is the service the data plane's requests are admitted by
	// (nil: one over the manager).
	DataPlane *dataplane.Service
	// Events serves /events/sandboxes, Webhooks /events/webhooks (whose
	// changes WebhookDispatcher is told about); nil: those routes answer
	// 503. WebhookAllowPrivate is WEBHOOK_ALLOW_PRIVATE.
	Events              *events.Log
	Webhooks            *webhook.Registry
	WebhookDispatcher   *webhook.Dispatcher
	WebhookAllowPrivate bool
	// History answers getMetrics with the sampled points in the range
	// (nil: one sample, now).
	History *history.History
	// VolumeTokenKey signs the volume tokens the volume content API takes
	// (volumes.go); every replica that serves a volume's content needs the
	// same. Empty: a random key, so tokens end with the process.
	VolumeTokenKey []byte
	Logger         *slog.Logger
}

// Server is the E2B front-end.
type Server struct {
	cfg Config
	m   *manager.Manager
	dp  *dataplane.Service
	log *slog.Logger
	// builds are the template builds of the Template SDK's flow.
	builds *buildRegistry
	// volumeKey signs volume tokens (Config.VolumeTokenKey).
	volumeKey []byte
}

// New returns the front-end over m.
func New(cfg Config, m *manager.Manager) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = httpapi.DefaultSettings().MaxUploadBytes
	}
	if cfg.DataPlane == nil {
		cfg.DataPlane = dataplane.New(dataplane.Config{Logger: cfg.Logger}, m, m.Admission())
	}
	key := cfg.VolumeTokenKey
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			panic(fmt.Sprintf("e2b: read random volume token key: %v", err)) // the kernel's random source never fails on Linux
		}
	}
	return &Server{cfg: cfg, m: m, dp: cfg.DataPlane, log: cfg.Logger.With("component", "e2b"), builds: newBuildRegistry(), volumeKey: key}
}

// handler is an authenticated E2B route.
type handler func(w http.ResponseWriter, r *http.Request, user string) error

// Register adds the control-plane routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	h := func(pattern string, fn handler) { mux.Handle(pattern, s.authenticated(fn)) }
	h("POST /sandboxes", s.create)
	h("POST /v2/sandboxes", s.create)
	h("GET /sandboxes", s.listV1)
	h("GET /v2/sandboxes", s.listV2)
	h("GET /sandboxes/{id}", s.get)
	h("DELETE /sandboxes/{id}", s.kill)
	h("POST /sandboxes/{id}/timeout", s.setTimeout)
	h("PUT /sandboxes/{id}/network", s.updateNetwork)
	h("POST /sandboxes/{id}/refreshes", s.refresh)
	h("POST /sandboxes/{id}/connect", s.connect)
	h("POST /v2/sandboxes/{id}/connect", s.connect)
	h("POST /sandboxes/{id}/pause", s.pause)
	h("POST /sandboxes/{id}/resume", s.resume)
	h("GET /sandboxes/{id}/metrics", s.metrics)
	h("GET /sandboxes/{id}/logs", s.logsV1)
	h("GET /v2/sandboxes/{id}/logs", s.logsV2)
	h("GET /events/sandboxes", s.events)
	h("GET /events/sandboxes/{id}", s.events)
	h("POST /events/webhooks", s.createWebhook)
	h("GET /events/webhooks", s.listWebhooks)
	h("GET /events/webhooks/{webhookID}", s.getWebhook)
	h("PATCH /events/webhooks/{webhookID}", s.updateWebhook)
	h("DELETE /events/webhooks/{webhookID}", s.deleteWebhook)
	h("POST /sandboxes/{id}/snapshots", s.createSnapshot)
	h("GET /snapshots", s.listSnapshots)
	h("DELETE /templates/{templateID}", s.deleteSnapshot)
	h("POST /sandboxes/{id}/fork", s.fork)
	s.registerVolumes(mux, h)
	s.registerTemplates(h)
	s.registerUploads(mux)
	s.registerSigned(mux)
}

// authenticated resolves X-API-Key to a user and writes a handler's error
// in E2B's shape.
func (s *Server) authenticated(fn handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := s.authenticate(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		httpapi.SetUser(r, user)
		if err := fn(w, r, user); err != nil {
			writeError(w, r, err)
		}
	})
}

// authenticate maps X-API-Key (or a bearer key, as the native API takes
// it) onto the daemon's API keys.
func (s *Server) authenticate(r *http.Request) (string, error) {
	if len(s.cfg.APIKeys) == 0 {
		return httpapi.DefaultUser, nil
	}
	key := strings.TrimSpace(r.Header.Get("X-API-Key"))
	if key == "" {
		if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			key = strings.TrimSpace(h[7:])
		}
	}
	if key == "" {
		return "", sandbox.Errorf(sandbox.ClassUnauth, "missing API key (X-API-Key header)")
	}
	return httpapi.UserForKey(s.cfg.APIKeys, key)
}

// errorBody is E2B's error shape: the SDKs read code (an HTTP status)
// and message.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers err as E2B does. Internal errors keep their detail
// in the log.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	class := sandbox.ClassOf(err)
	status := httpapi.StatusOf(class)
	msg := err.Error()
	var se *sandbox.Error
	if errors.As(err, &se) {
		msg = se.Msg
	}
	if status == http.StatusInternalServerError {
		slog.Default().Error("e2b request failed", "path", r.URL.Path, "err", err)
		msg = "internal error"
	}
	httpapi.SetRetryAfter(w, err)
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeBody reads an optional JSON object of at most 1 MiB into v.
// Unknown fields are ignored: the SDKs send fields agentbox has no use
// for (mcp, volumeMounts...), and refusing them would break every call.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	body := http.MaxBytesReader(w, r.Body, 1<<20)
	// Read to the end: the server's body timeout stays armed on the
	// connection until the body's EOF is seen, and would cut a later
	// request of the same keep-alive connection.
	defer func() { _, _ = io.Copy(io.Discard, body) }()
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return sandbox.Errorf(sandbox.ClassTooLarge, "request body is over 1 MiB")
		}
		return sandbox.Errorf(sandbox.ClassInvalid, "invalid JSON body: %v", err)
	}
	return nil
}

// seconds turns a JSON number of seconds into a duration, refusing
// nonsense.
func seconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 0 || *v != *v || *v > 10*365*24*3600 {
		return 0, sandbox.Errorf(sandbox.ClassInvalid, "%s must be a positive number of seconds", field)
	}
	return time.Duration(*v * float64(time.Second)), nil
}

func sandboxID(r *http.Request) sandbox.ID { return sandbox.ID(r.PathValue("id")) }
