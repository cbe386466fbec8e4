package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/autobuild"
)

// Templates are server-wide: every caller may list them and create
// sandboxes from them, but pulling, importing, exporting and deleting
// change (or copy out) what every tenant shares, so only the users of
// TEMPLATE_ADMIN_USERS may do those (by default "default": the keyless
// loopback operator and the BEARER_TOKEN user).

// TemplateStore is what the template routes need of the template store
// (*template.Store implements it).
type TemplateStore interface {
	List(ctx context.Context) ([]template.Info, error)
	Get(ctx context.Context, ref string) (template.Info, error)
	Delete(ctx context.Context, ref string) error
	Pull(ctx context.Context, ref, name string, opts template.PullOptions, progress func(template.Progress)) (template.Info, error)
	Import(ctx context.Context, path, name string, progress func(template.Progress)) (template.Info, error)
	Export(ctx context.Context, ref, format string, w io.Writer) error
}

// Limits of what an API caller may name.
const (
	maxRefLen      = 512 // an image reference or template name
	maxPullBody    = 16 << 10
	progressPeriod = 100 * time.Millisecond
)

// templatesRoutes registers the template routes.
func (s *Server) templatesRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("GET /v1/templates", s.listTemplates)
	v1("GET /v1/templates/{name}", s.getTemplate)
	v1("DELETE /v1/templates/{name}", s.deleteTemplate)
	v1("GET /v1/templates/{name}/export", s.exportTemplate)
	v1("POST /v1/templates/pulls", s.pullTemplate)
	v1("POST /v1/templates/imports", s.importTemplate)
	s.bodyRules = append(s.bodyRules, BodyRule{MediaType: "application/x-tar", Match: func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.URL.Path == "/v1/templates/imports"
	}})
}

// templates returns the store, or an error when the server has none.
func (s *Server) templates() (TemplateStore, error) {
	if s.cfg.Templates == nil {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "this server has no template store")
	}
	return s.cfg.Templates, nil
}

// templateAdmin refuses callers who may not change templates.
func (s *Server) templateAdmin(r *http.Request) error {
	if s.isTemplateAdmin(r) {
		return nil
	}
	return sandbox.Errorf(sandbox.ClassForbidden, "templates are shared by every user of this server: only its operator (TEMPLATE_ADMIN_USERS) may pull, import, export or delete them; user %q may list them and create sandboxes from them", userOf(r))
}

func (s *Server) isTemplateAdmin(r *http.Request) bool {
	return slices.Contains(s.cfg.TemplateAdmins, userOf(r))
}

// templateRef is the {name} of a template route, checked.
// namedTemplate returns the store and the template name of a
// /v1/templates/{name} request.
func (s *Server) namedTemplate(r *http.Request) (TemplateStore, string, error) {
	st, err := s.templates()
	if err != nil {
		return nil, "", err
	}
	ref, err := templateRef(r)
	return st, ref, err
}

func templateRef(r *http.Request) (string, error) {
	ref := r.PathValue("name")
	if err := checkRef("name", ref); err != nil {
		return "", err
	}
	return ref, nil
}

// checkRef refuses names no template or image can have, before they
// reach the store (which parses them fully).
func checkRef(field, v string) error {
	switch {
	case v == "":
		return badRequest(field, "%s is required", field)
	case len(v) > maxRefLen:
		return badRequest(field, "%s is over %d bytes", field, maxRefLen)
	}
	for _, c := range v {
		if c <= ' ' || c == 0x7f || c == '\\' {
			return badRequest(field, "%s %q has a space, control character or backslash", field, v)
		}
	}
	return nil
}

// checkPlatform accepts "" or os/arch[/variant].
func checkPlatform(p string) error {
	if p == "" {
		return nil
	}
	parts := strings.Split(p, "/")
	ok := len(parts) == 2 || len(parts) == 3
	for _, part := range parts {
		ok = ok && part != "" && len(part) <= 32 && strings.Trim(part, "abcdefghijklmnopqrstuvwxyz0123456789_.-") == "" &&
			strings.Trim(part[:1], "abcdefghijklmnopqrstuvwxyz0123456789") == ""
	}
	if !ok {
		return badRequest("platform", "platform %q: want os/arch or os/arch/variant, e.g. linux/amd64", p)
	}
	return nil
}

