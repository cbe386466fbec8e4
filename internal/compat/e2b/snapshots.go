package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// E2B snapshots are agentbox snapshots (manager.Snapshot): a template in
// the caller's private namespace made of the sandbox's template plus one
// layer, its changes. The snapshot ID is that template's full reference
// ("private/u…/NAME:TAG"), which Sandbox.create takes as a template ID;
// deleteSnapshot is E2B's DELETE /templates/{templateID}.

// snapshotSourcePrefix starts the Source of a snapshot's template.
const snapshotSourcePrefix = "snapshot of "

// TemplateDeleter deletes a template of the store (the daemon's store
// implements it; nil: deleteSnapshot is unavailable).
type TemplateDeleter interface {
	Delete(ctx context.Context, ref string) error
}

// snapshotOut is E2B's SnapshotInfo, with what agentbox adds: the source
// sandbox, the bytes the snapshot's own layer holds (what it costs the
// caller's storage quota) and the bytes it shares with its template's
// layers (stored once, whatever the number of snapshots of it).
type snapshotOut struct {
	SnapshotID  string    `json:"snapshotID"`
	Names       []string  `json:"names"`
	SandboxID   string    `json:"sandboxID,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	SizeBytes   int64     `json:"sizeBytes"`
	SharedBytes int64     `json:"sharedBytes"`
	Layers      int       `json:"layers"`
}

func snapshotJSON(info template.Info) snapshotOut {
	id := info.Name + ":" + info.Tag
	out := snapshotOut{SnapshotID: id, Names: []string{id}, SandboxID: strings.TrimPrefix(info.Source, snapshotSourcePrefix),
		CreatedAt: info.Created, Layers: len(info.Layers)}
	if n := len(info.Layers); n > 0 {
		out.SizeBytes = info.Layers[n-1].Size
		for _, l := range info.Layers[:n-1] {
			out.SharedBytes += l.Size
		}
	}
	return out
}

// createSnapshot serves POST /sandboxes/{id}/snapshots {name?}: 201
// SnapshotInfo. Without a name the snapshot is "snapshot-<random>".
// The sandbox keeps running: its disk is frozen while it is read.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Name == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		in.Name = "snapshot-" + hex.EncodeToString(b)
	}
	info, err := s.m.Snapshot(r.Context(), user, sandboxID(r), in.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotJSON(info))
	return nil
}

// isSnapshotOf reports whether info is a snapshot user lists: its own
// (private), and for a template admin, whose snapshots are shared
// templates, the shared ones too.
func (s *Server) isSnapshotOf(info template.Info, user string) bool {
	if !strings.HasPrefix(info.Source, snapshotSourcePrefix) || !template.VisibleTo(info.Name, user) {
		return false
	}
	return template.IsPrivate(info.Name) || slices.Contains(s.cfg.TemplateAdmins, user)
}

// listSnapshots serves GET /snapshots?sandboxID=&name=&limit=&nextToken=:
// the caller's snapshots, newest first, X-Next-Token when more follow.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, user string) error {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return sandbox.Invalid("limit", "limit must be between 1 and 1000")
		}
		limit = n
	}
	offset := 0
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return sandbox.Invalid("nextToken", "invalid nextToken")
		}
		offset = n
	}
	var all []template.Info
	if s.cfg.Templates != nil {
		list, err := s.cfg.Templates.List(r.Context())
		if err != nil {
			return err
		}
		sid, name := q.Get("sandboxID"), q.Get("name")
		for _, info := range list {
			if !s.isSnapshotOf(info, user) {
				continue
			}
			if sid != "" && info.Source != snapshotSourcePrefix+sid {
				continue
			}
			if name != "" && !snapshotNamed(info, user, name) {
				continue
			}
			all = append(all, info)
		}
	}
	slices.SortStableFunc(all, func(a, b template.Info) int { return b.Created.Compare(a.Created) })
	out := []snapshotOut{}
	for i := offset; i < len(all) && len(out) < limit; i++ {
		out = append(out, snapshotJSON(all[i]))
	}
	if next := offset + len(out); next < len(all) {
		w.Header().Set("X-Next-Token", strconv.Itoa(next))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// snapshotNamed reports whether E2B's name filter (an ID or a name,
// with or without its tag) selects info.
func snapshotNamed(info template.Info, user, name string) bool {
	full := template.PrivateName(user, name)
	for _, n := range []string{name, full} {
		if n == info.Name || n == info.Name+":"+info.Tag {
			return true
		}
	}
	return false
}

// deleteSnapshot serves DELETE /templates/{templateID}: the caller's own
// snapshots are theirs to delete; a shared template only a template admin
// may delete; another tenant's snapshot is unknown (404). 204, or 409
// while a sandbox runs from it.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, user string) error {
	ref := r.PathValue("templateID")
	del, ok := s.cfg.Templates.(TemplateDeleter)
	if s.cfg.Templates == nil || !ok {
		return sandbox.Errorf(sandbox.ClassUnavailable, "this server has no template store")
	}
	admin := slices.Contains(s.cfg.TemplateAdmins, user)
	switch {
	case template.IsPrivate(ref) && template.VisibleTo(ref, user):
	case !template.VisibleTo(ref, user) && !admin:
		return sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", ref)
	case !admin:
		return sandbox.Errorf(sandbox.ClassForbidden, "only a template admin (TEMPLATE_ADMIN_USERS) may delete shared template %q", ref)
	}
	if err := del.Delete(r.Context(), ref); err != nil {
		return err
	}
	s.log.Info("template deleted", "template", ref, "user", user)
	s.m.RecordTemplateDeleted(user, ref)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// defaultForkTimeout is E2B's default life of a fork (SandboxForkRequest).
const defaultForkTimeout = 15 * time.Second

// fork serves POST /sandboxes/{id}/fork {count, timeout}: 201 with one
// {sandbox} per fork. agentbox's forks are all or nothing (a failed fork
// deletes the ones made), so a failure is the request's error, never a
// per-fork entry.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		Count   *int     `json:"count"`
		Timeout *float64 `json:"timeout"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	count := 1
	if in.Count != nil {
		count = *in.Count
	}
	timeout, err := seconds("timeout", in.Timeout)
	if err != nil {
		return err
	}
	if in.Timeout == nil {
		timeout = defaultForkTimeout
	}
	recs, err := s.m.Fork(r.Context(), user, sandboxID(r), count, timeout)
	if err != nil {
		return err
	}
	type result struct {
		Sandbox sandboxOut `json:"sandbox"`
	}
	out := make([]result, 0, len(recs))
	for _, rec := range recs {
		out = append(out, result{Sandbox: s.short(rec)})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
