package manager

import (
	"context"
	"sort"

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
	unlock := m.sessionLocks.lock(owner + "\x00" + key)
	defer unlock()

	byType := map[string]*store.Record{}
	for _, r := range m.SessionSandboxes(owner, key) {
		if _, dup := byType[r.Type]; !dup {
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

// SessionSandboxes lists owner's sandboxes bound to key, oldest first.
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

// SessionKeys lists owner's session keys that have sandboxes.
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

// ReleaseSession destroys every sandbox of owner's session key and returns
// their ids.
func (m *Manager) ReleaseSession(ctx context.Context, owner, key string) ([]sandbox.ID, error) {
	unlock := m.sessionLocks.lock(owner + "\x00" + key)
	defer unlock()
	var ids []sandbox.ID
	for _, r := range m.SessionSandboxes(owner, key) {
		if err := m.destroy(ctx, r.ID, "session released"); err != nil {
			return ids, err
		}
		ids = append(ids, r.ID)
	}
	return ids, nil
}
