package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one daemon (replica) as it announces itself to the others.
type Node struct {
	ID       string   `json:"id"`
	Address  string   `json:"address"`
	Backends []string `json:"backends"`
	Version  string   `json:"version,omitempty"`
	// Sandboxes is how many sandboxes the node runs (pooled ones included),
	// Pooled how many of them wait in its warm pools.
	Sandboxes int `json:"sandboxes"`
	Pooled    int `json:"pooled"`
	// MemoryBytes is the memory its sandboxes may use together (their
	// limits summed).
	MemoryBytes int64 `json:"memory_bytes"`
	// MaxSandboxes is NODE_MAX_SANDBOXES: handed-out sandboxes (Sandboxes
	// - Pooled) the node takes at most; 0: no limit.
	MaxSandboxes int       `json:"max_sandboxes,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	SeenAt       time.Time `json:"seen_at"`
}

func (r *Redis) nodeKey(id string) string { return r.prefix + ":node:" + id }
func (r *Redis) nodesKey() string         { return r.prefix + ":nodes" }

// PutNode announces n for ttl: without a new PutNode within ttl the node
// drops out of Nodes.
func (r *Redis) PutNode(ctx context.Context, n Node, ttl time.Duration) error {
	data, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("encode node %s: %w", n.ID, err)
	}
	_, err = r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.nodeKey(n.ID), data, ttl)
		p.SAdd(ctx, r.nodesKey(), n.ID)
		return nil
	})
	if err != nil {
		return r.unavailable("register node", err)
	}
	return nil
}

// DeleteNode removes a node at once (a clean shutdown).
func (r *Redis) DeleteNode(ctx context.Context, id string) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.nodeKey(id))
		p.SRem(ctx, r.nodesKey(), id)
		return nil
	})
	if err != nil {
		return r.unavailable("unregister node", err)
	}
	return nil
}

// Nodes returns the nodes whose announcement has not expired, by ID.
func (r *Redis) Nodes(ctx context.Context) ([]Node, error) {
	ids, err := r.c.SMembers(ctx, r.nodesKey()).Result()
	if err != nil {
		return nil, r.unavailable("list nodes", err)
	}
	out := []Node{}
	if len(ids) == 0 {
		return out, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.nodeKey(id)
	}
	vals, err := r.c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, r.unavailable("list nodes", err)
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			// Its lease expired: forget the name too. A node that comes
			// back re-adds it with its next heartbeat.
			if err := r.c.SRem(ctx, r.nodesKey(), ids[i]).Err(); err != nil && !errors.Is(err, redis.Nil) {
				return nil, r.unavailable("list nodes", err)
			}
			continue
		}
		var n Node
		if err := json.Unmarshal([]byte(s), &n); err != nil {
			return nil, fmt.Errorf("decode node %s: %w", ids[i], err)
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
