package manager

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Sessions bind an owner's sandboxes to a session key. This is the one
// implementation every front end uses: the native API's connect and
// release (/v1/sessions), and agentscope's session_ctx_id (its creates
// with a session, its restore after a heartbeat recycle and its release
// run through WithSession too, so both doors serialise on the same hold).
//
// Work that changes a session runs holding it (WithSession): first a keyed
// mutex among this daemon's goroutines, then a lease in the store
// (store.Leases): bbolt's for a lone daemon, Redis's across every replica,
// so two connects of one session through two replicas create one set of
// sandboxes. Binding a sandbox to a session is only possible through a
// held Session (CreateRequest has no session field of its own).

// SessionWait bounds how long a call waits for a session another call
// holds (on this replica or another) before it is refused as busy (503):
// connect, release, and agentscope's create, restore and release alike.
// A holder's work (creating a session's sandboxes, restoring recycled ones
// with their workspace copies) fits well within it.
const SessionWait = 5 * time.Minute

// sessionLeaseTTL is how long a session stays held after its holder died
// or lost touch with the store: the lease is renewed every third of it
// while held, so it bounds only that, not the work.
const sessionLeaseTTL = 30 * time.Second

// sessionLeaseName names a session's lease in the store.
func sessionLeaseName(owner, key string) string { return "session\x00" + owner + "\x00" + key }

// MaxSessionKey bounds a session key (agentscope's session_ctx_id
// included), in bytes.
const MaxSessionKey = 512

// SessionKey is agentscope's session_ctx_id: "<session>_<user>", or the
// session id alone when there is no user.
func SessionKey(sessionID, userID string) string {
	if userID == "" {
		return sessionID
	}
	return sessionID + "_" + userID
}

func checkSessionKey(key string) error {
	if key == "" || len(key) > MaxSessionKey {
		return invalid("session_id", "session id must be 1 to %d characters", MaxSessionKey)
	}
	return nil
}

// Session is an owner's session held by its caller (WithSession): the
// right to change which sandboxes are bound to its key. It is valid only
// within the function WithSession runs.
type Session struct {
	m          *Manager
	owner, key string
	lease      *store.Lease // nil: a store without leases (this process's mutex only)
	over       atomic.Bool  // WithSession returned
}

// Owner is the session's owner.
func (s *Session) Owner() string { return s.owner }

// Key is the session key.
func (s *Session) Key() string { return s.key }

// WithSession runs fn holding owner's session key, in this process and,
// through the store's lease, on every replica sharing the store. The wait
// for another holder is bounded by SessionWait (and ctx): beyond it the
// call is refused as busy (ClassUnavailable), without running fn.
func (m *Manager) WithSession(ctx context.Context, owner, key string, fn func(ctx context.Context, s *Session) error) error {
	if err := checkSessionKey(key); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, SessionWait)
	defer cancel()
	unlock, err := m.sessionLocks.lockCtx(wctx, owner+"\x00"+key)
	if err != nil {
		return sessionWaitErr(ctx, key, err)
	}
	defer unlock()
	s := &Session{m: m, owner: owner, key: key}
	defer s.over.Store(true)
	if ls, ok := m.store.(store.Leases); ok {
		lease, err := store.AcquireLease(wctx, ls, sessionLeaseName(owner, key), sessionLeaseTTL)
		if err != nil {
			return sessionWaitErr(ctx, key, err)
		}
		s.lease = lease
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := lease.Release(rctx); err != nil {
				m.log.Warn("release a session's lease (it runs out by itself)", "session", key, "err", err)
			}
		}()
	}
	return fn(ctx, s)
}

// sessionWaitErr turns a wait for a session that did not end in holding it
// into the caller's error: its own context's end, busy, or the store's
// failure (ClassUnavailable from Redis).
func sessionWaitErr(ctx context.Context, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("wait for session %s: %w", key, ctx.Err())
	}
	if errors.Is(err, store.ErrLeaseHeld) || errors.Is(err, context.DeadlineExceeded) {
		return sandbox.Errorf(sandbox.ClassUnavailable, "session %s is busy: another call holds it for more than %s; retry", key, SessionWait)
	}
	return fmt.Errorf("hold session %s: %w", key, err)
}

// fence checks the session is still held, renewing its lease: the step
// that follows (a create) cannot be undone, and a holder whose lease ran
// out while it stalled would race the session's next holder.
func (s *Session) fence(ctx context.Context) error {
	if s.over.Load() {
		return fmt.Errorf("session %s used after its hold ended", s.key)
	}
	if s.lease == nil {
		return nil
	}
	if err := s.lease.Renew(ctx); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			return sandbox.Errorf(sandbox.ClassUnavailable, "session %s: its hold ran out before this call finished; retry", s.key)
		}
		return fmt.Errorf("session %s: %w", s.key, err)
	}
	return nil
}

// Sandboxes lists the owner's sandboxes bound to the key, oldest first:
// this daemon's, and with a shared store every other replica's (a lost
// one's in state lost). Unlike a list, it fails when the store cannot
// say: a connect would create a second sandbox of a type another replica
// runs.
func (s *Session) Sandboxes(ctx context.Context) ([]*store.Record, error) {
	return s.m.sessionRecords(ctx, s.owner, s.key)
}

