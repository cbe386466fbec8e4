package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// daytona.create({image}) sends the image's Dockerfile as buildInfo with
// the create. Daytona builds it into a snapshot named after its content
// and creates the sandbox once the snapshot is active, reporting the
// sandbox as pending_build, then building_snapshot, meanwhile. agentbox
// does the same: the snapshot is a template daytona-image-<hash> of the
// caller's private namespace (an unchanged image is built once), and the
// sandbox is created, with the rest of the request, when it is built.
//
// Until then the caller holds a placeholder ID. agentbox's sandbox IDs
// are the manager's, so the sandbox gets its own ID; a get of the
// placeholder answers the sandbox's record from then on, and the SDK
// takes the new ID from it. The placeholder's toolboxProxyUrl differs
// from a sandbox's on purpose: the SDK rebuilds its toolbox base URL (with
// the ID) only when that URL changes.

// pendingCreate is a create waiting for its image's build.
type pendingCreate struct {
	id, owner, name string
	build           *imageBuild
	body            []byte // the create's JSON, snapshot set, buildInfo dropped
	created         time.Time

	mu     sync.Mutex
	realID string // the sandbox, once created
	err    string // why it failed
	done   bool
}

type pendingRegistry struct {
	mu     sync.Mutex
	byID   map[string]*pendingCreate
	byReal map[string]*pendingCreate
}

func newPendingRegistry() *pendingRegistry {
	return &pendingRegistry{byID: map[string]*pendingCreate{}, byReal: map[string]*pendingCreate{}}
}

func (g *pendingRegistry) add(p *pendingCreate) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, old := range g.byID {
		old.mu.Lock()
		stale := old.done && time.Since(old.created) > maxBuildAge
		old.mu.Unlock()
		if stale {
			delete(g.byID, id)
			delete(g.byReal, old.realID)
		}
	}
	if len(g.byID) >= maxBuilds {
		return sandbox.Errorf(sandbox.ClassQuota, "too many sandboxes waiting for their image on this server; try again later")
	}
	g.byID[p.id] = p
	return nil
}

// lookup finds owner's pending create by placeholder or sandbox ID.
func (g *pendingRegistry) lookup(owner, id string) *pendingCreate {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.byID[id]
	if p == nil {
		p = g.byReal[id]
	}
	if p == nil || p.owner != owner {
		return nil
	}
	return p
}

func (g *pendingRegistry) created(p *pendingCreate, realID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.byReal[realID] = p
}

func (g *pendingRegistry) remove(p *pendingCreate) {
	p.mu.Lock()
	real := p.realID
	p.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.byID, p.id)
	delete(g.byReal, real)
}

// imageTemplate is the snapshot name of an image: its Dockerfile and
// contexts.
func imageTemplate(bi *buildInfoIn) string {
	h := sha256.New()
	h.Write([]byte(bi.DockerfileContent))
	for _, c := range bi.ContextHashes {
		h.Write([]byte{0})
		h.Write([]byte(c))
	}
	return "daytona-image-" + hex.EncodeToString(h.Sum(nil))[:20]
}

// createFromImage serves POST /sandbox with buildInfo.
func (s *Server) createFromImage(w http.ResponseWriter, r *http.Request, user string, in createIn) error {
	if err := s.requireBuilds(user); err != nil {
		return err
	}
	var bi buildInfoIn
	if err := json.Unmarshal(in.BuildInfo, &bi); err != nil {
		return sandbox.Invalid("buildInfo", "buildInfo: %v", err)
	}
	df, err := dockerfileOf("", nil, &bi)
	if err != nil {
		return err
	}
	snap := imageTemplate(&bi)
	ref := template.PrivateName(user, snap)
	// The create the build leads to: this one, from the snapshot.
	name := in.Name
	in.BuildInfo, in.Snapshot = nil, snap
	next, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("daytona create: %w", err)
	}
	if _, err := s.cfg.Templates.Get(r.Context(), ref); err == nil {
		// Built before: create now.
		return s.replayCreate(w, r, user, next)
	}
	if name != "" {
		if _, err := s.find(r, user, name); err == nil {
			return sandbox.Errorf(sandbox.ClassConflict, "a sandbox named %q already exists", name)
		}
	}
	// A build of this image that runs is waited for; one that failed,
	// or whose template has gone since, is run again.
	b := s.builds.get(ref)
	if st, _ := buildState(b); b == nil || b.owner != user || st != "building" {
		if b, err = s.startBuild(r.Context(), user, snap, ref, "", df, bi.ContextHashes); err != nil {
			return err
		}
	}
	p := &pendingCreate{id: "pending-" + randomID(), owner: user, name: name, build: b, body: next, created: time.Now()}
	if err := s.pending.add(p); err != nil {
		return err
	}
	// The sandbox outlives the request that asked for it.
	go s.finishPending(context.WithoutCancel(r.Context()), p, r.Host, r.Header.Get("X-Forwarded-Proto"), r.TLS != nil)
	writeJSON(w, http.StatusOK, s.pendingOut(r, p, true))
	return nil
}

