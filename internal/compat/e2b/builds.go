package e2b

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/builder"
	"github.com/agentbox/agentbox/internal/template/layer"
)

// The E2B Template SDK's build flow, on agentbox's Dockerfile builder:
//
//	POST /v3/templates                         a build of a name: ids
//	GET  /templates/{id}/files/{hash}          is that COPY source here? else where to PUT it
//	PUT  /templates/{id}/files/{hash}?token=   the source files, a tar (gzip or not)
//	POST /v2/templates/{id}/builds/{build}     the steps: the build starts
//	GET  /templates/{id}/builds/{build}/status logs from an offset, then ready or error
//
// The steps become a Dockerfile (FROM the base, RUN, COPY from the
// uploaded files, ENV, WORKDIR, USER, the start command as CMD and the
// ready command as HEALTHCHECK) built like POST /v1/templates/builds,
// with the same rule: builds fill the store every tenant shares, so only
// the operator's users (TEMPLATE_ADMIN_USERS) may run them.

// Builder runs Dockerfile builds (the daemon's template builder).
type Builder interface {
	Build(ctx context.Context, opts builder.Options) (builder.Result, error)
}

const (
	maxBuildAge     = time.Hour
	buildTimeout    = 30 * time.Minute
	maxBuildSteps   = 256
	maxBuildsInFlux = 16
)

