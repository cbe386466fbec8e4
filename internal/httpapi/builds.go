package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/builder"
	"github.com/agentbox/agentbox/internal/template/layer"
)

// Builder builds Dockerfiles; *builder.Builder is one.
type Builder interface {
	Build(ctx context.Context, opts builder.Options) (builder.Result, error)
}

// BuildConfig wires POST /v1/templates/builds.
type BuildConfig struct {
	Builder Builder
	// Store names the result in the answer (nil: the result's own info).
	Store TemplateStore
}

// Limits of a build request's options part.
const (
	maxBuildOptions    = 4 << 20 // the JSON part, secrets included
	maxBuildTags       = 16
	maxBuildArgs       = 256
	maxBuildSecrets    = 64
	maxDockerfileBytes = 4 << 20
)

// buildOptions is the "options" part of a build request.
type buildOptions struct {
	Tags       []string          `json:"tags"`
	Dockerfile string            `json:"dockerfile"` // path in the context; default "Dockerfile"
	BuildArgs  map[string]string `json:"build_args"`
	Target     string            `json:"target"`
	NoCache    bool              `json:"no_cache"`
	// Secrets are the values of RUN --mount=type=secret by id (base64 in
	// JSON): they travel in the body, never in a header or the URL.
	Secrets map[string][]byte `json:"secrets"`
}

// buildEvent is one line of a build's NDJSON stream: the builder's events,
// and a last "done" (with the template) or "error" (with the error).
type buildEvent struct {
	builder.Event
	Template *templateOut `json:"template,omitempty"`
	Error    *errorBody   `json:"error,omitempty"`
}

// RegisterBuilds serves POST /v1/templates/builds.
func (s *Server) RegisterBuilds(cfg BuildConfig) {
	const pattern = "POST /v1/templates/builds"
	s.patterns = append(s.patterns, pattern)
	s.bodyRules = append(s.bodyRules, BodyRule{MediaType: "multipart/form-data", Match: func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.URL.Path == "/v1/templates/builds"
	}})
	s.mux.Handle(pattern, s.instrument(pattern, s.authenticated(func(w http.ResponseWriter, r *http.Request) error {
		return s.buildTemplate(w, r, cfg)
	})))
}

// buildTemplate builds a Dockerfile. The body is multipart/form-data: an
// "options" part (JSON, buildOptions) first, then a "context" part, the
// build context as a tar stream. The context goes to a file in the import
// directory (bounded by MaxImportBytes), is unpacked with the layer rules
// (hostile-input safe) into a directory of its own, and both are removed
// when the build ends.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request, cfg BuildConfig) error {
	// Only the operator: builds fill the store every tenant shares.
	if err := s.templateAdmin(r); err != nil {
		return err
	}
	if cfg.Builder == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "Dockerfile builds are not available on this server")
	}
	release, err := s.admit(r, 0, 0)
	if err != nil {
		return err
	}
	defer release()
	mr, err := multipartBody(r)
	if err != nil {
		return err
	}
	opts, err := readBuildOptions(mr)
	if err != nil {
		return err
	}
	ctxDir, cleanup, err := s.receiveContext(w, r, mr)
	if err != nil {
		return err
	}
	defer cleanup()
	df, err := readDockerfile(ctxDir, opts.Dockerfile)
	if err != nil {
		return err
	}
	done, err := s.cfg.AcquireTemplateOp(r.Context())
	if err != nil {
		return err
	}
	defer done()

	ev := newBuildStream(w)
	res, err := cfg.Builder.Build(r.Context(), builder.Options{
		Dockerfile: df, DockerfileName: opts.Dockerfile, ContextDir: ctxDir,
		Tags: opts.Tags, BuildArgs: opts.BuildArgs, Secrets: opts.Secrets,
		Target: opts.Target, NoCache: opts.NoCache,
		Events: func(e builder.Event) {
			if e.Type != builder.EventDone && e.Type != builder.EventError {
				ev.send(buildEvent{Event: e})
			}
		},
	})
	log := logger(r)
	if err != nil {
		s.m.RecordTemplateBuild(userOf(r), opts.Tags, "", 0, 0, err)
		log.Warn("template build failed", "tags", opts.Tags, "err", err)
		rec := &errorRecorder{header: http.Header{}}
		writeError(rec, r, err)
		var body errorBody
		if json.Unmarshal(rec.body, &body) != nil {
			body = errorBody{Code: string(sandbox.ClassInternal), Message: "internal error", RequestID: requestID(r)}
		}
		if sandbox.ClassOf(err) == sandbox.ClassInvalid {
			// The Dockerfile's fault: the caller needs the line and why.
			body.Message = err.Error()
		}
		e := builder.Event{Type: builder.EventError, Message: body.Message}
		var le *builder.LineError
		if errors.As(err, &le) {
			e.Line = le.Line
		}
		ev.send(buildEvent{Event: e, Error: &body})
		return nil
	}
	info := res.Info
	if cfg.Store != nil && len(res.Tags) > 0 {
		if i, err := cfg.Store.Get(r.Context(), res.Tags[0]); err == nil {
			info = i // with its in-use count
		}
	}
	log.Info("template build", "tags", res.Tags, "digest", res.Digest, "steps", res.Steps, "cached", res.Cached, "user", userOf(r))
	s.m.RecordTemplateBuild(userOf(r), res.Tags, res.Digest, res.Steps, res.Cached, nil)
	out := s.templateJSON(r, info)
	ev.send(buildEvent{Event: builder.Event{Type: builder.EventDone, Digest: res.Digest, Tags: res.Tags}, Template: &out})
	return nil
}

