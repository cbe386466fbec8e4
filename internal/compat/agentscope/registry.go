package agentscope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// How long records of sandboxes that are gone stay answerable.
const (
	terminalTTL = time.Hour      // released, replaced
	recycledTTL = 24 * time.Hour // waiting for their session to come back
	// docKind names the records among the store's documents.
	docKind = "agentscope"
)

// What earlier versions kept in the manager's records (store.Record.Extra)
// and the store, read only: sandboxes they made (still running across an
// upgrade, or run by a replica not yet upgraded) are adopted as this
// front end's own. The registry's records carry all of it now.
const (
	legacyMarker  = "agentscope"              // made through agentscope
	legacyType    = "agentscope.type"         // its sandbox type
	legacyStorage = "agentscope.storage_path" // its storage_path
	// legacyLockKind names the session locks of earlier versions, expired
	// documents that pruneLoop still sweeps out of a bbolt file.
	legacyLockKind = "agentscope-lock"
)

// registry holds the records by container name, in the daemon's store
// (store.Docs): with Redis every replica sees every record, a session's
// sandboxes, released and recycled ones included, whichever replica runs
// (or ran) them; with bbolt they survive a restart. Each record is grouped
// under its owner. Records are replaced, never mutated, once published.
//
// Reads that fail (the store is away) are logged and answer as if there
// were no record; listings return the error.
type registry struct {
	docs     store.Docs
	log      *slog.Logger
	terminal time.Duration // terminalTTL (shorter in tests)
	recycled time.Duration // recycledTTL
}

func newRegistry(docs store.Docs, log *slog.Logger) *registry {
	return &registry{docs: docs, log: log, terminal: terminalTTL, recycled: recycledTTL}
}

// ttl is how long a record in r's state is kept (0: as long as it is live).
func (g *registry) ttl(r *record) time.Duration {
	switch {
	case r.live():
		return 0
	case r.State == stateRecycled:
		return g.recycled
	default:
		return g.terminal
	}
}

func decodeRecord(data []byte) *record {
	if data == nil {
		return nil
	}
	r := &record{}
	if json.Unmarshal(data, r) != nil || r.Name == "" {
		return nil // not one of ours: treated as absent
	}
	return r
}

// put publishes r (a fresh copy the caller no longer changes).
func (g *registry) put(ctx context.Context, r *record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode agentscope record %s: %w", r.Name, err)
	}
	ttl := g.ttl(r)
	return g.docs.UpdateDoc(ctx, docKind, r.Owner, r.Name, func([]byte) ([]byte, time.Duration, error) {
		return data, ttl, nil
	})
}

func (g *registry) get(ctx context.Context, name string) *record {
	data, err := g.docs.Doc(ctx, docKind, name)
	if err != nil {
		g.log.Warn("agentscope: read record", "sandbox", name, "err", err)
		return nil
	}
	return decodeRecord(data)
}

// errGone ends an update of a record that is not there.
var errGone = errors.New("no such record")

// update applies change to a copy of the named record and publishes it,
// atomically (against other replicas too). It returns the new record, or
// nil when there is none (or the store failed, logged).
func (g *registry) update(ctx context.Context, name string, change func(r *record)) *record {
	cur := g.get(ctx, name)
	if cur == nil {
		return nil
	}
	var out *record
	err := g.docs.UpdateDoc(ctx, docKind, cur.Owner, name, func(old []byte) ([]byte, time.Duration, error) {
		r := decodeRecord(old)
		if r == nil || r.Owner != cur.Owner {
			return nil, 0, errGone
		}
		before := *r
		change(r)
		if *r == before {
			out = r
			return nil, 0, errUnchanged // nothing to write (its TTL runs on)
		}
		r.UpdatedAt = time.Now()
		data, err := json.Marshal(r)
		if err != nil {
			return nil, 0, err
		}
		out = r
		return data, g.ttl(r), nil
	})
	switch {
	case errors.Is(err, errUnchanged):
		return out
	case errors.Is(err, errGone):
		return nil
	case err != nil:
		g.log.Warn("agentscope: update record", "sandbox", name, "err", err)
		return nil
	}
	return out
}

// errUnchanged ends an update that changed nothing.
var errUnchanged = errors.New("unchanged")

// find returns owner's record for identity: the full name, or the name
// without the prefix. Expired terminal records are not found.
func (g *registry) find(ctx context.Context, owner, prefix, identity string) *record {
	for _, name := range []string{identity, prefix + identity} {
		if r := g.get(ctx, name); r != nil && r.Owner == owner {
			return r
		}
		if prefix == "" {
			break
		}
	}
	return nil
}