// templateVisible reports whether the caller may see a template: shared
// ones, its own private ones (snapshots), and everything for an admin.
func (s *Server) templateVisible(r *http.Request, info template.Info) bool {
	name := info.Name
	if info.Tag != "" {
		name += ":" + info.Tag
	}
	return template.VisibleTo(name, userOf(r)) || s.isTemplateAdmin(r)
}

// templateJSON is what a caller sees of a template: a non-admin caller
// never learns where an operator's directory or an imported file is on
// the host.
func (s *Server) templateJSON(r *http.Request, info template.Info) templateOut {
	if !s.isTemplateAdmin(r) && (info.Kind == sandbox.TemplateDir || strings.HasPrefix(info.Source, "/")) {
		info.Source = ""
	}
	out := templateOut{Info: info, Layers: info.Layers}
	if out.Layers == nil {
		out.Layers = []template.LayerInfo{}
	}
	return out
}

// templateOut is a template on the wire: layers always a list ("[]" for
// host and dir templates), so clients can count them.
type templateOut struct {
	template.Info
	Layers []template.LayerInfo `json:"layers"`
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	st, err := s.templates()
	if err != nil {
		return err
	}
	list, err := st.List(r.Context())
	if err != nil {
		return err
	}
	out := make([]templateOut, 0, len(list))
	for _, info := range list {
		if s.templateVisible(r, info) {
			out = append(out, s.templateJSON(r, info))
		}
	}
	resp := map[string]any{"templates": out}
	if s.cfg.BuiltinTemplates != nil {
		resp["builtin"] = builtinJSON(s.cfg.BuiltinTemplates(), time.Now())
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// builtinOut is a built-in template's state on the wire (GET
// /v1/templates "builtin").
type builtinOut struct {
	autobuild.Status
	ElapsedMS  int64 `json:"elapsed_ms,omitempty"`
	EstimateMS int64 `json:"estimate_ms,omitempty"`
}

func builtinJSON(list []autobuild.Status, now time.Time) []builtinOut {
	out := make([]builtinOut, 0, len(list))
	for _, st := range list {
		out = append(out, builtinOut{Status: st, ElapsedMS: st.Elapsed(now).Milliseconds(), EstimateMS: st.Estimate.Milliseconds()})
	}
	return out
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	st, ref, err := s.namedTemplate(r)
	if err != nil {
		return err
	}
	info, err := st.Get(r.Context(), ref)
	if err != nil {
		return err
	}
	if !s.templateVisible(r, info) {
		return sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", ref)
	}
	writeJSON(w, http.StatusOK, s.templateJSON(r, info))
	return nil
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	st, ref, err := s.namedTemplate(r)
	if err != nil {
		return err
	}
	// A user's own snapshots are theirs to delete; everything else is
	// shared and the operator's, and other users' snapshots are unknown.
	switch user := userOf(r); {
	case template.IsPrivate(ref) && template.VisibleTo(ref, user):
	case !template.VisibleTo(ref, user) && !s.isTemplateAdmin(r):
		return sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", ref)
	default:
		if err := s.templateAdmin(r); err != nil {
			return err
		}
	}
	if err := st.Delete(r.Context(), ref); err != nil {
		return err
	}
	logger(r).Info("template deleted", "template", ref, "user", userOf(r))
	s.m.RecordTemplateDeleted(userOf(r), ref)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pullBody is the request of POST /v1/templates/pulls.
type pullBody struct {
	Image    string `json:"image"`
	Name     string `json:"name"`
	Platform string `json:"platform"`
}

func (s *Server) pullTemplate(w http.ResponseWriter, r *http.Request) error {
	st, err := s.templates()
	if err != nil {
		return err
	}
	if err := s.templateAdmin(r); err != nil {
		return err
	}
	var body pullBody
	if err := decodeJSON(w, r, maxPullBody, &body, false); err != nil {
		return err
	}
	if err := checkRef("image", body.Image); err != nil {
		return err
	}
	if body.Name != "" {
		if err := checkRef("name", body.Name); err != nil {
			return err
		}
	}
	if err := checkPlatform(body.Platform); err != nil {
		return err
	}
	return s.templateOp(w, r, "pull", func(ctx context.Context, progress func(template.Progress)) (template.Info, error) {
		return st.Pull(ctx, body.Image, body.Name, template.PullOptions{Platform: body.Platform}, progress)
	})
}

func (s *Server) importTemplate(w http.ResponseWriter, r *http.Request) error {
	st, err := s.templates()
	if err != nil {
		return err
	}
	if err := s.templateAdmin(r); err != nil {
		return err
	}
	name := r.URL.Query().Get("name")
	if err := checkRef("name", name); err != nil {
		return err
	}
	// The body goes to a file, never to memory: charged as a request.
	release, err := s.admit(r, 0, 0)
	if err != nil {
		return err
	}
	defer release()
	path, err := s.spoolImport(w, r)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	return s.templateOp(w, r, "import", func(ctx context.Context, progress func(template.Progress)) (template.Info, error) {
		return st.Import(ctx, path, name, progress)
	})
}

// spoolImport writes the request body to a new file in the import
// directory, bounded by MaxImportBytes, and returns its path.
func (s *Server) spoolImport(w http.ResponseWriter, r *http.Request) (string, error) {
	limit := s.cfg.MaxImportBytes
	if r.ContentLength > limit {
		return "", sandbox.Errorf(sandbox.ClassTooLarge, "import of %d bytes is over the limit of %d bytes (TEMPLATE_MAX_IMPORT)", r.ContentLength, limit)
	}
	dir := s.cfg.ImportDir
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("import dir: %w", err)
	}
	f, err := os.CreateTemp(dir, "import-*.tar")
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, limit))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return f.Name(), nil
	}
	os.Remove(f.Name())
	var tooBig *http.MaxBytesError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &tooBig):
		return "", sandbox.Errorf(sandbox.ClassTooLarge, "import is over the limit of %d bytes (TEMPLATE_MAX_IMPORT)", limit)
	case errors.Is(err, syscall.ENOSPC):
		return "", sandbox.Errorf(sandbox.ClassNoSpace, "no space left in the template store for the import")
	case errors.As(err, &timeout) && timeout.Timeout():
		return "", badRequest("", "request body stalled: nothing arrived for too long (BODY_TIMEOUT)")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "", badRequest("", "request body ended before its Content-Length")
	}
	return "", fmt.Errorf("import: write upload: %w", err)
}

