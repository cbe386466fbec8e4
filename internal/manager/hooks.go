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
	gone    []GoneHook
}

// GoneHook is called once a handed-out sandbox is gone for its user,
// whichever way it went: deleted through any API (native, E2B,
// agentscope, MCP), expired, recycled by the heartbeat, its session
// released, its reset for a warm pool (POOL_MAX_USES: the same id comes
// back for another user), or destroyed at shutdown. rec is its last
// record (the user's). Front-ends drop what they keep per sandbox
// (agentscope's MCP servers and browser connections, its record turned
// "released"), on the replica that ran it: the one whose manager calls
// the hook. It runs on the destroying goroutine after the sandbox is
// gone: it must be quick and bound its own work by ctx.
type GoneHook func(ctx context.Context, rec *store.Record, reason string)

// OnGone registers h to run after each sandbox is gone (see GoneHook).
// Hooks run in registration order.
func (m *Manager) OnGone(h GoneHook) {
	hs := m.hooks()
	hs.mu.Lock()
	hs.gone = append(hs.gone, h)
	hs.mu.Unlock()
}

// runGoneHooks calls the gone hooks for rec. Pooled sandboxes never
// handed out have nothing to drop and are skipped.
func (m *Manager) runGoneHooks(ctx context.Context, rec *store.Record, reason string) {
	if rec == nil || rec.Pool != "" {
		return
	}
	hs := m.hooks()
	hs.mu.Lock()
	hooks := append([]GoneHook(nil), hs.gone...)
	hs.mu.Unlock()
	for _, h := range hooks {
		h(ctx, rec, reason)
	}
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
