package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Delete destroys one of owner's sandboxes, or, when it came from a warm
// pool that recycles (PoolMaxUses), resets it and returns it to the pool.
func (m *Manager) Delete(ctx context.Context, owner string, id sandbox.ID) error {
	if _, err := m.entryFor(owner, id); err != nil {
		if sandbox.ClassOf(err) == sandbox.ClassNotFound && m.atomicStore() != nil {
			return m.deleteRemote(ctx, owner, id)
		}
		return err
	}
	// With the state store away the record could not go: refuse (503)
	// rather than leave a record pointing at nothing; the caller retries.
	if err := m.stateReady(ctx); err != nil {
		return err
	}
	var last *store.Record
	if e, err := m.entryFor(owner, id); err == nil {
		last = m.snapshot(e)
	}
	if ok, err := m.recycle(ctx, id); ok {
		if err == nil {
			m.emit(last, events.Killed, api(owner), nil, map[string]any{"recycled": true})
		}
		return err
	}
	return m.destroy(ctx, id, "deleted")
}

// destroy removes a sandbox whoever owns it: backend, record, timers. A
// concurrent second destroy of the same id returns at once.
func (m *Manager) destroy(ctx context.Context, id sandbox.ID, reason string) error {
	// Not while a pause or resume of it is under way: each writes the
	// record when it is done, which must not bring back a deleted one.
	defer m.lockPause(id)()
	m.mu.Lock()
	e, ok := m.entries[id]
	if !ok || e.destroying || e.creating {
		m.mu.Unlock()
		return nil
	}
	e.destroying = true
	if e.timer != nil {
		e.timer.Stop()
	}
	poolKey := e.rec.Pool
	last := e.rec.Clone()
	client := e.client
	e.client = nil
	m.mu.Unlock()
	if poolKey != "" {
		if p := m.poolFor(poolKey); p != nil {
			p.Remove(id)
		}
	}
	if client != nil {
		client.Close()
	}
	err := m.backend.Destroy(context.WithoutCancel(ctx), id)
	if err != nil {
		// Keep the entry (not destroying any more) so a retry can finish it.
		m.mu.Lock()
		e.destroying = false
		m.mu.Unlock()
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	if m.cfg.Volumes != nil && len(last.Volumes) > 0 {
		m.cfg.Volumes.Release(id)
	}
	if err := m.store.Delete(context.WithoutCancel(ctx), id); err != nil {
		m.log.Error("delete record; retrying when the store is back", "sandbox", id, "err", err)
		m.deleteLater(id)
	}
	m.mu.Lock()
	delete(m.entries, id)
	m.mu.Unlock()
	m.metrics.destroyed(reason)
	m.metrics.setLive(m.countLive())
	m.log.Info("sandbox destroyed", "sandbox", id, "reason", reason)
	typ, cause := destroyEvent(reason, last.Owner)
	m.emit(last, typ, cause, nil, nil)
	m.runGoneHooks(context.WithoutCancel(ctx), last, reason)
	if poolKey == "" {
		// A freed slot may let a pool refill that was over the limit.
		m.kickPools()
	}
	return nil
}

// armTimerLocked (re)starts the expiry timer of e from its record's EndAt.
func (m *Manager) armTimerLocked(id sandbox.ID, e *entry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.rec.EndAt.IsZero() {
		return
	}
	e.timer = time.AfterFunc(time.Until(e.rec.EndAt), func() {
		m.mu.Lock()
		cur, ok := m.entries[id]
		// A timer replaced by a later SetTimeout may still fire: check the
		// deadline again instead of trusting the timer.
		expired := ok && cur == e && !e.rec.EndAt.IsZero() && !time.Now().Before(e.rec.EndAt)
		m.mu.Unlock()
		if expired {
			m.timeUp(id)
		}
	})
}

func (m *Manager) expire(id sandbox.ID, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.destroy(ctx, id, reason); err != nil {
		m.log.Error("expire sandbox", "sandbox", id, "reason", reason, "err", err)
	}
}

// SetTimeout sets owner's sandbox to end timeout from now (shorter or longer).
func (m *Manager) SetTimeout(ctx context.Context, owner string, id sandbox.ID, timeout time.Duration) (*store.Record, error) {
	if timeout <= 0 {
		return nil, invalid("timeout", "timeout must be positive")
	}
	if timeout > m.cfg.MaxTimeout {
		return nil, invalid("timeout", "timeout %s is over the server's maximum %s", timeout, m.cfg.MaxTimeout)
	}
	return m.updateEnd(ctx, owner, id, true, func(end time.Time) time.Time { return time.Now().UTC().Add(timeout) })
}

// Refresh extends owner's sandbox to end at least d from now; it never
// shortens it. d = 0 means the default timeout.
func (m *Manager) Refresh(ctx context.Context, owner string, id sandbox.ID, d time.Duration) (*store.Record, error) {
	if d < 0 {
		return nil, invalid("duration", "duration must be positive")
	}
	if d == 0 {
		d = m.cfg.DefaultTimeout
	}
	if d > m.cfg.MaxTimeout {
		return nil, invalid("duration", "duration %s is over the server's maximum %s", d, m.cfg.MaxTimeout)
	}
	return m.updateEnd(ctx, owner, id, false, func(end time.Time) time.Time {
		if want := time.Now().UTC().Add(d); want.After(end) {
			return want
		}
		return end
	})
}

func (m *Manager) updateEnd(ctx context.Context, owner string, id sandbox.ID, explicit bool, next func(time.Time) time.Time) (*store.Record, error) {
	if err := m.stateReady(ctx); err != nil {
		return nil, err // before the end time changes in memory only
	}
	e, err := m.entryFor(owner, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if e.rec.State == sandbox.StatePaused {
		m.mu.Unlock()
		// Its clock is stopped: Resume takes the time it runs for.
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is paused; resume it (with a timeout) instead", id)
	}
	rec := e.rec.Clone()
	rec.EndAt = next(rec.EndAt)
	e.rec = rec
	m.armTimerLocked(id, e)
	e.logs.add("info", "end time set", map[string]any{"end_at": rec.EndAt})
	m.mu.Unlock()
	if err := m.store.Put(ctx, rec); err != nil {
		return nil, err
	}
	if explicit {
		m.emit(rec, events.Updated, api(owner), nil, map[string]any{"end_at": rec.EndAt})
	}
	return rec.Clone(), nil
}

// Touch records activity on a sandbox (for heartbeat expiry).
func (m *Manager) Touch(id sandbox.ID) {
	m.mu.Lock()
	if e, ok := m.entries[id]; ok {
		e.lastActive = time.Now()
	}
	m.mu.Unlock()
}

// heartbeatLoop recycles session sandboxes nobody used for HeartbeatTimeout
// (agentscope's idle-session expiry). Sandboxes outside sessions live by
// their end time only.
func (m *Manager) heartbeatLoop(ctx context.Context) {
	defer close(m.loopsDone)
	hb := m.cfg.HeartbeatTimeout
	if hb <= 0 {
		<-ctx.Done()
		return
	}
	tick := min(max(hb/4, 100*time.Millisecond), 10*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var idle []sandbox.ID
		now := time.Now()
		m.mu.Lock()
		for id, e := range m.entries {
			// A paused sandbox is idle by design: only its paused TTL ends it.
			if !e.creating && !e.destroying && e.rec.SessionKey != "" && e.rec.Pool == "" &&
				e.rec.State != sandbox.StatePaused && now.Sub(e.lastActive) > hb {
				idle = append(idle, id)
			}
		}
		m.mu.Unlock()
		for _, id := range idle {
			m.runRecycleHooks(ctx, id)
			m.expire(id, "heartbeat timeout")
		}
	}
}

// Pools.

func (m *Manager) startPools(ctx context.Context) {
	defer m.dropOrphanPooled(ctx)
	defer m.dropOrphanClaimPools(ctx)
	if m.cfg.PoolSize <= 0 {
		return
	}
	seen := map[string]bool{}
	for _, typ := range m.cfg.PoolTypes {
		t, err := m.cfg.Resolver.Resolve(ctx, typ)
		if err != nil {
			m.log.Warn("no warm pool for a sandbox type whose template does not resolve", "type", typ, "err", err)
			continue
		}
		key := t.Ref
		if key == "" {
			key = typ
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		if m.startClaimPool(ctx, key, t) {
			continue
		}
		p := pool.New(key, m.cfg.PoolSize, m.poolFill(key), m.log)
		m.mu.Lock()
		m.pools[key] = p
		// Pooled sandboxes recovered from a previous run go back in first
		// (handOver drops them if the template changed meanwhile).
		for id, e := range m.entries {
			if e.rec.Pool == key {
				p.Add(id)
			}
		}
		m.mu.Unlock()
		p.Start(ctx)
	}
}

// dropOrphanPooled destroys recovered pooled sandboxes no pool takes any
// more (the pool's type was removed from the configuration, or pools are
// keyed differently than when they were made): nobody could ever get them.
func (m *Manager) dropOrphanPooled(ctx context.Context) {
	m.mu.Lock()
	var orphans []sandbox.ID
	for id, e := range m.entries {
		if e.rec.Pool != "" && !e.creating && m.pools[e.rec.Pool] == nil {
			orphans = append(orphans, id)
		}
	}
	m.mu.Unlock()
	for _, id := range orphans {
		if err := m.destroy(ctx, id, "pool gone"); err != nil {
			m.log.Warn("destroy orphan pooled sandbox", "sandbox", id, "err", err)
		}
	}
}

// poolFill creates pooled sandboxes of template name ref, resolved at
// every fill so the pool follows the name to new content.
func (m *Manager) poolFill(ref string) pool.FillFunc {
	return func(ctx context.Context) (sandbox.ID, error) {
		start := time.Now()
		if err := m.stateReady(ctx); err != nil {
			return "", err // no boot that could not be recorded; the pool backs off
		}
		t, err := m.cfg.Resolver.Resolve(ctx, ref)
		if err != nil {
			return "", fmt.Errorf("resolve template %q: %w", ref, err)
		}
		t.Ref = ref // the pool's key, as rec.Pool and rec.Template
		req := CreateRequest{Timeout: m.cfg.DefaultTimeout, Network: sandbox.Network{Mode: m.cfg.DefaultNetworkMode},
			Isolation: m.templateIsolation(ref, "")}
		rec, err := m.createCold(ctx, "", t, "", req, ref)
		if err != nil {
			return "", err
		}
		if !m.stillPooled(rec.ID, ref) {
			// A shared store's pool handed it out before the fill returned.
			m.metrics.phase("pool_fill", time.Since(start))
			return "", nil
		}
		m.warmPooled(ctx, rec.ID)
		m.metrics.phase("pool_fill", time.Since(start))
		return rec.ID, nil
	}
}

// stillPooled reports whether sandbox id waits in pool ref.
func (m *Manager) stillPooled(id sandbox.ID, ref string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	return ok && !e.destroying && e.rec.Pool == ref
}

// warmPooled readies a sandbox a pool fill made for the command its taker
// is likely to run first (see agentclient.Warm): that command then starts
// about a millisecond sooner. A failure only costs that millisecond. (A
// recycled sandbox needs no call: the agent's warm reset starts its shim.)
func (m *Manager) warmPooled(ctx context.Context, id sandbox.ID) {
	m.mu.Lock()
	e, ok := m.entries[id]
	var c *agentclient.Client
	if ok && !e.destroying {
		c = m.clientLocked(e)
	}
	m.mu.Unlock()
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.Warm(ctx); err != nil {
		m.log.Debug("warm up of a pooled sandbox failed", "sandbox", id, "err", err)
	}
}

func (m *Manager) poolFor(template string) *pool.Pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pools[template]
}

func (m *Manager) kickPools() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pools {
		p.Kick()
	}
}

// PoolLevels returns the number of ready sandboxes per pool.
func (m *Manager) PoolLevels() map[string]int {
	m.mu.Lock()
	pools := make(map[string]int, len(m.pools))
	ps := make(map[string]*pool.Pool, len(m.pools))
	for k, p := range m.pools {
		ps[k] = p
	}
	m.mu.Unlock()
	for k, p := range ps {
		pools[k] = p.Len()
	}
	for _, st := range m.claimPoolStats() {
		pools[st.Template] = st.Ready
	}
	return pools
}