// templateOp runs a long store operation (pull, import) under the
// caller's admission and the server's bound on concurrent template
// operations (waiting for a turn), and answers with the template: one
// JSON object (201), or with Accept: application/x-ndjson a stream of
// progress events ending in a "done" or an "error" event.
func (s *Server) templateOp(w http.ResponseWriter, r *http.Request, what string, op func(context.Context, func(template.Progress)) (template.Info, error)) error {
	release, err := s.admit(r, 0, 0)
	if err != nil {
		return err
	}
	defer release()
	done, err := s.cfg.AcquireTemplateOp(r.Context())
	if err != nil {
		return err
	}
	defer done()
	log := logger(r)
	if !wantsNDJSON(r) {
		info, err := op(r.Context(), func(template.Progress) {})
		if err != nil {
			return err
		}
		log.Info("template "+what, "template", info.Name+":"+info.Tag, "digest", info.Digest, "user", userOf(r))
		writeJSON(w, http.StatusCreated, s.templateJSON(r, info))
		return nil
	}
	ps := newProgressStream(w)
	info, err := op(r.Context(), ps.progress)
	if err != nil {
		ps.fail(r, err)
		return nil
	}
	log.Info("template "+what, "template", info.Name+":"+info.Tag, "digest", info.Digest, "user", userOf(r))
	ps.send(templateEvent{Type: "done", Template: ptr(s.templateJSON(r, info))})
	return nil
}

func ptr[T any](v T) *T { return &v }

// templateEvent is one line of a template operation's NDJSON stream.
type templateEvent struct {
	Type string `json:"type"` // "progress", "done", "error"
	*template.Progress
	Template *templateOut `json:"template,omitempty"`
	Error    *errorBody   `json:"error,omitempty"`
}

// progressStream writes a template operation's events. The store may
// report progress from several goroutines (layers in parallel), so writes
// are serialized; repeated reports of one layer in one status are thinned
// to one per progressPeriod.
type progressStream struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	enc  *json.Encoder
	last map[string]progressMark
	err  error // the first write error: the client went away
}

type progressMark struct {
	status string
	at     time.Time
}

