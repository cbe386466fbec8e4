package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// SessionKey is agentscope's session_ctx_id: "<session>_<user>", or the
// session id alone when there is no user.
func SessionKey(sessionID, userID string) string {
	if userID == "" {
		return sessionID
	}
	return sessionID + "_" + userID
}

// ConnectSession returns owner's sandboxes bound to key, one per requested
// type, creating the missing ones (from the pools when possible). The
// result is in the order of types.
func (m *Manager) ConnectSession(ctx context.Context, owner, key string, types []string, req CreateRequest) ([]*store.Record, error) {
	if key == "" || len(key) > 512 {
		return nil, invalid("session_id", "session id must be 1 to 512 characters")
	}
	if len(types) == 0 {
		types = []string{"base"}
	}
	for _, t := range types {
		if _, ok := m.cfg.Templates[t]; !ok {
			return nil, invalid("types", "unknown sandbox type %q", t)
		}
	}
	unlock, err := m.sessionLock(ctx, owner, key)
	if err != nil {
		return nil, err
	}
	defer unlock()

	recs, err := m.sessionRecords(ctx, owner, key)
	if err != nil {
		return nil, err
	}
	byType := map[string]*store.Record{}
	for _, r := range recs {
		if _, dup := byType[r.Type]; !dup && r.State != sandbox.StateLost {
			byType[r.Type] = r
		}
	}
	out := make([]*store.Record, 0, len(types))
	for _, t := range types {
		if r, ok := byType[t]; ok {
			m.Touch(r.ID)
			out = append(out, r)
			continue
		}
		r2 := req
		r2.Template, r2.Type, r2.SessionKey = "", t, key
		rec, err := m.Create(ctx, owner, r2)
		if err != nil {
			return nil, err
		}
		byType[t] = rec
		out = append(out, rec)
	}
	return out, nil
}

// SessionSandboxes lists owner's sandboxes bound to key that this daemon
// runs, oldest first (sessionRecords adds other replicas').
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

// ReleaseSession destroys every sandbox of owner's session key, on every
// replica sharing the store, and returns their ids. Another live replica's
// sandbox is destroyed by that replica (PeerDestroy); a lost replica's
// record is dropped, as a delete of it would.
func (m *Manager) ReleaseSession(ctx context.Context, owner, key string) ([]sandbox.ID, error) {
	unlock, err := m.sessionLock(ctx, owner, key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	recs, err := m.sessionRecords(ctx, owner, key)
	if err != nil {
		return nil, err
	}
	var ids []sandbox.ID
	for _, r := range recs {
		switch {
		case r.Node == "" || r.Node == m.cfg.NodeID:
			err = m.destroy(ctx, r.ID, "session released")
		case r.State == sandbox.StateLost:
			err = m.deleteRemote(ctx, owner, r.ID)
		case m.peerDestroy == nil:
			err = sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s of the session runs on node %s; this daemon cannot reach it (set CLUSTER_SECRET on every replica)", r.ID, r.Node)
		default:
			err = m.peerDestroy(ctx, r.ID)
		}
		if sandbox.ClassOf(err) == sandbox.ClassNotFound {
			continue // gone meanwhile (its end, or another delete)
		}
		if err != nil {
			return ids, fmt.Errorf("release sandbox %s of session %s: %w", r.ID, key, err)
		}
		ids = append(ids, r.ID)
	}
	return ids, nil
}

// PeerDestroy deletes a sandbox another live replica runs, on that
// replica, on behalf of the caller of the request ctx belongs to
// (cluster.Forwarder.DestroyBy). A not-found error means it is gone.
type PeerDestroy func(ctx context.Context, id sandbox.ID) error

// SetPeerDestroy lets ReleaseSession destroy a session's sandboxes other
// replicas run. Call it before serving.
func (m *Manager) SetPeerDestroy(fn PeerDestroy) { m.peerDestroy = fn }

// sessionRecords lists owner's sandboxes bound to key, oldest first: this
// daemon's, and with a shared store every other replica's (a lost one's in
// state lost).
// Unlike a list, it fails when the store cannot say: a connect would
// create a second sandbox of a type another replica runs.
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

// sessionLockKind names the native session locks in the shared store.
const sessionLockKind = "session-lock"

// sessionHold bounds how long a session lock shared between replicas is
// held (a connect creates one sandbox per type; a holder that died frees
// it then), and sessionWait how long a connect or release waits for it.
const sessionHold, sessionWait = 5 * time.Minute, 2 * time.Minute

// errHeld means another replica holds a session lock.
var errHeld = errors.New("held")

// sessionLock serialises connects and releases of owner's session key in
// this process and, with a shared store, across every replica: two
// concurrent connects through two replicas would each create the
// session's sandboxes otherwise.
func (m *Manager) sessionLock(ctx context.Context, owner, key string) (func(), error) {
	unlock := m.sessionLocks.lock(owner + "\x00" + key)
	docs, ok := m.store.(store.Docs)
	if m.atomicStore() == nil || !ok {
		return unlock, nil // a lone daemon: the local lock is the whole story
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	token, name := hex.EncodeToString(b[:]), owner+"\x00"+key
	deadline := time.Now().Add(sessionWait)
	for {
		err := docs.UpdateDoc(ctx, sessionLockKind, "", name, func(old []byte) ([]byte, time.Duration, error) {
			if old != nil {
				return nil, 0, errHeld
			}
			return []byte(token), sessionHold, nil
		})
		if err == nil {
			break
		}
		if !errors.Is(err, errHeld) {
			unlock()
			return nil, fmt.Errorf("lock session %s: %w", key, err)
		}
		if time.Now().After(deadline) {
			unlock()
			return nil, sandbox.Errorf(sandbox.ClassUnavailable, "session %s is busy: another replica holds its lock for more than %s; retry", key, sessionWait)
		}
		select {
		case <-ctx.Done():
			unlock()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return func() {
		defer unlock()
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := docs.UpdateDoc(uctx, sessionLockKind, "", name, func(old []byte) ([]byte, time.Duration, error) {
			if string(old) != token {
				return nil, 0, errHeld // it ran out and another took it: theirs now
			}
			return nil, 0, nil
		})
		if err != nil && !errors.Is(err, errHeld) {
			m.log.Warn("release a session lock (it expires by itself)", "session", key, "err", err)
		}
	}, nil
}
