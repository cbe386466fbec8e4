package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/builder"
	"github.com/agentbox/agentbox/internal/template/layer"
)

// Daytona's snapshots are agentbox templates. A snapshot a caller creates
// is built by agentbox's Dockerfile builder (RUN steps in build
// sandboxes) into a template of the caller's private namespace
// (template.PrivateName), so only that tenant sees, uses and deletes it;
// the shared templates (base, code-interpreter, the operator's) are listed
// as Daytona's "general" snapshots. Builds fill the store every tenant
// shares and run with the server's largest resources: as for the native
// and E2B build routes, only the operator's users (TEMPLATE_ADMIN_USERS)
// may run them.
//
//	GET    /snapshots                   the caller's and the shared templates
//	GET    /snapshots/{id}              one, by name (the ID is the name)
//	POST   /snapshots                   {name, imageName | buildInfo}: a build starts
//	GET    /snapshots/{id}/build-logs-url, /snapshots/{id}/build-logs?follow=true
//	DELETE /snapshots/{id}
//	POST   /snapshots/{id}/activate     snapshots never go inactive: as it is

// Templates is what the front end needs of the template store (the
// daemon's *template.Store).
type Templates interface {
	List(ctx context.Context) ([]template.Info, error)
	Get(ctx context.Context, ref string) (template.Info, error)
	Delete(ctx context.Context, ref string) error
}

// Builder runs Dockerfile builds (the daemon's template builder).
type Builder interface {
	Build(ctx context.Context, opts builder.Options) (builder.Result, error)
}

const (
	// buildTimeout bounds one snapshot build.
	buildTimeout = 30 * time.Minute
	// maxBuildAge is how long a finished build's state and logs stay.
	maxBuildAge = time.Hour
	// maxBuilds bounds the builds kept (running and finished) per replica.
	maxBuilds = 64
	// maxBuildLog bounds the log kept of one build.
	maxBuildLog = 4 << 20
	// maxDockerfile bounds a Dockerfile given in buildInfo.
	maxDockerfile = 256 << 10
)

