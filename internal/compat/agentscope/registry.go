package agentscope

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// How long records of sandboxes that are gone stay answerable, and how
// many are kept at most (the oldest go first beyond that).
const (
	terminalTTL   = time.Hour      // released, replaced
	recycledTTL   = 24 * time.Hour // waiting for their session to come back
	maxTerminal   = 10000
	extraMarker   = "agentscope"
	extraType     = "agentscope.type"
	extraStorage  = "agentscope.storage_path"
	extraMountDir = "agentscope.mount_dir"
)

// registry holds the records by container name.
type registry struct {
	mu   sync.Mutex
	recs map[string]*record
}

func newRegistry() *registry { return &registry{recs: map[string]*record{}} }

// put publishes r (a fresh copy the caller no longer changes).
func (g *registry) put(r *record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recs[r.Name] = r
	if !r.live() {
		g.pruneLocked(time.Now())
	}
}

func (g *registry) get(name string) *record {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.recs[name]
}

func (g *registry) remove(name string) {
	g.mu.Lock()
	delete(g.recs, name)
	g.mu.Unlock()
}

// update applies change to a copy of the named record and publishes it,
// atomically. It returns the new record, or nil when there is none.
func (g *registry) update(name string, change func(r *record)) *record {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.recs[name]
	if old == nil {
		return nil
	}
	r := old.clone()
	change(r)
	r.UpdatedAt = time.Now()
	g.recs[name] = r
	return r
}

// pruneLocked drops expired terminal records, then the oldest ones while
// there are more than maxTerminal.
func (g *registry) pruneLocked(now time.Time) {
	var terminal []*record
	for name, r := range g.recs {
		if r.live() {
			continue
		}
		ttl := terminalTTL
		if r.State == stateRecycled {
			ttl = recycledTTL
		}
		if now.Sub(r.UpdatedAt) > ttl {
			delete(g.recs, name)
			continue
		}
		terminal = append(terminal, r)
	}
	if len(terminal) <= maxTerminal {
		return
	}
	sort.Slice(terminal, func(i, j int) bool { return terminal[i].UpdatedAt.Before(terminal[j].UpdatedAt) })
	for _, r := range terminal[:len(terminal)-maxTerminal] {
		delete(g.recs, r.Name)
	}
}

// find returns owner's record for identity: the full name, or the name
// without the prefix. Expired terminal records are not found.
func (g *registry) find(owner, prefix, identity string) *record {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked(time.Now())
	for _, name := range []string{identity, prefix + identity} {
		if r := g.recs[name]; r != nil && r.Owner == owner {
			return r
		}
	}
	return nil
}

// byName returns the record named identity (or prefix+identity),
// whoever owns it: the runtime-token check is the caller's job.
func (g *registry) byName(prefix, identity string) *record {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.recs[identity]; r != nil {
		return r
	}
	return g.recs[prefix+identity]
}

// session returns owner's records bound to key (live or recycled), oldest
// first.
func (g *registry) session(owner, key string) []*record {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*record
	for _, r := range g.recs {
		if r.Owner == owner && r.Session == key && (r.live() || r.State == stateRecycled) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// sessionKeys lists owner's session keys that have bound sandboxes.
func (g *registry) sessionKeys(owner string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range g.recs {
		if r.Owner == owner && r.Session != "" && (r.live() || r.State == stateRecycled) {
			seen[r.Session] = true
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// owned lists owner's records in a live state.
func (g *registry) owned(owner string) []*record {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*record
	for _, r := range g.recs {
		if r.Owner == owner && r.live() {
			out = append(out, r)
		}
	}
	return out
}

// lookup returns owner's record for identity, adopting a sandbox the
// manager knows but this front-end has no record of (created through the
// native API, or before a daemon restart). nil when there is none.
func (s *Server) lookup(ctx context.Context, owner, identity string) *record {
	if identity == "" {
		return nil
	}
	if r := s.reg.find(owner, s.cfg.Prefix, identity); r != nil {
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
	r := s.adopt(owner, rec)
	s.reg.put(r)
	return r
}

// adopt builds a record for a manager record.
func (s *Server) adopt(owner string, rec *store.Record) *record {
	typ := rec.Extra[extraType]
	if typ == "" {
		typ = rec.Type
	}
	if typ == "" {
		typ = s.cfg.DefaultTypes[0]
	}
	r := &record{
		Name: s.cfg.Prefix + string(rec.ID), ID: rec.ID, Owner: owner, Type: typ,
		Session: rec.SessionKey, Token: rec.AccessToken, MountDir: rec.WorkspaceDir,
		Storage: s.adoptStorage(owner, rec.ID, rec.Extra[extraStorage]), CreatedAt: rec.CreatedAt, LastActive: rec.LastActive, UpdatedAt: time.Now(),
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
	if u := s.reg.update(r.Name, func(x *record) {
		x.State, x.ReleasedAt, x.Session = stateReleased, now, ""
	}); u != nil {
		return u
	}
	return r
}