// Create creates a sandbox for the session's owner, bound to its key (see
// Manager.Create).
func (s *Session) Create(ctx context.Context, req CreateRequest) (*store.Record, error) {
	if err := s.fence(ctx); err != nil {
		return nil, err
	}
	req.session = s.key
	return s.m.Create(ctx, s.owner, req)
}

// Destroy ends a sandbox of the session, wherever it runs: this daemon's
// is destroyed here, another live replica's by that replica (PeerDestroy),
// a lost replica's record is dropped as a delete of it would. A
// not-found error means it is gone already.
func (s *Session) Destroy(ctx context.Context, r *store.Record) error {
	m := s.m
	switch {
	case r.Node == "" || r.Node == m.cfg.NodeID:
		return m.destroy(ctx, r.ID, "session released")
	case r.State == sandbox.StateLost:
		return m.deleteRemote(ctx, s.owner, r.ID)
	case m.peerDestroy == nil:
		return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s of the session runs on node %s; this daemon cannot reach it (set CLUSTER_SECRET on every replica)", r.ID, r.Node)
	default:
		return m.peerDestroy(ctx, r.ID)
	}
}

// ConnectSession returns owner's sandboxes bound to key, one per requested
// type, creating the missing ones (from the pools when possible). The
// result is in the order of types.
func (m *Manager) ConnectSession(ctx context.Context, owner, key string, types []string, req CreateRequest) ([]*store.Record, error) {
	if err := checkSessionKey(key); err != nil {
		return nil, err
	}
	if len(types) == 0 {
		types = []string{"base"}
	}
	for _, t := range types {
		if _, ok := m.cfg.Templates[t]; !ok {
			return nil, invalid("types", "unknown sandbox type %q", t)
		}
	}
	var out []*store.Record
	err := m.WithSession(ctx, owner, key, func(ctx context.Context, s *Session) error {
		recs, err := s.Sandboxes(ctx)
		if err != nil {
			return err
		}
		byType := map[string]*store.Record{}
		for _, r := range recs {
			if _, dup := byType[r.Type]; !dup && r.State != sandbox.StateLost {
				byType[r.Type] = r
			}
		}
		out = make([]*store.Record, 0, len(types))
		for _, t := range types {
			if r, ok := byType[t]; ok {
				m.Touch(r.ID)
				out = append(out, r)
				continue
			}
			r2 := req
			r2.Template, r2.Type = "", t
			rec, err := s.Create(ctx, r2)
			if err != nil {
				return err
			}
			byType[t] = rec
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseSession destroys every sandbox of owner's session key, on every
// replica sharing the store, and returns their ids.
func (m *Manager) ReleaseSession(ctx context.Context, owner, key string) ([]sandbox.ID, error) {
	if checkSessionKey(key) != nil {
		return nil, nil // no sandbox can be bound to it: nothing to release
	}
	var ids []sandbox.ID
	err := m.WithSession(ctx, owner, key, func(ctx context.Context, s *Session) error {
		recs, err := s.Sandboxes(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			err := s.Destroy(ctx, r)
			if sandbox.ClassOf(err) == sandbox.ClassNotFound {
				continue // gone meanwhile (its end, or another delete)
			}
			if err != nil {
				return fmt.Errorf("release sandbox %s of session %s: %w", r.ID, key, err)
			}
			ids = append(ids, r.ID)
		}
		return nil
	})
	return ids, err
}

// SessionSandboxes lists owner's sandboxes bound to key that this daemon
// runs, oldest first (Session.Sandboxes adds other replicas').
func (m *Manager) SessionSandboxes(owner, key string) []*store.Record {
	m.mu.Lock()
	var out []*store.Record
	for _, e := range m.entries {
		if !e.creating && !e.destroying && e.rec.Pool == "" && e.rec.Owner == owner && e.rec.SessionKey == key {
			out = append(out, e.rec.Clone())
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// SessionKeys lists owner's session keys that have sandboxes on this
// daemon.
func (m *Manager) SessionKeys(owner string) []string {
	m.mu.Lock()
	seen := map[string]bool{}
	for _, e := range m.entries {
		if !e.creating && !e.destroying && e.rec.Pool == "" && e.rec.Owner == owner && e.rec.SessionKey != "" {
			seen[e.rec.SessionKey] = true
		}
	}
	m.mu.Unlock()
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// PeerDestroy deletes a sandbox another live replica runs, on that
// replica, on behalf of the caller of the request ctx belongs to
// (cluster.Forwarder.DestroyBy). A not-found error means it is gone.
type PeerDestroy func(ctx context.Context, id sandbox.ID) error

// SetPeerDestroy sets Config.PeerDestroy, for a test of a manager made
// without it. Call it before serving.
func (m *Manager) SetPeerDestroy(fn PeerDestroy) { m.peerDestroy = fn }

// sessionRecords lists owner's sandboxes bound to key, oldest first (see
// Session.Sandboxes).
func (m *Manager) sessionRecords(ctx context.Context, owner, key string) ([]*store.Record, error) {
	out := m.SessionSandboxes(owner, key)
	if m.atomicStore() == nil {
		return out, nil
	}
	recs, err := m.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the sandboxes of session %s: %w", key, err)
	}
	live := m.liveNodes(ctx)
	for _, r := range recs {
		if r.Owner == owner && r.SessionKey == key && m.remote(r, live) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}
