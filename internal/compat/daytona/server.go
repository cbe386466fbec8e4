// Package daytona serves Daytona's API over agentbox, so the unmodified
// Daytona SDKs (@daytonaio/sdk, daytona for Python) drive agentbox
// sandboxes: the control plane under /api (the DAYTONA_API_URL a user
// sets ends in /api, as Daytona's own), and the toolbox, which Daytona
// runs in each sandbox and reaches through a proxy, under
// /api/toolbox/{sandboxId}/... (the sandbox record's toolboxProxyUrl).
//
// Callers authenticate with Authorization: Bearer <key>, looked up in the
// daemon's API keys (the same keys and tenants as every other door);
// another tenant's sandbox is as unknown as one never created. Everything
// done inside a sandbox goes through the shared data plane. Errors have
// Daytona's shape {"statusCode", "message", "code", "error"}.
package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Prefix is the path of Daytona's API on the daemon's listener.
const Prefix = "/api"

// DefaultSnapshot is the template a sandbox created without a snapshot
// gets: Python, Node and git, as Daytona's default snapshot has.
const DefaultSnapshot = "base"

// snapshotAlias maps the names of Daytona's own default snapshots, which
// code written for Daytona's cloud passes as they are, onto DefaultSnapshot:
// daytona-small, -medium and -large (one image in three sizes there; here
// the create's resources size the sandbox) and the image they are built
// from, daytonaio/sandbox[:tag]. Any other name is agentbox's own.
func snapshotAlias(name string) string {
	switch name {
	case "daytona-small", "daytona-medium", "daytona-large", "daytonaio/sandbox":
		return DefaultSnapshot
	}
	if strings.HasPrefix(name, "daytonaio/sandbox:") {
		return DefaultSnapshot
	}
	return name
}

// Config configures the front end.
type Config struct {
	// APIKeys maps keys to users, as the native API's. Empty: any bearer
	// key is the default user.
	APIKeys map[string]string
	// MaxTimeout caps a sandbox's life (the server's MAX_TIMEOUT); zero
	// leaves it to the manager.
	MaxTimeout time.Duration
	// MaxOutput caps the output kept of one command.
	MaxOutput int64
	// PreviewToken signs a preview token of a sandbox port and gives the
	// preview's path (the shared server's; nil: previews unavailable).
	PreviewToken func(ctx context.Context, owner string, id sandbox.ID, port int, ttl time.Duration) (token, path string, err error)
	// DataPlane is the service every toolbox request goes through.
	DataPlane *dataplane.Service
	// Peers serves a request by the replica that runs its sandbox, for
	// one addressed by name (nil: one replica).
	Peers  Peers
	Logger *slog.Logger

	// Templates is the template store snapshots are (nil: no snapshots).
	Templates Templates
	// Builder builds snapshots from images (nil: no builds).
	Builder Builder
	// TemplateAdmins may build snapshots (TEMPLATE_ADMIN_USERS).
	TemplateAdmins []string
	// BuildDir holds build contexts and the uploaded context files.
	BuildDir string
	// MaxContextBytes caps one uploaded build context (default 1 GiB).
	MaxContextBytes int64
}

// Peers serves a request by the live replica that runs sandbox id,
// reporting false (having written nothing) when that is this one or none.
type Peers interface {
	ServeBy(w http.ResponseWriter, r *http.Request, id sandbox.ID) bool
}

// Server is the Daytona front end.
type Server struct {
	cfg      Config
	m        *manager.Manager
	dp       *dataplane.Service
	log      *slog.Logger
	sessions *sessionRegistry
	ptys     ptySizes
	builds   *buildRegistry   // snapshot builds (snapshots.go)
	pending  *pendingRegistry // creates waiting for their image (image.go)
	objects  *objectStore     // uploaded build contexts (objectstore.go)
}

// New returns the front end over m.
func New(cfg Config, m *manager.Manager) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 8 << 20
	}
	if cfg.DataPlane == nil {
		cfg.DataPlane = dataplane.New(dataplane.Config{Logger: cfg.Logger}, m, m.Admission())
	}
	if cfg.BuildDir == "" {
		cfg.BuildDir = filepath.Join(os.TempDir(), "agentbox-daytona-builds")
	}
	return &Server{cfg: cfg, m: m, dp: cfg.DataPlane, log: cfg.Logger.With("component", "daytona"), sessions: newSessionRegistry(),
		builds: newBuildRegistry(), pending: newPendingRegistry(),
		objects: newObjectStore(filepath.Join(cfg.BuildDir, "daytona-contexts"), cfg.MaxContextBytes)}
}

// handler is an authenticated Daytona route.
type handler func(w http.ResponseWriter, r *http.Request, user string) error

