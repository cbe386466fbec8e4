package manager

import (
	"sort"
	"time"

	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// PoolStats returns every warm pool's level and counters, by template.
func (m *Manager) PoolStats() []pool.Stats {
	m.mu.Lock()
	ps := make([]*pool.Pool, 0, len(m.pools))
	for _, p := range m.pools {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	out := make([]pool.Stats, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Stats())
	}
	out = append(out, m.claimPoolStats()...)
	sort.Slice(out, func(i, j int) bool { return out[i].Template < out[j].Template })
	return out
}

// TenantUsage is what one owner has on the server now.
type TenantUsage struct {
	User      string `json:"user"`
	Sandboxes int    `json:"sandboxes"`
	Running   int    `json:"running"`
	// MemoryBytes and CPUs are the limits of the owner's live sandboxes
	// added up (what they may use, not what they use).
	MemoryBytes int64   `json:"memory_bytes"`
	CPUs        float64 `json:"cpus"`
}

// Quotas are the server's limits on what callers may have and ask for.
type Quotas struct {
	MaxSandboxes       int               `json:"max_sandboxes"`          // 0 = no cap
	MaxPerUser         int               `json:"max_sandboxes_per_user"` // 0 = no cap
	MaxRequestsPerUser int               `json:"max_requests_per_user"`
	DefaultTimeoutSec  float64           `json:"default_timeout"`
	MaxTimeoutSec      float64           `json:"max_timeout"`
	DefaultResources   sandbox.Resources `json:"default_resources"`
	MaxResources       sandbox.Resources `json:"max_resources"`
}

// OwnedSandbox is a sandbox as the operator's overview shows it.
type OwnedSandbox struct {
	ID       sandbox.ID    `json:"id"`
	Owner    string        `json:"owner"`
	Template string        `json:"template"`
	State    sandbox.State `json:"state"`
	Created  time.Time     `json:"created_at"`
	EndAt    time.Time     `json:"end_at"`
}

// Overview is the whole server at a glance, for its operator: every
// owner's usage and sandboxes (pooled ones apart), the limits, and the
// number of live sandboxes (pooled ones included).
type Overview struct {
	Tenants   []TenantUsage  `json:"tenants"`
	Sandboxes []OwnedSandbox `json:"sandboxes"`
	Pooled    int            `json:"pooled"`
	Live      int            `json:"live"`
	Quotas    Quotas         `json:"quotas"`
}

// Overview describes every tenant's sandboxes. It is the operator's: the
// API gives it to template admins only.
func (m *Manager) Overview() Overview {
	ov := Overview{Quotas: Quotas{
		MaxSandboxes: m.cfg.MaxInstances, MaxPerUser: m.cfg.MaxPerUser, MaxRequestsPerUser: m.cfg.MaxRequestsPerUser,
		DefaultTimeoutSec: m.cfg.DefaultTimeout.Seconds(), MaxTimeoutSec: m.cfg.MaxTimeout.Seconds(),
		DefaultResources: m.cfg.DefaultResources, MaxResources: m.cfg.MaxResources,
	}}
	users := map[string]*TenantUsage{}
	m.mu.Lock()
	for _, e := range m.entries {
		if e.creating || e.destroying {
			continue
		}
		ov.Live++
		r := e.rec
		if r.Pool != "" {
			ov.Pooled++
			continue
		}
		u := users[r.Owner]
		if u == nil {
			u = &TenantUsage{User: r.Owner}
			users[r.Owner] = u
		}
		u.Sandboxes++
		if r.State == sandbox.StateRunning {
			u.Running++
		}
		u.MemoryBytes += r.Resources.MemoryBytes
		u.CPUs += r.Resources.CPUs
		ov.Sandboxes = append(ov.Sandboxes, OwnedSandbox{ID: r.ID, Owner: r.Owner, Template: r.Template,
			State: r.State, Created: r.CreatedAt, EndAt: r.EndAt})
	}
	m.mu.Unlock()
	for _, u := range users {
		ov.Tenants = append(ov.Tenants, *u)
	}
	sort.Slice(ov.Tenants, func(i, j int) bool { return ov.Tenants[i].User < ov.Tenants[j].User })
	sort.Slice(ov.Sandboxes, func(i, j int) bool { return ov.Sandboxes[i].Created.After(ov.Sandboxes[j].Created) })
	if ov.Tenants == nil {
		ov.Tenants = []TenantUsage{}
	}
	if ov.Sandboxes == nil {
		ov.Sandboxes = []OwnedSandbox{}
	}
	return ov
}
