package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/bootstrap"
)

// BootstrapImporter stores a root filesystem tarball as a template;
// *template.Store is one.
type BootstrapImporter interface {
	Import(ctx context.Context, path, name string, progress func(template.Progress)) (template.Info, error)
}

// BootstrapConfig wires POST /v1/templates/bootstraps.
type BootstrapConfig struct {
	Store BootstrapImporter
	// CacheDir holds bootstrapped tarballs (in the data dir, outside any
	// checkout).
	CacheDir string
	// Bootstrap makes the tarball; nil is bootstrap.Bootstrap.
	Bootstrap func(ctx context.Context, opts bootstrap.Options, out io.Writer) (string, error)
}

// RegisterBootstrap serves POST /v1/templates/bootstraps: the daemon owns
// the template store, so the CLI asks it to bootstrap (as docker build asks
// dockerd to build).
func (s *Server) RegisterBootstrap(cfg BootstrapConfig) {
	if cfg.Bootstrap == nil {
		cfg.Bootstrap = bootstrap.Bootstrap
	}
	const pattern = "POST /v1/templates/bootstraps"
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, s.instrument(pattern, s.authenticated(func(w http.ResponseWriter, r *http.Request) error {
		return s.bootstrapTemplate(w, r, cfg)
	})))
}

type bootstrapBody struct {
	Image   string   `json:"image"`
	Name    string   `json:"name"`
	Include []string `json:"include"`
	Variant string   `json:"variant"`
}

// BootstrapEvent is one line of the bootstrap's NDJSON stream.
type BootstrapEvent struct {
	// Status: "log" (a line of mmdebstrap's output), "downloading",
	// "unpacking", "cached", "done" (Template set) or "error" (Error set).
	Status   string       `json:"status"`
	Message  string       `json:"message,omitempty"`
	Layer    string       `json:"layer,omitempty"`
	Current  int64        `json:"current,omitempty"`
	Total    int64        `json:"total,omitempty"`
	Template *templateOut `json:"template,omitempty"`
	Error    string       `json:"error,omitempty"`
}

// bootstrapTemplate bootstraps body.Image and imports it as body.Name,
// streaming progress as NDJSON. Bad requests fail before the stream with
// a JSON error; failures during it end the stream with an "error" event.
func (s *Server) bootstrapTemplate(w http.ResponseWriter, r *http.Request, cfg BootstrapConfig) error {
	// Only the operator: it runs a package manager as root on the host and
	// fills the store every tenant shares.
	if err := s.templateAdmin(r); err != nil {
		return err
	}
	var body bootstrapBody
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	suite, err := bootstrap.ParseImage(body.Image)
	if err != nil {
		return badRequest("image", "%v", err)
	}
	if _, err := bootstrap.CheckInclude(body.Include); err != nil {
		return badRequest("include", "%v", err)
	}
	if body.Name == "" {
		body.Name = "debian:" + suite
	}
	if cfg.Store == nil || cfg.CacheDir == "" {
		return sandbox.Errorf(sandbox.ClassUnavailable, "template bootstrap is not configured on this server")
	}
	ev := newEventWriter(w)
	lines := &lineEvents{emit: func(line string) { ev.send(BootstrapEvent{Status: "log", Message: line}) }}
	path, err := cfg.Bootstrap(r.Context(), bootstrap.Options{
		Image: body.Image, Include: body.Include, Variant: body.Variant, CacheDir: cfg.CacheDir, Logger: logger(r),
	}, lines)
	lines.flush()
	if err == nil {
		var info template.Info
		info, err = cfg.Store.Import(r.Context(), path, body.Name, func(p template.Progress) {
			if p.Status == "done" {
				// A layer's "done" would read as the bootstrap's own end
				// (the last event, with the template).
				return
			}
			ev.send(BootstrapEvent{Status: p.Status, Layer: p.Layer, Current: p.Current, Total: p.Total})
		})
		if err == nil {
			ev.send(BootstrapEvent{Status: "done", Template: ptr(s.templateJSON(r, info))})
			return nil
		}
	}
	logger(r).Warn("template bootstrap failed", "image", body.Image, "name", body.Name, "err", err)
	if r.Context().Err() == nil {
		ev.send(BootstrapEvent{Status: "error", Error: err.Error()})
	}
	return nil // the stream has started: the error is its last event
}

// eventWriter writes NDJSON events, one flush each; safe for concurrent
// use (mmdebstrap's output and import progress come from other goroutines).
type eventWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	failed  bool
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w)}
}

func (e *eventWriter) send(ev BootstrapEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return // the client is gone; the request's context ends the work
	}
	if !e.started {
		e.started = true
		h := e.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		e.w.WriteHeader(http.StatusOK)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	if _, err := e.w.Write(append(b, '\n')); err != nil {
		e.failed = true
		return
	}
	if err := e.rc.Flush(); err != nil {
		e.failed = true
	}
}

// maxLogLine bounds one "log" event; longer lines are cut.
const maxLogLine = 4 << 10

// lineEvents turns a byte stream into one event per line (\n or \r, so
// progress bars become lines), cutting overlong lines.
type lineEvents struct {
	emit func(string)
	buf  []byte
}

func (l *lineEvents) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' || c == '\r' {
			l.flush()
			continue
		}
		if len(l.buf) < maxLogLine {
			l.buf = append(l.buf, c)
		}
	}
	return len(p), nil
}

func (l *lineEvents) flush() {
	line := strings.ToValidUTF8(string(bytes.TrimSpace(l.buf)), "\uFFFD")
	l.buf = l.buf[:0]
	if line != "" {
		l.emit(line)
	}
}