var (
	hashPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })
	namePattern = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}(:[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127})?$`)
	})
)

type buildLog struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
}

// build is one Template SDK build.
type build struct {
	templateID, buildID, ref, owner string
	uploadToken                     string
	dir                             string // the build context: files/<hash>/...
	created                         time.Time

	mu      sync.Mutex
	files   map[string]bool
	status  string // waiting, building, ready, error
	logs    []buildLog
	reason  string
	started bool
}

func (b *build) log(level, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.logs = append(b.logs, buildLog{Timestamp: time.Now().UTC(), Level: level, Message: msg})
}

type buildRegistry struct {
	mu     sync.Mutex
	builds map[string]*build // by template ID
}

func newBuildRegistry() *buildRegistry { return &buildRegistry{builds: map[string]*build{}} }

// get returns owner's build of templateID (and buildID when given).
func (g *buildRegistry) get(owner, templateID, buildID string) (*build, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.builds[templateID]
	if !ok || b.owner != owner || (buildID != "" && b.buildID != buildID) {
		return nil, sandbox.Errorf(sandbox.ClassNotFound, "no build %s of template %s", buildID, templateID)
	}
	return b, nil
}

// add registers b, dropping builds older than maxBuildAge.
func (g *buildRegistry) add(b *build) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, old := range g.builds {
		old.mu.Lock()
		done := old.status == "ready" || old.status == "error" || !old.started
		old.mu.Unlock()
		if time.Since(old.created) > maxBuildAge && done {
			os.RemoveAll(old.dir)
			delete(g.builds, id)
		}
	}
	if prev, ok := g.builds[b.templateID]; ok {
		prev.mu.Lock()
		busy := prev.status == "building"
		prev.mu.Unlock()
		if busy {
			return sandbox.Errorf(sandbox.ClassConflict, "template %s is being built", b.templateID)
		}
		os.RemoveAll(prev.dir)
	}
	if len(g.builds) >= maxBuildsInFlux {
		return sandbox.Errorf(sandbox.ClassQuota, "too many template builds in progress")
	}
	g.builds[b.templateID] = b
	return nil
}

func (s *Server) requireBuilds(user string) error {
	if s.cfg.Builder == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "template builds are not available on this server")
	}
	if !slices.Contains(s.cfg.TemplateAdmins, user) {
		return sandbox.Errorf(sandbox.ClassForbidden, "template builds are for the operator's users (TEMPLATE_ADMIN_USERS)")
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// requestBuild serves POST /v3/templates.
func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request, user string) error {
	if err := s.requireBuilds(user); err != nil {
		return err
	}
	var in struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if !namePattern().MatchString(in.Name) {
		return sandbox.Errorf(sandbox.ClassInvalid, "name %q: want name or name:tag (lowercase letters, digits, . _ -)", in.Name)
	}
	id, _, _ := strings.Cut(in.Name, ":")
	if id == "base" || id == "code-interpreter" || id == "host" || id == "code-interpreter-v1" {
		return sandbox.Errorf(sandbox.ClassConflict, "template name %q is a built-in's", id)
	}
	dir, err := os.MkdirTemp(s.cfg.BuildDir, "e2b-build-")
	if err != nil {
		return fmt.Errorf("build context dir: %w", err)
	}
	b := &build{templateID: id, buildID: randomHex(8), ref: in.Name, owner: user, uploadToken: randomHex(24),
		dir: dir, created: time.Now(), files: map[string]bool{}, status: "waiting"}
	if err := s.builds.add(b); err != nil {
		os.RemoveAll(dir)
		return err
	}
	tags := in.Tags
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": id, "buildID": b.buildID, "aliases": []string{id},
		"names": []string{in.Name}, "tags": tags, "public": false})
	return nil
}

// fileUploadLink serves GET /templates/{id}/files/{hash}: present, or
// where to PUT the files (this server, with the build's upload token).
func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request, user string) error {
	hash := r.PathValue("hash")
	if !hashPattern().MatchString(hash) {
		return sandbox.Errorf(sandbox.ClassInvalid, "files hash must be 64 hex digits")
	}
	b, err := s.builds.get(user, r.PathValue("templateID"), "")
	if err != nil {
		return err
	}
	b.mu.Lock()
	present := b.files[hash]
	b.mu.Unlock()
	out := map[string]any{"present": present}
	if !present {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		out["url"] = fmt.Sprintf("%s://%s/templates/%s/files/%s?token=%s", scheme, r.Host, b.templateID, hash, b.uploadToken)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// RegisterUploads adds the upload route: authorised by the build's upload
// token (the SDK PUTs to the URL it was given, without its API key).
func (s *Server) registerUploads(mux *http.ServeMux) {
	mux.HandleFunc("PUT /templates/{templateID}/files/{hash}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.upload(w, r); err != nil {
			writeError(w, r, err)
		}
	})
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) error {
	hash := r.PathValue("hash")
	if !hashPattern().MatchString(hash) {
		return sandbox.Errorf(sandbox.ClassInvalid, "files hash must be 64 hex digits")
	}
	s.builds.mu.Lock()
	b := s.builds.builds[r.PathValue("templateID")]
	s.builds.mu.Unlock()
	tok := r.URL.Query().Get("token")
	if b == nil || tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(b.uploadToken)) != 1 {
		return sandbox.Errorf(sandbox.ClassUnauth, "invalid upload token")
	}
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if started {
		return sandbox.Errorf(sandbox.ClassConflict, "build %s has started: no more uploads", b.buildID)
	}
	dst := filepath.Join(b.dir, "files", hash)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("upload dir: %w", err)
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)
	// The tar ends at its end-of-archive marker: read the rest, so the
	// body's EOF disarms the server's body timeout (see decodeBody).
	defer func() { _, _ = io.Copy(io.Discard, body) }()
	br := bufio.NewReader(body)
	var rd io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return sandbox.Errorf(sandbox.ClassInvalid, "files: bad gzip: %v", err)
		}
		defer gz.Close()
		rd = gz
	}
	if _, err := layer.Unpack(r.Context(), rd, dst, layer.Options{MaxBytes: 4 * s.cfg.MaxUploadBytes, MaxEntries: 1_000_000}); err != nil {
		os.RemoveAll(dst)
		return sandbox.Wrap(sandbox.ClassInvalid, err, "files: not a valid tar")
	}
	b.mu.Lock()
	b.files[hash] = true
	b.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	return nil
}

// step is one instruction of the Template SDK.
type step struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

type templateSpec struct {
	FromImage    string `json:"fromImage"`
	FromTemplate string `json:"fromTemplate"`
	StartCmd     string `json:"startCmd"`
	ReadyCmd     string `json:"readyCmd"`
	Steps        []step `json:"steps"`
	Force        bool   `json:"force"`
}

// dockerfile turns the SDK's steps into a Dockerfile over the uploaded
// files (files/<hash>/<src> in the context).
func dockerfile(spec templateSpec, files map[string]bool) (string, error) {
	var df strings.Builder
	from := spec.FromImage
	if spec.FromTemplate != "" {
		from = mapTemplate(spec.FromTemplate)
	}
	if from == "" || strings.ContainsAny(from, " \t\r\n") {
		return "", sandbox.Errorf(sandbox.ClassInvalid, "the template needs a base: fromImage or fromTemplate")
	}
	if len(spec.Steps) > maxBuildSteps {
		return "", sandbox.Errorf(sandbox.ClassInvalid, "at most %d steps", maxBuildSteps)
	}
	fmt.Fprintf(&df, "FROM %s\n", from)
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	user := ""
	for i, st := range spec.Steps {
		bad := func(format string, args ...any) error {
			return sandbox.Errorf(sandbox.ClassInvalid, "step %d (%s): %s", i+1, st.Type, fmt.Sprintf(format, args...))
		}
		for _, a := range st.Args {
			if strings.ContainsRune(a, 0) {
				return "", bad("a NUL byte in an argument")
			}
		}
		switch st.Type {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 {
				return "", bad("want a command and an optional user")
			}
			// The exec form keeps the command as it is (newlines too).
			run := fmt.Sprintf("RUN [\"/bin/bash\", \"-c\", %s]\n", quote(st.Args[0]))
			if len(st.Args) == 2 && st.Args[1] != "" {
				if strings.ContainsAny(st.Args[1], " \t\r\n") {
					return "", bad("bad user %q", st.Args[1])
				}
				// As E2B: only this command runs as that user.
				fmt.Fprintf(&df, "USER %s\n%s", st.Args[1], run)
				if user != "" {
					fmt.Fprintf(&df, "USER %s\n", user)
				}
				continue
			}
			df.WriteString(run)
		case "COPY":
			if len(st.Args) < 2 || !files[st.FilesHash] {
				return "", bad("want source and destination, and the files uploaded")
			}
			src := filepath.Clean("/" + st.Args[0])[1:]
			var flags string
			if len(st.Args) > 2 && st.Args[2] != "" {
				flags += " --chown=" + st.Args[2]
			}
			if len(st.Args) > 3 && st.Args[3] != "" {
				if _, err := strconv.ParseUint(st.Args[3], 8, 32); err != nil {
					return "", bad("mode %q is not octal", st.Args[3])
				}
				flags += " --chmod=" + st.Args[3]
			}
			fmt.Fprintf(&df, "COPY%s [%s, %s]\n", flags, quote("files/"+st.FilesHash+"/"+src), quote(st.Args[1]))
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return "", bad("want key, value pairs")
			}
			for j := 0; j < len(st.Args); j += 2 {
				if st.Args[j] == "" || strings.ContainsAny(st.Args[j], "= \t\r\n") {
					return "", bad("bad variable name %q", st.Args[j])
				}
				fmt.Fprintf(&df, "ENV %s=%s\n", st.Args[j], quote(st.Args[j+1]))
			}
		case "WORKDIR":
			if len(st.Args) != 1 || strings.ContainsAny(st.Args[0], "\r\n") {
				return "", bad("want one directory")
			}
			fmt.Fprintf(&df, "WORKDIR %s\n", st.Args[0])
		case "USER":
			if len(st.Args) != 1 || strings.ContainsAny(st.Args[0], " \t\r\n") {
				return "", bad("want one user")
			}
			user = st.Args[0]
			fmt.Fprintf(&df, "USER %s\n", user)
		default:
			return "", bad("not supported by agentbox")
		}
	}
	if spec.StartCmd != "" {
		fmt.Fprintf(&df, "CMD [\"/bin/bash\", \"-l\", \"-c\", %s]\n", quote(spec.StartCmd))
	}
	if spec.ReadyCmd != "" {
		fmt.Fprintf(&df, "HEALTHCHECK --interval=1s --timeout=5s --start-period=60s --retries=60 CMD [\"/bin/bash\", \"-l\", \"-c\", %s]\n", quote(spec.ReadyCmd))
	}
	return df.String(), nil
}

// startBuild serves POST /v2/templates/{id}/builds/{build}: the build
// runs in the background; its status route reports it.
func (s *Server) startBuild(w http.ResponseWriter, r *http.Request, user string) error {
	if err := s.requireBuilds(user); err != nil {
		return err
	}
	b, err := s.builds.get(user, r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		return err
	}
	var spec templateSpec
	if err := decodeBody(w, r, &spec); err != nil {
		return err
	}
	b.mu.Lock()
	if b.started {
		b.mu.Unlock()
		return sandbox.Errorf(sandbox.ClassConflict, "build %s has started", b.buildID)
	}
	df, err := dockerfile(spec, b.files)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	b.started, b.status = true, "building"
	b.mu.Unlock()
	go s.runBuild(b, df, spec.Force)
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// runBuild builds b's Dockerfile, logging the builder's output lines.
func (s *Server) runBuild(b *build, df string, noCache bool) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	defer os.RemoveAll(b.dir)
	out := &lineWriter{emit: func(l string) { b.log("info", l) }}
	res, err := s.cfg.Builder.Build(ctx, builder.Options{Dockerfile: []byte(df), DockerfileName: "Template", ContextDir: b.dir,
		Tags: []string{b.ref}, NoCache: noCache, Output: out})
	out.flush()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.status, b.reason = "error", err.Error()
		b.logs = append(b.logs, buildLog{Timestamp: time.Now().UTC(), Level: "error", Message: err.Error()})
		s.log.Info("e2b template build failed", "template", b.ref, "err", err)
		s.m.RecordTemplateBuild(b.owner, []string{b.ref}, "", 0, 0, err)
		return
	}
	s.m.RecordTemplateBuild(b.owner, []string{b.ref}, res.Digest, res.Steps, res.Cached, nil)
	b.status = "ready"
	b.logs = append(b.logs, buildLog{Timestamp: time.Now().UTC(), Level: "info",
		Message: fmt.Sprintf("built %s (%s): %d steps run, %d cached", b.ref, res.Digest, res.Steps, res.Cached)})
}

// buildStatus serves GET /templates/{id}/builds/{build}/status.
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request, user string) error {
	b, err := s.builds.get(user, r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		return err
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return sandbox.Errorf(sandbox.ClassInvalid, "logsOffset must be a non-negative integer")
		}
		offset = n
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	entries := []buildLog{}
	if offset < len(b.logs) {
		entries = append(entries, b.logs[offset:]...)
	}
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		lines = append(lines, e.Message)
	}
	out := map[string]any{"templateID": b.templateID, "buildID": b.buildID, "status": b.status, "logEntries": entries, "logs": lines}
	if b.status == "error" {
		out["reason"] = map[string]any{"message": b.reason}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// lineWriter turns written text into lines.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	emit func(string)
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		i := bytes.IndexByte(l.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		line := string(l.buf.Next(i + 1))
		l.emit(strings.TrimRight(line, "\r\n"))
	}
	return len(p), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 0 {
		l.emit(l.buf.String())
		l.buf.Reset()
	}
}