// byName returns the record named identity (or prefix+identity),
// whoever owns it: the runtime-token check is the caller's job.
func (g *registry) byName(ctx context.Context, prefix, identity string) *record {
	if r := g.get(ctx, identity); r != nil {
		return r
	}
	if prefix == "" {
		return nil
	}
	return g.get(ctx, prefix+identity)
}

// all returns owner's records.
func (g *registry) all(ctx context.Context, owner string) ([]*record, error) {
	docs, err := g.docs.GroupDocs(ctx, docKind, owner)
	if err != nil {
		return nil, fmt.Errorf("list agentscope records: %w", err)
	}
	out := make([]*record, 0, len(docs))
	for _, d := range docs {
		if r := decodeRecord(d); r != nil && r.Owner == owner {
			out = append(out, r)
		}
	}
	return out, nil
}

// session returns owner's records bound to key (live or recycled), oldest
// first.
func (g *registry) session(ctx context.Context, owner, key string) ([]*record, error) {
	recs, err := g.all(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []*record
	for _, r := range recs {
		if r.Session == key && (r.live() || r.State == stateRecycled) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// owned lists owner's records in a live state.
func (g *registry) owned(ctx context.Context, owner string) ([]*record, error) {
	recs, err := g.all(ctx, owner)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if r.live() {
			out = append(out, r)
		}
	}
	return out, nil
}

// errExists ends an adoption that found a record already there.
var errExists = errors.New("exists")

// lookup returns owner's record for identity, adopting a sandbox the
// manager knows but this front-end has no record of (created through the
// native API, or before a daemon restart). nil when there is none.
func (s *Server) lookup(ctx context.Context, owner, identity string) *record {
	if identity == "" {
		return nil
	}
	if r := s.reg.find(ctx, owner, s.cfg.Prefix, identity); r != nil {
		return r
	}
	id := sandbox.ID(strings.TrimPrefix(identity, s.cfg.Prefix))
	if id.Validate() != nil {
		return nil
	}
	rec, err := s.m.Get(ctx, owner, id)
	if err != nil {
		return nil
	}
	return s.reg.adopt(ctx, s.adopt(owner, rec))
}

// adopt publishes r unless a record of that name exists (another replica
// may have written one since it was looked for), and returns the one that
// is there.
func (g *registry) adopt(ctx context.Context, r *record) *record {
	data, err := json.Marshal(r)
	if err != nil {
		return r
	}
	out := r
	err = g.docs.UpdateDoc(ctx, docKind, r.Owner, r.Name, func(old []byte) ([]byte, time.Duration, error) {
		if cur := decodeRecord(old); cur != nil {
			out = cur
			return old, 0, errExists
		}
		out = r
		return data, g.ttl(r), nil
	})
	if err != nil && !errors.Is(err, errExists) {
		g.log.Warn("agentscope: record an adopted sandbox", "sandbox", r.Name, "err", err)
	}
	if out.Owner != r.Owner {
		return nil
	}
	return out
}

// adopt builds a record for a manager record: a sandbox of another API
// (native, E2B), or one an earlier version made through agentscope.
func (s *Server) adopt(owner string, rec *store.Record) *record {
	typ := rec.Extra[legacyType]
	if typ == "" {
		typ = rec.Type
	}
	if typ == "" {
		typ = s.cfg.DefaultTypes[0]
	}
	r := &record{
		Name: s.cfg.Prefix + string(rec.ID), ID: rec.ID, Owner: owner, Type: typ,
		Session: rec.SessionKey, Token: rec.AccessToken, MountDir: rec.WorkspaceDir,
		Storage: s.adoptStorage(owner, rec.ID, rec.Extra[legacyStorage]), CreatedAt: rec.CreatedAt, LastActive: rec.LastActive, UpdatedAt: time.Now(),
		Ours: rec.Extra[legacyMarker] != "",
	}
	r.State = stateWarm
	if r.Session != "" {
		r.State = stateRunning
	}
	return r
}

// checkLive turns a live record whose sandbox the manager no longer has
// (it expired, or was deleted through another API) into a released one.
func (s *Server) checkLive(ctx context.Context, r *record) *record {
	if !r.live() {
		return r
	}
	if _, err := s.m.Get(ctx, r.Owner, r.ID); err == nil || !sandbox.IsNotFound(err) {
		return r
	}
	now := time.Now()
	if u := s.reg.update(ctx, r.Name, func(x *record) {
		if x.live() {
			x.State, x.ReleasedAt, x.Session = stateReleased, now, ""
		}
	}); u != nil {
		return u
	}
	return r
}
