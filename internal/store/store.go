// Package store persists sandbox records, so a restarted daemon knows its
// sandboxes, their owners, end times and tokens.
package store

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Record is everything the daemon knows about a sandbox beyond what the
// backend knows.
type Record struct {
	ID    sandbox.ID `json:"id"`
	Owner string     `json:"owner"`
	// Template is the name of the template it was created from.
	Template string `json:"template"`
	// TemplateDigest is that template's content digest at creation
	// (empty for host): a pooled sandbox of an older digest is stale.
	TemplateDigest string `json:"template_digest,omitempty"`
	// Type is the sandbox type it was created as ("base", "filesystem"...),
	// empty when created by template name.
	Type       string            `json:"type,omitempty"`
	State      sandbox.State     `json:"state"`
	CreatedAt  time.Time         `json:"created_at"`
	EndAt      time.Time         `json:"end_at"`
	LastActive time.Time         `json:"last_active"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Resources  sandbox.Resources `json:"resources"`
	Network    sandbox.Network   `json:"network"`
	// Isolation is the sandbox's isolation level ("": container).
	Isolation   sandbox.Isolation `json:"isolation,omitempty"`
	AccessToken string            `json:"access_token"`
	SessionKey  string            `json:"session_key,omitempty"`
	// WorkspaceDir is a host directory used as /workspace (kept on destroy).
	WorkspaceDir string `json:"workspace_dir,omitempty"`
	// Pool is the pool key while the sandbox waits in a warm pool, empty
	// once it is handed out.
	Pool     string `json:"pool,omitempty"`
	FromPool bool   `json:"from_pool,omitempty"`
	// AutoPause pauses the sandbox at its end time instead of destroying it.
	AutoPause bool `json:"auto_pause,omitempty"`
	// PausedAt is when the sandbox was paused (zero unless State is
	// paused). While paused, EndAt is when the paused sandbox is destroyed
	// (PausedAt + the server's paused TTL, zero: never) and Remaining is
	// the running time it had left, given back on resume.
	PausedAt  time.Time     `json:"paused_at,omitempty"`
	Remaining time.Duration `json:"remaining,omitempty"`
	// Uses counts the users a recycled pooled sandbox served before.
	Uses int `json:"uses,omitempty"`
	// Volumes are the volumes mounted into the sandbox at create.
	Volumes []sandbox.VolumeMount `json:"volumes,omitempty"`
	// Extra is opaque data of protocol front-ends (agentscope's meta...).
	Extra map[string]string `json:"extra,omitempty"`

	// Node is the daemon that runs the sandbox (NODE_ID), so replicas that
	// share a store each recover only their own sandboxes.
	Node string `json:"node,omitempty"`
	// Provider names the remote provider the sandbox runs at ("e2b"),
	// empty for a sandbox of this daemon's host.
	Provider string `json:"provider,omitempty"`
}

// Clone returns a deep copy, so callers can hand records out without sharing maps.
func (r *Record) Clone() *Record {
	c := *r
	c.Metadata = cloneMap(r.Metadata)
	c.Env = cloneMap(r.Env)
	c.Extra = cloneMap(r.Extra)
	c.Network.AllowOut = append([]string(nil), r.Network.AllowOut...)
	c.Network.DenyOut = append([]string(nil), r.Network.DenyOut...)
	c.Volumes = append([]sandbox.VolumeMount(nil), r.Volumes...)
	return &c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Store keeps records. Implementations are safe for concurrent use.
type Store interface {
	// Put inserts or replaces a record.
	Put(ctx context.Context, r *Record) error
	// Get returns a record, or an error of class sandbox.ClassNotFound.
	Get(ctx context.Context, id sandbox.ID) (*Record, error)
	// Delete removes a record; deleting a missing record is not an error.
	Delete(ctx context.Context, id sandbox.ID) error
	// List returns every record.
	List(ctx context.Context) ([]*Record, error)
	Close() error
}

// Pinger is a Store on a server that can be away (Redis): Ping fails with a
// ClassUnavailable error then, so work that would end in a write can be
// refused before it starts.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Atomic is a Store shared by several daemons (Redis): the writes that
// must not race between them are one operation each.
type Atomic interface {
	// PutWithin stores a new record only within the limits (0 = none):
	// maxTotal records in all, maxPerOwner handed-out ones of rec.Owner.
	// Over a limit: ClassQuota; an existing ID: ClassConflict.
	PutWithin(ctx context.Context, rec *Record, maxTotal, maxPerOwner int) error
	// TakePooled hands one of node's sandboxes waiting in pool to owner
	// (nil: none waits), at most once whoever else takes at the same time.
	TakePooled(ctx context.Context, node, pool, owner string, maxPerOwner int) (*Record, error)
	// ClaimExpiry reports whether the caller won the right to expire id
	// (its end time passed; exactly one caller wins).
	ClaimExpiry(ctx context.Context, id sandbox.ID, now time.Time, hold time.Duration) (bool, error)
}
