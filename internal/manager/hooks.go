package manager

import (
	"context"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// RecycleHook is called for a session sandbox that the heartbeat loop is
// about to destroy because its session went idle. The sandbox is still
// running, so the hook may still use its agent (e.g. to copy the workspace
// out). rec is a snapshot. The hook runs on the heartbeat loop: it must
// bound its own work by ctx.
type RecycleHook func(ctx context.Context, rec *store.Record)

// hookSets holds each manager's hooks. It lives beside the Manager rather
// than in it so that front-ends can add hooks without widening the core
// struct; entries are never removed (a daemon has one manager).
var hookSets sync.Map // *Manager -> *hookSet

type hookSet struct {
	mu      sync.Mutex
	recycle []RecycleHook
}

func (m *Manager) hooks() *hookSet {
	h, _ := hookSets.LoadOrStore(m, &hookSet{})
	return h.(*hookSet)
}

// OnHeartbeatRecycle registers h to run before each heartbeat recycle
// (agentscope marks the record "recycled" and restores the session on its
// next call). Hooks run in registration order.
func (m *Manager) OnHeartbeatRecycle(h RecycleHook) {
	hs := m.hooks()
	hs.mu.Lock()
	hs.recycle = append(hs.recycle, h)
	hs.mu.Unlock()
}

// runRecycleHooks calls the recycle hooks for id while the sandbox still
// runs. A sandbox already gone or going is skipped.
func (m *Manager) runRecycleHooks(ctx context.Context, id sandbox.ID) {
	hs := m.hooks()
	hs.mu.Lock()
	hooks := append([]RecycleHook(nil), hs.recycle...)
	hs.mu.Unlock()
	if len(hooks) == 0 {
		return
	}
	m.mu.Lock()
	e, ok := m.entries[id]
	if !ok || e.creating || e.destroying {
		m.mu.Unlock()
		return
	}
	rec := e.rec.Clone()
	m.mu.Unlock()
	for _, h := range hooks {
		h(ctx, rec)
	}
}