func buildState(b *imageBuild) (string, string) {
	if b == nil {
		return "", ""
	}
	return b.snapshot()
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// replayCreate runs the create handler with body as the request.
func (s *Server) replayCreate(w http.ResponseWriter, r *http.Request, user string, body []byte) error {
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	return s.create(w, req, user)
}

// finishPending waits for p's build and creates its sandbox, replaying
// the create (to a recorder: nothing is sent) as reached at host.
func (s *Server) finishPending(ctx context.Context, p *pendingCreate, host, proto string, overTLS bool) {
	b := p.build
	for {
		b.mu.Lock()
		state, reason, changed := b.state, b.reason, b.changed
		b.mu.Unlock()
		if state == "build_failed" {
			p.finish("", "the image's build failed: "+reason)
			return
		}
		if state == "active" {
			break
		}
		<-changed // the build ends within buildTimeout
	}
	p.mu.Lock()
	gone := p.done
	p.mu.Unlock()
	if gone { // deleted while it built
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, Prefix+"/sandbox", bytes.NewReader(p.body))
	req.Host = host
	if proto != "" {
		req.Header.Set("X-Forwarded-Proto", proto)
	}
	if overTLS {
		req.TLS = &tlsState
	}
	rec := httptest.NewRecorder()
	if err := s.create(rec, req, p.owner); err != nil {
		msg := err.Error()
		if se := (*sandbox.Error)(nil); errors.As(err, &se) {
			msg = se.Msg
		}
		p.finish("", "creating the sandbox from the built image: "+msg)
		return
	}
	var out sandboxOut
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.ID == "" {
		p.finish("", fmt.Sprintf("creating the sandbox from the built image: unexpected answer %q", rec.Body.String()))
		return
	}
	p.mu.Lock()
	deleted := p.done
	p.mu.Unlock()
	if deleted {
		_ = s.m.Delete(ctx, p.owner, sandbox.ID(out.ID))
		return
	}
	s.pending.created(p, out.ID)
	p.finish(out.ID, "")
}

// tlsState marks a replayed request as reached over TLS (baseURL).
var tlsState tls.ConnectionState

func (p *pendingCreate) finish(realID, errMsg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.realID, p.err, p.done = realID, errMsg, true
}

// pendingOut is the placeholder's record: pending_build in the create's
// answer (the SDK streams the build log of a sandbox it sees pending, once
// it is no longer), building_snapshot while the build runs.
func (s *Server) pendingOut(r *http.Request, p *pendingCreate, first bool) sandboxOut {
	st, _ := p.build.snapshot()
	state := "pending_build"
	if st == "building" && !first {
		state = "building_snapshot"
	}
	p.mu.Lock()
	if p.err != "" {
		state = "build_failed"
	}
	errMsg := p.err
	p.mu.Unlock()
	name := p.name
	if name == "" {
		name = p.id
	}
	now := p.created.UTC().Format(time.RFC3339Nano)
	return sandboxOut{ID: p.id, Name: name, OrganizationID: organizationID, Snapshot: p.build.name, User: DefaultUser,
		Env: map[string]string{}, Labels: map[string]string{}, Target: "agentbox", CPU: 1, State: state, DesiredState: "started",
		ErrorReason: errMsg, BackupState: "None", AutoDeleteInterval: -1, Volumes: []sandboxVolume{}, CreatedAt: now, UpdatedAt: now,
		ToolboxProxyURL: baseURL(r) + Prefix + "/toolbox-pending", DaemonVersion: "agentbox"}
}

// pendingSandbox answers a get of a placeholder: its record while it
// waits, the sandbox's ID once created (ok false: not a placeholder).
func (s *Server) pendingSandbox(r *http.Request, user, id string) (out *sandboxOut, realID string) {
	p := s.pending.lookup(user, id)
	if p == nil || p.id != id {
		return nil, ""
	}
	p.mu.Lock()
	real := p.realID
	p.mu.Unlock()
	if real != "" {
		return nil, real
	}
	o := s.pendingOut(r, p, false)
	return &o, ""
}

// deletePending drops a placeholder whose sandbox is not made yet (the
// build goes on: its snapshot is kept); one whose sandbox is made names it.
func (s *Server) deletePending(r *http.Request, user, id string) (out *sandboxOut, realID string) {
	p := s.pending.lookup(user, id)
	if p == nil || p.id != id {
		return nil, ""
	}
	p.mu.Lock()
	real := p.realID
	if real == "" {
		p.done = true
	}
	p.mu.Unlock()
	if real != "" {
		return nil, real
	}
	o := s.pendingOut(r, p, false)
	o.State, o.DesiredState = "destroyed", "destroyed"
	s.pending.remove(p)
	return &o, ""
}

// sandboxLogsURL is GET /sandbox/{id}/build-logs-url: the log of the
// image build a create from an image waits (or waited) for.
func (s *Server) sandboxLogsURL(w http.ResponseWriter, r *http.Request, user string) error {
	id := r.PathValue("id")
	if s.pending.lookup(user, id) == nil {
		if _, err := s.find(r, user, id); err != nil {
			return err
		}
		return notFound("sandbox %s was not created from an image on this server", id)
	}
	writeJSON(w, http.StatusOK, map[string]string{"url": baseURL(r) + Prefix + "/sandbox/" + id + "/build-logs"})
	return nil
}

func (s *Server) sandboxLogs(w http.ResponseWriter, r *http.Request, user string) error {
	p := s.pending.lookup(user, r.PathValue("id"))
	if p == nil {
		return notFound("no image build of sandbox %s", r.PathValue("id"))
	}
	return streamBuildLog(w, r, p.build)
}