// Register adds the control plane and the toolbox to mux.
func (s *Server) Register(mux *http.ServeMux) {
	h := func(pattern string, fn handler) {
		method, path, _ := strings.Cut(pattern, " ")
		if s.cfg.Peers != nil && strings.HasPrefix(path, "/sandbox/{id}") {
			fn = s.onItsReplica(fn)
		}
		mux.Handle(method+" "+Prefix+path, s.authenticated(fn))
	}
	s.registerControl(h)
	s.registerImages(h)
	s.registerToolbox(h)
	// The S3 subset build contexts are uploaded through authenticates by
	// its session token, not a bearer key (objectstore.go).
	mux.HandleFunc(Prefix+s3Path+"/", s.serveS3)
	// Anything else under /api is a Daytona route agentbox does not serve:
	// Daytona's 404 shape, never the native one.
	mux.Handle(Prefix+"/", s.authenticated(func(w http.ResponseWriter, r *http.Request, _ string) error {
		return notFound("route %s %s is not served by agentbox's Daytona API", r.Method, r.URL.Path)
	}))
}

// authenticated resolves the bearer key to a user and writes a handler's
// error in Daytona's shape. The Authorization header is required even
// without API keys: it keeps every route out of a web page's reach
// without a CORS preflight, which is never granted.
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

func (s *Server) authenticate(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if len(h) < 8 || !strings.EqualFold(h[:7], "bearer ") || strings.TrimSpace(h[7:]) == "" {
		return "", sandbox.Errorf(sandbox.ClassUnauth, "missing API key (Authorization: Bearer <DAYTONA_API_KEY>)")
	}
	if len(s.cfg.APIKeys) == 0 {
		return httpapi.DefaultUser, nil
	}
	return httpapi.UserForKey(s.cfg.APIKeys, strings.TrimSpace(h[7:]))
}

// errorBody is Daytona's error shape: the SDK reads message, code and
// source, and picks its error class by statusCode.
type errorBody struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Code       string `json:"code"`
	Error      string `json:"error"`
	Source     string `json:"source,omitempty"`
	Timestamp  string `json:"timestamp"`
	Path       string `json:"path"`
}

// unsupportedError is a Daytona feature agentbox does not offer: 501 with
// a message that says so.
type unsupportedError struct{ what string }

func (e *unsupportedError) Error() string {
	return e.what + " is not supported by agentbox's Daytona API (see docs/daytona.md)"
}

func unsupported(what string) error { return &unsupportedError{what} }

// codedError carries one of Daytona's toolbox error codes (source
// DAYTONA_DAEMON), which the SDK maps to its specific error classes.
type codedError struct {
	status int
	code   string
	msg    string
}

func (e *codedError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return sandbox.Errorf(sandbox.ClassNotFound, format, args...)
}

// writeError answers err as Daytona does. Internal errors keep their
// detail in the log.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		status  int
		msg     = err.Error()
		code    string
		source  string
		unsup   *unsupportedError
		coded   *codedError
		sbError *sandbox.Error
	)
	switch {
	case errors.As(err, &unsup):
		status, code = http.StatusNotImplemented, "NOT_IMPLEMENTED"
	case errors.As(err, &coded):
		status, code, source = coded.status, coded.code, "DAYTONA_DAEMON"
	default:
		status = httpapi.StatusOf(sandbox.ClassOf(err))
		if errors.As(err, &sbError) {
			msg = sbError.Msg
		}
		code = strings.ToUpper(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	}
	if status == http.StatusInternalServerError {
		slog.Default().Error("daytona request failed", "path", r.URL.Path, "err", err)
		msg = "internal error"
	}
	httpapi.SetRetryAfter(w, err)
	writeErrorBody(w, r, status, code, source, msg)
}

func writeErrorBody(w http.ResponseWriter, r *http.Request, status int, code, source, msg string) {
	writeJSON(w, status, errorBody{StatusCode: status, Message: msg, Code: code, Error: http.StatusText(status),
		Source: source, Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Path: r.URL.Path})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeBody reads an optional JSON object of at most 1 MiB into v.
// Unknown fields are ignored: the SDK sends fields agentbox has no use
// for.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	body := http.MaxBytesReader(w, r.Body, 1<<20)
	defer func() { _, _ = io.Copy(io.Discard, body) }()
	if err := json.NewDecoder(body).Decode(v); err != nil {
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

// baseURL is the scheme and host the caller reached the daemon at, for
// the URLs the records carry (toolboxProxyUrl, previews).
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// statusOfErr is the HTTP status of a data-plane or manager error.
func statusOfErr(err error) int { return httpapi.StatusOf(sandbox.ClassOf(err)) }

// onItsReplica serves a request for a sandbox another replica runs by
// that replica. By ID the cluster forwarder did so before the request
// got here; by name only this front end can tell which sandbox it is.
func (s *Server) onItsReplica(fn handler) handler {
	return func(w http.ResponseWriter, r *http.Request, user string) error {
		idOrName := r.PathValue("id")
		if s.m.Hosts(sandbox.ID(idOrName)) {
			return fn(w, r, user)
		}
		rec, err := s.find(r, user, idOrName)
		if err == nil && !s.m.Hosts(rec.ID) && s.cfg.Peers.ServeBy(w, r, rec.ID) {
			return nil
		}
		return fn(w, r, user)
	}
}