// snapshotName is a Daytona snapshot name agentbox can store: a template
// reference NAME[:TAG].
var snapshotName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}(:[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127})?$`)
})

// imageBuild is one snapshot build: its state and log, kept after it ends
// for maxBuildAge (an SDK polls the state and streams the log).
type imageBuild struct {
	owner, name, ref string // ref: the template's name in the store
	imageName        string
	dockerfile       string
	created          time.Time
	cancel           context.CancelFunc

	mu sync.Mutex
	// state is building from the start (the SDK streams the log of a
	// build it sees building, not of one pending), then active or
	// build_failed.
	state   string
	reason  string
	log     bytes.Buffer
	changed chan struct{} // closed and replaced at each log write or state change
	ended   time.Time
}

func (b *imageBuild) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *imageBuild) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.log.Len()+len(p) <= maxBuildLog {
		b.log.Write(p)
	}
	b.notifyLocked()
	return len(p), nil
}

func (b *imageBuild) setState(state, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state, b.reason = state, reason
	if state == "active" || state == "build_failed" {
		b.ended = time.Now()
	}
	b.notifyLocked()
}

func (b *imageBuild) snapshot() (state, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.reason
}

// buildRegistry holds the builds of this replica by template ref.
type buildRegistry struct {
	mu     sync.Mutex
	builds map[string]*imageBuild
}

func newBuildRegistry() *buildRegistry { return &buildRegistry{builds: map[string]*imageBuild{}} }

func (g *buildRegistry) get(ref string) *imageBuild {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.builds[ref]
}

// add registers b unless a build of the same template runs; finished
// builds past maxBuildAge go.
func (g *buildRegistry) add(b *imageBuild) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for ref, old := range g.builds {
		old.mu.Lock()
		stale := !old.ended.IsZero() && time.Since(old.ended) > maxBuildAge
		old.mu.Unlock()
		if stale {
			delete(g.builds, ref)
		}
	}
	if prev := g.builds[b.ref]; prev != nil {
		if st, _ := prev.snapshot(); st == "pending" || st == "building" {
			return sandbox.Errorf(sandbox.ClassConflict, "snapshot %s is being built", b.name)
		}
	}
	if len(g.builds) >= maxBuilds {
		return sandbox.Errorf(sandbox.ClassQuota, "too many snapshot builds on this server; try again later")
	}
	g.builds[b.ref] = b
	return nil
}

func (g *buildRegistry) remove(ref string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.builds, ref)
}

// ownedBy lists owner's builds.
func (g *buildRegistry) ownedBy(owner string) []*imageBuild {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*imageBuild
	for _, b := range g.builds {
		if b.owner == owner {
			out = append(out, b)
		}
	}
	return out
}

func (s *Server) registerSnapshots(h func(string, handler)) {
	h("GET /snapshots", s.listSnapshots)
	h("POST /snapshots", s.createSnapshot)
	h("GET /snapshots/{id}", s.getSnapshot)
	h("DELETE /snapshots/{id}", s.deleteSnapshot)
	h("POST /snapshots/{id}/activate", s.activateSnapshot)
	h("GET /snapshots/{id}/build-logs-url", s.snapshotLogsURL)
	h("GET /snapshots/{id}/build-logs", s.snapshotLogs)
	h("POST /snapshots/{id}/deactivate", func(w http.ResponseWriter, r *http.Request, _ string) error {
		return unsupported("deactivating a snapshot")
	})
}

// snapshotOut is Daytona's SnapshotDto.
type snapshotOut struct {
	ID              string   `json:"id"`
	OrganizationID  string   `json:"organizationId"`
	General         bool     `json:"general"`
	Name            string   `json:"name"`
	ImageName       string   `json:"imageName,omitempty"`
	State           string   `json:"state"`
	Size            *float64 `json:"size"`
	Entrypoint      []string `json:"entrypoint"`
	CPU             int      `json:"cpu"`
	GPU             int      `json:"gpu"`
	Mem             int64    `json:"mem"`
	Disk            int64    `json:"disk"`
	ErrorReason     *string  `json:"errorReason"`
	CreatedAt       string   `json:"createdAt"`
	UpdatedAt       string   `json:"updatedAt"`
	LastUsedAt      *string  `json:"lastUsedAt"`
	SourceSandboxID *string  `json:"sourceSandboxId"`
	BuildInfo       any      `json:"buildInfo,omitempty"`
}

// refOf is a template's reference, without the default tag.
func refOf(info template.Info) string {
	if info.Tag == "" || info.Tag == template.DefaultTag {
		return info.Name
	}
	return info.Name + ":" + info.Tag
}

// displayName is a template's snapshot name for owner: without owner's
// private prefix.
func displayName(owner, ref string) string {
	if template.IsPrivate(ref) {
		return strings.TrimPrefix(ref, template.PrivateName(owner, ""))
	}
	return ref
}

func snapshotOfTemplate(owner string, info template.Info) snapshotOut {
	ref := refOf(info)
	name := displayName(owner, ref)
	gib := float64(info.Size) / (1 << 30)
	created := info.Created.UTC().Format(time.RFC3339Nano)
	o := snapshotOut{ID: name, OrganizationID: organizationID, General: !template.IsPrivate(ref), Name: name,
		State: "active", Size: &gib, CPU: int(max(1, info.Resources.CPUs)),
		Mem: info.Resources.MemoryBytes >> 30, Disk: info.Resources.DiskBytes >> 30, CreatedAt: created, UpdatedAt: created}
	if info.Kind != sandbox.TemplateHost && info.Kind != sandbox.TemplateDir && !strings.HasPrefix(info.Source, "/") {
		o.ImageName = info.Source
	}
	if len(info.Config.Entrypoint) > 0 {
		o.Entrypoint = info.Config.Entrypoint
	}
	return o
}

func snapshotOfBuild(b *imageBuild) snapshotOut {
	state, reason := b.snapshot()
	created := b.created.UTC().Format(time.RFC3339Nano)
	o := snapshotOut{ID: b.name, OrganizationID: organizationID, Name: b.name, ImageName: b.imageName, State: state,
		CPU: 1, CreatedAt: created, UpdatedAt: created}
	if reason != "" {
		o.ErrorReason = &reason
	}
	if b.dockerfile != "" {
		o.BuildInfo = map[string]any{"dockerfileContent": b.dockerfile, "contextHashes": []string{},
			"createdAt": created, "updatedAt": created, "snapshotRef": b.ref}
	}
	return o
}

// snapshotRef is the template a snapshot name of user's means: the one in
// user's private namespace when it exists (or is being built), else the
// shared one of that name.
func (s *Server) snapshotRef(ctx context.Context, user, name string) string {
	if s.cfg.Templates == nil || template.IsPrivate(name) {
		return name
	}
	private := template.PrivateName(user, name)
	if s.builds.get(private) != nil {
		return private
	}
	if _, err := s.cfg.Templates.Get(ctx, private); err == nil {
		return private
	}
	return name
}

// findSnapshot is user's snapshot named name: a build of this replica
// (running, failed, or done and not yet seen in the store), or a template.
func (s *Server) findSnapshot(ctx context.Context, user, name string) (snapshotOut, *imageBuild, error) {
	if s.cfg.Templates == nil {
		return snapshotOut{}, nil, unsupported("snapshots (this server has no template store)")
	}
	ref := s.snapshotRef(ctx, user, name)
	if template.VisibleTo(ref, user) {
		if info, err := s.cfg.Templates.Get(ctx, ref); err == nil {
			return snapshotOfTemplate(user, info), s.builds.get(ref), nil
		}
		if b := s.builds.get(ref); b != nil && b.owner == user {
			return snapshotOfBuild(b), b, nil
		}
	}
	return snapshotOut{}, nil, notFound("Snapshot with name %s not found", name)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, user string) error {
	o, _, err := s.findSnapshot(r.Context(), user, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, o)
	return nil
}

func (s *Server) activateSnapshot(w http.ResponseWriter, r *http.Request, user string) error {
	return s.getSnapshot(w, r, user)
}

// listSnapshots: the caller's private templates and builds, then the
// shared templates (general), name filter and page/limit pagination.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, user string) error {
	if s.cfg.Templates == nil {
		return unsupported("snapshots (this server has no template store)")
	}
	q := r.URL.Query()
	page, limit := 1, 100
	for _, p := range []struct {
		key string
		v   *int
		max int
	}{{"page", &page, 1 << 20}, {"limit", &limit, 200}} {
		if v := q.Get(p.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > p.max {
				return sandbox.Invalid(p.key, "%s must be between 1 and %d", p.key, p.max)
			}
			*p.v = n
		}
	}
	list, err := s.cfg.Templates.List(r.Context())
	if err != nil {
		return err
	}
	var mine, general []snapshotOut
	seen := map[string]bool{}
	for _, info := range list {
		ref := refOf(info)
		switch {
		case template.IsPrivate(ref) && template.VisibleTo(ref, user):
			mine = append(mine, snapshotOfTemplate(user, info))
			seen[ref] = true
		case !template.IsPrivate(ref) && template.VisibleTo(ref, user) && info.Kind != sandbox.TemplateDir:
			general = append(general, snapshotOfTemplate(user, info))
		}
	}
	for _, b := range s.builds.ownedBy(user) {
		if !seen[b.ref] {
			mine = append(mine, snapshotOfBuild(b))
		}
	}
	slices.SortFunc(mine, func(a, b snapshotOut) int { return strings.Compare(a.Name, b.Name) })
	all := append(mine, general...)
	if name := q.Get("name"); name != "" {
		all = slices.DeleteFunc(all, func(o snapshotOut) bool { return !strings.Contains(o.Name, name) })
	}
	total := len(all)
	from := min((page-1)*limit, total)
	items := all[from:min(from+limit, total)]
	if items == nil {
		items = []snapshotOut{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "total": total, "page": page,
		"totalPages": max(1, (total+limit-1)/limit)})
	return nil
}

// deleteSnapshot removes one of the caller's snapshots (a build that is
// running is cancelled). Shared templates are the operator's.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, user string) error {
	o, b, err := s.findSnapshot(r.Context(), user, r.PathValue("id"))
	if err != nil {
		return err
	}
	if o.General {
		return sandbox.Errorf(sandbox.ClassForbidden, "snapshot %s is a shared template of the server; its operator removes it (agentbox template rm)", o.Name)
	}
	ref := template.PrivateName(user, o.Name)
	if b != nil {
		if st, _ := b.snapshot(); st == "pending" || st == "building" {
			b.cancel()
		}
		s.builds.remove(ref)
	}
	if o.State == "active" {
		if err := s.cfg.Templates.Delete(r.Context(), ref); err != nil && sandbox.ClassOf(err) != sandbox.ClassNotFound {
			return err
		}
		s.m.RecordTemplateDeleted(user, ref)
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

type buildInfoIn struct {
	DockerfileContent string   `json:"dockerfileContent"`
	ContextHashes     []string `json:"contextHashes"`
}

type createSnapshotIn struct {
	Name       string       `json:"name"`
	ImageName  string       `json:"imageName"`
	Entrypoint []string     `json:"entrypoint"`
	BuildInfo  *buildInfoIn `json:"buildInfo"`
	GPU        *float64     `json:"gpu"`
}

// requireBuilds refuses builds the server cannot run or the caller may
// not ask for.
func (s *Server) requireBuilds(user string) error {
	if s.cfg.Builder == nil || s.cfg.Templates == nil {
		return unsupported("building snapshots (this server has no template builder)")
	}
	if !slices.Contains(s.cfg.TemplateAdmins, user) {
		return sandbox.Errorf(sandbox.ClassForbidden, "building snapshots is for the server operator's users (TEMPLATE_ADMIN_USERS); use an existing snapshot")
	}
	return nil
}

// dockerfileOf is the Dockerfile a create asks for: its buildInfo's, or
// FROM the image (with the entrypoint).
func dockerfileOf(imageName string, entrypoint []string, bi *buildInfoIn) (string, error) {
	if bi != nil {
		if strings.TrimSpace(bi.DockerfileContent) == "" {
			return "", sandbox.Invalid("buildInfo.dockerfileContent", "buildInfo needs a dockerfileContent")
		}
		if len(bi.DockerfileContent) > maxDockerfile {
			return "", sandbox.Invalid("buildInfo.dockerfileContent", "the Dockerfile is over %d bytes", maxDockerfile)
		}
		return bi.DockerfileContent, nil
	}
	if imageName == "" || strings.ContainsAny(imageName, " \t\r\n") {
		return "", sandbox.Invalid("imageName", "a snapshot needs an imageName or a buildInfo")
	}
	df := "FROM " + imageName + "\n"
	if len(entrypoint) > 0 {
		df += "ENTRYPOINT " + jsonArray(entrypoint) + "\n"
	}
	return df, nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, user string) error {
	var in createSnapshotIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := s.requireBuilds(user); err != nil {
		return err
	}
	if in.GPU != nil && *in.GPU > 0 {
		return unsupported("GPUs")
	}
	if !snapshotName().MatchString(in.Name) {
		return sandbox.Invalid("name", "snapshot name %q: want NAME or NAME:TAG (lowercase letters, digits, . _ -)", in.Name)
	}
	ref := template.PrivateName(user, in.Name)
	if _, err := s.cfg.Templates.Get(r.Context(), ref); err == nil {
		return sandbox.Errorf(sandbox.ClassConflict, "Snapshot with name %s already exists", in.Name)
	}
	df, err := dockerfileOf(in.ImageName, in.Entrypoint, in.BuildInfo)
	if err != nil {
		return err
	}
	var hashes []string
	if in.BuildInfo != nil {
		hashes = in.BuildInfo.ContextHashes
	}
	b, err := s.startBuild(r.Context(), user, in.Name, ref, in.ImageName, df, hashes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snapshotOfBuild(b))
	return nil
}

// startBuild unpacks the uploaded contexts into a build context and
// builds df into template ref in the background.
func (s *Server) startBuild(ctx context.Context, user, name, ref, imageName, df string, hashes []string) (*imageBuild, error) {
	if err := os.MkdirAll(s.cfg.BuildDir, 0o700); err != nil {
		return nil, fmt.Errorf("build dir: %w", err)
	}
	dir, err := os.MkdirTemp(s.cfg.BuildDir, "daytona-build-")
	if err != nil {
		return nil, fmt.Errorf("build context dir: %w", err)
	}
	if err := s.objects.unpackContexts(ctx, user, hashes, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildTimeout)
	b := &imageBuild{owner: user, name: name, ref: ref, imageName: imageName, dockerfile: df, created: time.Now(),
		cancel: cancel, state: "building", changed: make(chan struct{})}
	if imageName != "" {
		b.dockerfile = ""
	}
	if err := s.builds.add(b); err != nil {
		cancel()
		os.RemoveAll(dir)
		return nil, err
	}
	df = s.asRoot(ctx, df)
	go s.runBuild(bctx, b, df, dir)
	return b, nil
}

// asRoot runs the steps of a one-stage Dockerfile FROM a template with a
// non-root USER (agentbox's base runs as `user`) as root, as they run on
// the images Daytona's SDK starts from (python:*-slim, debian): a
// declarative image's aptGet/runCommands expect it. The template's user
// is set again after them, so sandboxes of the snapshot run as before. A
// Dockerfile that says USER itself, or has several stages, is left as it
// is.
func (s *Server) asRoot(ctx context.Context, df string) string {
	lines := strings.Split(df, "\n")
	from := -1
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			if from >= 0 || len(f) < 2 || strings.HasPrefix(f[1], "--") {
				return df
			}
			from = i
		case "USER", "ARG":
			return df
		}
		if from < 0 {
			return df // something before FROM (a parser directive, ARG): leave it
		}
	}
	if from < 0 {
		return df
	}
	ref := strings.Fields(lines[from])[1]
	info, err := s.cfg.Templates.Get(ctx, ref)
	if err != nil || info.Config.User == "" || info.Config.User == "root" || info.Config.User == "0" {
		return df
	}
	out := append([]string{}, lines[:from+1]...)
	out = append(out, "USER root")
	out = append(out, lines[from+1:]...)
	return strings.TrimRight(strings.Join(out, "\n"), "\n") + "\nUSER " + info.Config.User + "\n"
}

func (s *Server) runBuild(ctx context.Context, b *imageBuild, df, dir string) {
	defer b.cancel()
	defer os.RemoveAll(dir)
	res, err := s.cfg.Builder.Build(ctx, builder.Options{Dockerfile: []byte(df), ContextDir: dir, Tags: []string{b.ref}, Output: b})
	if err != nil {
		// The whole chain: "invalid Dockerfile: Dockerfile:3: RUN ...:
		// returned a non-zero code: 3" (the builder's errors are the
		// Dockerfile's or the server's, never a secret).
		msg := err.Error()
		if sandbox.ClassOf(err) == sandbox.ClassInternal {
			msg = "internal error (see the server's log)"
		}
		fmt.Fprintf(b, "ERROR: %s\n", msg)
		b.setState("build_failed", msg)
		s.log.Info("daytona snapshot build failed", "snapshot", b.ref, "err", err)
		s.m.RecordTemplateBuild(b.owner, []string{b.ref}, "", 0, 0, errors.New(msg))
		return
	}
	s.m.RecordTemplateBuild(b.owner, []string{b.ref}, res.Digest, res.Steps, res.Cached, nil)
	fmt.Fprintf(b, "Built snapshot %s (%s): %d steps run, %d cached\n", b.name, res.Digest, res.Steps, res.Cached)
	b.setState("active", "")
}

// snapshotLogsURL: where the SDK streams a build's log from.
func (s *Server) snapshotLogsURL(w http.ResponseWriter, r *http.Request, user string) error {
	if _, _, err := s.findSnapshot(r.Context(), user, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"url": baseURL(r) + Prefix + "/snapshots/" + r.PathValue("id") + "/build-logs"})
	return nil
}

func (s *Server) snapshotLogs(w http.ResponseWriter, r *http.Request, user string) error {
	_, b, err := s.findSnapshot(r.Context(), user, r.PathValue("id"))
	if err != nil {
		return err
	}
	return streamBuildLog(w, r, b)
}

// streamBuildLog writes b's log as plain text; with follow=true it stays
// open until the build ends (or the caller goes). A snapshot without a
// build on this replica has an empty log.
func streamBuildLog(w http.ResponseWriter, r *http.Request, b *imageBuild) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if b == nil {
		return nil
	}
	follow := r.URL.Query().Get("follow") == "true"
	fl, _ := w.(http.Flusher)
	sent := 0
	for {
		b.mu.Lock()
		chunk := append([]byte(nil), b.log.Bytes()[sent:]...)
		done := b.state == "active" || b.state == "build_failed"
		changed := b.changed
		b.mu.Unlock()
		if len(chunk) > 0 {
			if _, err := w.Write(chunk); err != nil { //nolint:gosec // G705: text/plain with nosniff, never rendered as HTML
				return nil
			}
			sent += len(chunk)
			if fl != nil {
				fl.Flush()
			}
		}
		if done || !follow {
			return nil
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return nil
		}
	}
}

func jsonArray(v []string) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// unpackInto unpacks one context tar into dir, over what earlier ones put
// there: each is unpacked alone (layer.Unpack wants an empty directory)
// and then moved in, a file of a later one replacing an earlier one's, as
// Daytona's contexts are layered into one build context.
func unpackInto(ctx context.Context, tarPath, dir string, maxBytes int64) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer f.Close()
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "ctx-")
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := layer.Unpack(ctx, f, tmp, layer.Options{MaxBytes: maxBytes, MaxEntries: 1_000_000}); err != nil {
		return sandbox.Wrap(sandbox.ClassInvalid, err, "build context "+filepath.Base(filepath.Dir(tarPath))+": not a valid tar")
	}
	return mergeTree(tmp, dir)
}

// mergeTree moves what src holds into dst: directories are merged, every
// other entry replaces dst's.
func mergeTree(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.IsDir() {
			if st, err := os.Lstat(to); err == nil && st.IsDir() {
				if err := mergeTree(from, to); err != nil {
					return err
				}
				continue
			}
		}
		if err := os.RemoveAll(to); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		if err := os.Rename(from, to); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
	}
	return nil
}

// registerImages adds the snapshot routes, the context uploads' push
// access and the build log of a create from an image.
func (s *Server) registerImages(h func(string, handler)) {
	s.registerSnapshots(h)
	h("GET /object-storage/push-access", s.pushAccess)
	h("GET /sandbox/{id}/build-logs-url", s.sandboxLogsURL)
	h("GET /sandbox/{id}/build-logs", s.sandboxLogs)
}