func multipartBody(r *http.Request) (*multipart.Reader, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "a build is sent as multipart/form-data: an \"options\" part (JSON) and a \"context\" part (tar)")
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, badRequest("", "%v", err)
	}
	return mr, nil
}

// readBuildOptions reads and checks the "options" part, which comes first.
func readBuildOptions(mr *multipart.Reader) (buildOptions, error) {
	var o buildOptions
	p, err := mr.NextPart()
	if err != nil {
		return o, badRequest("options", "the body has no \"options\" part: %v", err)
	}
	defer p.Close()
	if p.FormName() != "options" {
		return o, badRequest("options", "the first part must be \"options\" (JSON), not %q", p.FormName())
	}
	data, err := io.ReadAll(io.LimitReader(p, maxBuildOptions+1))
	if err != nil {
		return o, badRequest("options", "reading options: %v", err)
	}
	if len(data) > maxBuildOptions {
		return o, sandbox.Errorf(sandbox.ClassTooLarge, "the options part is over %d MiB", maxBuildOptions>>20)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, badRequest("options", "invalid options: %v", err)
	}
	return o, checkBuildOptions(&o)
}

func checkBuildOptions(o *buildOptions) error {
	if len(o.Tags) > maxBuildTags {
		return badRequest("tags", "at most %d tags", maxBuildTags)
	}
	for _, t := range o.Tags {
		if err := checkRef("tags", t); err != nil {
			return err
		}
		if strings.HasPrefix(t, builder.CachePrefix) {
			return badRequest("tags", "%q: the %s prefix is the build cache's", t, builder.CachePrefix)
		}
	}
	if o.Dockerfile == "" {
		o.Dockerfile = "Dockerfile"
	}
	if len(o.Dockerfile) > 1024 || strings.ContainsRune(o.Dockerfile, 0) {
		return badRequest("dockerfile", "invalid Dockerfile path")
	}
	if len(o.BuildArgs) > maxBuildArgs {
		return badRequest("build_args", "at most %d build args", maxBuildArgs)
	}
	for k := range o.BuildArgs {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return badRequest("build_args", "invalid build arg name %q", k)
		}
	}
	if len(o.Secrets) > maxBuildSecrets {
		return badRequest("secrets", "at most %d secrets", maxBuildSecrets)
	}
	for id := range o.Secrets {
		if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") || len(id) > 255 {
			return badRequest("secrets", "invalid secret id %q", id)
		}
	}
	if len(o.Target) > 255 {
		return badRequest("target", "invalid target")
	}
	return nil
}

// receiveContext spools the "context" part to a file and unpacks it into
// a fresh directory next to it.
func (s *Server) receiveContext(w http.ResponseWriter, r *http.Request, mr *multipart.Reader) (string, func(), error) {
	p, err := mr.NextPart()
	if err != nil {
		return "", nil, badRequest("context", "the body has no \"context\" part: %v", err)
	}
	defer p.Close()
	if p.FormName() != "context" {
		return "", nil, badRequest("context", "the second part must be \"context\" (a tar stream), not %q", p.FormName())
	}
	dir := s.cfg.ImportDir
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("build context: %w", err)
	}
	f, err := os.CreateTemp(dir, "context-*.tar")
	if err != nil {
		return "", nil, fmt.Errorf("build context: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	limit := s.cfg.MaxImportBytes
	n, err := io.Copy(f, io.LimitReader(p, limit+1))
	if err != nil {
		return "", nil, badRequest("context", "reading the build context: %v", err)
	}
	if n > limit {
		return "", nil, sandbox.Errorf(sandbox.ClassTooLarge, "build context is over the limit of %d bytes (TEMPLATE_MAX_IMPORT)", limit)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", nil, err
	}
	ctxDir, err := os.MkdirTemp(dir, "context-")
	if err != nil {
		return "", nil, fmt.Errorf("build context: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(ctxDir) }
	if _, err := layer.Unpack(r.Context(), f, ctxDir, layer.Options{MaxBytes: 4 * limit, MaxEntries: 1_000_000}); err != nil {
		cleanup()
		if errors.Is(err, layer.ErrInvalid) || errors.Is(err, layer.ErrLimit) {
			return "", nil, badRequest("context", "build context: %v", err)
		}
		return "", nil, fmt.Errorf("unpack build context: %w", err)
	}
	return ctxDir, cleanup, nil
}

// readDockerfile reads the Dockerfile from the unpacked context, never
// through a symlink out of it.
func readDockerfile(ctxDir, name string) ([]byte, error) {
	root, err := os.OpenRoot(ctxDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(strings.TrimPrefix(path.Clean("/"+name), "/"))
	if err != nil {
		return nil, badRequest("dockerfile", "%s: not found in the build context", name)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDockerfileBytes+1))
	if err != nil {
		return nil, badRequest("dockerfile", "%s: %v", name, err)
	}
	if len(data) > maxDockerfileBytes {
		return nil, badRequest("dockerfile", "%s is over %d MiB", name, maxDockerfileBytes>>20)
	}
	return data, nil
}

// buildStream writes a build's NDJSON events.
type buildStream struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	rc     *http.ResponseController
	enc    *json.Encoder
	failed bool
}

func newBuildStream(w http.ResponseWriter) *buildStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	b := &buildStream{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
	_ = b.rc.Flush()
	return b
}

func (b *buildStream) send(e buildEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed {
		return // the client is gone: the request's context ends the build
	}
	if b.enc.Encode(e) != nil || b.rc.Flush() != nil {
		b.failed = true
	}
}
