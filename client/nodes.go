package client

import (
	"context"
	"net/http"
	"time"
)

// Node is one agentbox daemon (replica) sharing the server's state.
type Node struct {
	ID       string   `json:"id"`
	Address  string   `json:"address"`
	Backends []string `json:"backends"`
	Version  string   `json:"version,omitempty"`
	// Sandboxes it runs (pooled ones included), Pooled of those waiting in
	// its warm pools, MemoryBytes their memory limits summed.
	Sandboxes   int   `json:"sandboxes"`
	Pooled      int   `json:"pooled"`
	MemoryBytes int64 `json:"memory_bytes"`
	// MaxSandboxes is NODE_MAX_SANDBOXES, the handed-out sandboxes it
	// takes at most (0: no limit); placement skips it while it is full.
	MaxSandboxes int       `json:"max_sandboxes,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	// SeenAt is its last heartbeat.
	SeenAt time.Time `json:"seen_at"`
}

// Nodes lists the daemons sharing the server's state and their load
// (operator only; see docs/scale-out.md).
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var out struct {
		Nodes []Node `json:"nodes"`
	}
	if err := c.doJSON(ctx, "list nodes", http.MethodGet, "/v1/nodes", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Nodes, nil
}