func newProgressStream(w http.ResponseWriter) *progressStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ps := &progressStream{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w), last: map[string]progressMark{}}
	_ = ps.rc.Flush()
	return ps
}

func (ps *progressStream) progress(p template.Progress) {
	ps.mu.Lock()
	now := time.Now()
	m, seen := ps.last[p.Layer]
	if seen && m.status == p.Status && now.Sub(m.at) < progressPeriod && p.Total != p.Current {
		ps.mu.Unlock()
		return
	}
	if len(ps.last) < 4096 { // bounded: an image has at most a few hundred layers
		ps.last[p.Layer] = progressMark{status: p.Status, at: now}
	}
	ps.mu.Unlock()
	ps.send(templateEvent{Type: "progress", Progress: &p})
}

func (ps *progressStream) send(ev templateEvent) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.err != nil {
		return
	}
	if err := ps.enc.Encode(ev); err != nil {
		ps.err = err
		return
	}
	ps.err = ps.rc.Flush()
}

// fail ends the stream with the error in the API's one error shape.
func (ps *progressStream) fail(r *http.Request, err error) {
	rec := &errorRecorder{header: http.Header{}}
	writeError(rec, r, err)
	var body errorBody
	if json.Unmarshal(rec.body, &body) != nil {
		body = errorBody{Code: string(sandbox.ClassInternal), Message: "internal error", RequestID: requestID(r)}
	}
	ps.send(templateEvent{Type: "error", Error: &body})
}

// errorRecorder captures what writeError answers, so a stream can carry
// the same error object (mapped and logged in the one place).
type errorRecorder struct {
	header http.Header
	body   []byte
}

func (e *errorRecorder) Header() http.Header { return e.header }
func (e *errorRecorder) WriteHeader(int)     {}
func (e *errorRecorder) Write(b []byte) (int, error) {
	e.body = append(e.body, b...)
	return len(b), nil
}

func (s *Server) exportTemplate(w http.ResponseWriter, r *http.Request) error {
	st, err := s.templates()
	if err != nil {
		return err
	}
	if err := s.templateAdmin(r); err != nil {
		return err
	}
	ref, err := templateRef(r)
	if err != nil {
		return err
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "docker"
	}
	if format != "docker" && format != "oci" {
		return badRequest("format", "format %q: want docker or oci", format)
	}
	if _, err := st.Get(r.Context(), ref); err != nil {
		return err
	}
	release, err := s.admit(r, 0, 0)
	if err != nil {
		return err
	}
	defer release()
	done, err := s.cfg.AcquireTemplateOp(r.Context())
	if err != nil {
		return err
	}
	defer done()
	lw := &lazyTarWriter{w: w, filename: exportFilename(ref, format)}
	err = st.Export(r.Context(), ref, format, lw)
	if err != nil && lw.started {
		// A tar cut short must not look complete: drop the connection
		// instead of ending the chunked body cleanly.
		logger(r).Warn("template export failed after the response started", "template", ref, "err", err)
		panic(http.ErrAbortHandler)
	}
	return err
}

// lazyTarWriter sends the response headers with the first byte, so an
// export that fails at once still gets a JSON error.
type lazyTarWriter struct {
	w        http.ResponseWriter
	filename string
	started  bool
}

func (l *lazyTarWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		h := l.w.Header()
		h.Set("Content-Type", "application/x-tar")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": l.filename}))
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}

// exportFilename is a safe file name for a template's export.
func exportFilename(ref, format string) string {
	name := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' {
			return c
		}
		return '_'
	}, ref)
	return name + "." + format + ".tar"
}

// NewTemplateGate bounds concurrent template operations to n, waiting for
// a turn (the caller's context ends the wait). The API and the daemon's
// automatic pulls share one.
func NewTemplateGate(n int) func(context.Context) (func(), error) {
	sem := make(chan struct{}, max(1, n))
	return func(ctx context.Context) (func(), error) {
		select {
		case sem <- struct{}{}:
			var once sync.Once
			return func() { once.Do(func() { <-sem }) }, nil
		case <-ctx.Done():
			return nil, sandbox.Errorf(sandbox.ClassTimeout, "gave up waiting for a turn among the server's template operations (TEMPLATE_MAX_PULLS): %v", ctx.Err())
		}
	}
}
