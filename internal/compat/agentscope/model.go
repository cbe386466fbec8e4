package agentscope

import (
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Sandbox states of agentscope's ContainerState.
const (
	stateWarm     = "warm"
	stateRunning  = "running"
	stateRecycled = "recycled"
	stateReplaced = "replaced"
	stateReleased = "released"
)

// record is what this front-end knows about one sandbox. Records are
// replaced, never mutated, once published in the registry (copy, change,
// store), so a reader holding one sees a consistent snapshot. They are
// kept as JSON in the daemon's store (registry.go).
type record struct {
	Name     string     `json:"name"` // container_name: Prefix + ID
	ID       sandbox.ID `json:"id"`   // the manager's sandbox id (session_id, container_id)
	Owner    string     `json:"owner"`
	Type     string     `json:"type"`
	State    string     `json:"state"`
	Session  string     `json:"session,omitempty"`   // session_ctx_id, "" when unbound
	Token    string     `json:"token"`               // runtime token = the sandbox's access token
	MountDir string     `json:"mount_dir,omitempty"` // host directory bind-mounted at /workspace, if any
	Storage  string     `json:"storage,omitempty"`   // storage_path: where the workspace is copied on release
	// Ours: made through this front end (create, create_from_pool, a
	// restore), so an idle session recycles it to be restored. false for
	// a sandbox of another API adopted when named here: the manager's
	// rules for its session apply.
	Ours bool `json:"ours,omitempty"`

	CreatedAt     time.Time `json:"created_at"`
	LastActive    time.Time `json:"last_active"`
	UpdatedAt     time.Time `json:"updated_at"`
	RecycledAt    time.Time `json:"recycled_at,omitzero"`
	ReleasedAt    time.Time `json:"released_at,omitzero"`
	RecycleReason string    `json:"recycle_reason,omitempty"`
	RedirectTo    string    `json:"redirect_to,omitempty"`
}

// live reports whether the record stands for a sandbox that should exist.
func (r *record) live() bool { return r.State == stateRunning || r.State == stateWarm }

// imageFor is the "version" of a type: agentscope clients detect a
// sandbox's type from this image name, so it must contain the type.
func imageFor(typ string) string {
	return "agentbox/runtime-sandbox-" + typ + ":latest"
}

// model renders the record as agentscope's ContainerModel. baseURL is the
// daemon's address as the caller sees it; url points at /proxy/{name}.
func (r *record) model(baseURL string, port int, timeout time.Duration) map[string]any {
	meta := map[string]any{}
	if r.Session != "" {
		meta["session_ctx_id"] = r.Session
	}
	if r.Type != "" {
		meta["sandbox_type"] = r.Type
	}
	ports := []int{}
	if port > 0 {
		ports = append(ports, port)
	}
	return map[string]any{
		"session_id":     string(r.ID),
		"container_id":   string(r.ID),
		"container_name": r.Name,
		"url":            strings.TrimRight(baseURL, "/") + "/proxy/" + r.Name,
		"ports":          ports,
		"mount_dir":      nullStr(r.MountDir),
		"storage_path":   nullStr(r.Storage),
		"runtime_token":  r.Token,
		"version":        imageFor(r.Type),
		"meta":           meta,
		"timeout":        int(timeout.Seconds()),
		"sandbox_type":   r.Type,
		"session_ctx_id": nullStr(r.Session),
		"state":          r.State,
		"last_active_at": epoch(r.LastActive),
		"recycled_at":    epoch(r.RecycledAt),
		"released_at":    epoch(r.ReleasedAt),
		"updated_at":     epoch(r.UpdatedAt),
		"created_at":     epoch(r.CreatedAt),
		"recycle_reason": nullStr(r.RecycleReason),
		"redirect_to":    nullStr(r.RedirectTo),
	}
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// epoch renders a time as Python's time.time(): float seconds, or null.
func epoch(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return float64(t.UnixMicro()) / 1e6
}
