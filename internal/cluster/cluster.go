// Package cluster keeps this daemon's entry in the node registry: who the
// replicas sharing one state store are, where they answer and how loaded
// they are.
package cluster

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// Nodes is the shared registry (store.Redis implements it).
type Nodes interface {
	PutNode(ctx context.Context, n store.Node, ttl time.Duration) error
	DeleteNode(ctx context.Context, id string) error
	Nodes(ctx context.Context) ([]store.Node, error)
}

// Registry announces this node and lists the others.
type Registry struct {
	nodes Nodes // nil: a lone daemon, the list is itself
	self  func() store.Node
	ttl   time.Duration
	every time.Duration
	log   *slog.Logger
}

// DefaultTTL is how long a node stays listed without a heartbeat; it beats
// three times per TTL so one lost beat does not drop it.
const DefaultTTL = 15 * time.Second

// New returns a registry. self describes this node at the time of a beat
// (its load changes); nodes may be nil for a daemon without shared state.
func New(nodes Nodes, self func() store.Node, ttl time.Duration, log *slog.Logger) *Registry {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if log == nil {
		log = slog.Default()
	}
	return &Registry{nodes: nodes, self: self, ttl: ttl, every: ttl / 3, log: log.With("component", "cluster")}
}

func (r *Registry) now() store.Node {
	n := r.self()
	n.SeenAt = time.Now().UTC()
	return n
}

// Beat announces this node once.
func (r *Registry) Beat(ctx context.Context) error {
	if r.nodes == nil {
		return nil
	}
	return r.nodes.PutNode(ctx, r.now(), r.ttl)
}

// Run beats until ctx ends, then removes the node from the registry (a
// clean stop; after a crash the entry expires with its TTL). A failing
// store is logged once when it fails and once when it is back.
func (r *Registry) Run(ctx context.Context) {
	if r.nodes == nil {
		return
	}
	t := time.NewTicker(r.every)
	defer t.Stop()
	failing := false
	for {
		bctx, cancel := context.WithTimeout(ctx, r.every)
		err := r.Beat(bctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			r.log.Error("node heartbeat failed; retrying", "err", err)
			failing = true
		case err == nil && failing:
			r.log.Info("node heartbeat works again")
			failing = false
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := r.nodes.DeleteNode(dctx, r.self().ID); err != nil {
				r.log.Warn("leave node registry", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}

// List returns the registered nodes, by ID; a lone daemon lists itself.
// This node's entry is current; the others' are as of their last
// heartbeat (at most a third of the TTL old).
func (r *Registry) List(ctx context.Context) ([]store.Node, error) {
	if r.nodes == nil {
		return []store.Node{r.now()}, nil
	}
	nodes, err := r.nodes.Nodes(ctx)
	if err != nil || r.self == nil {
		return nodes, err
	}
	self := r.now()
	found := false
	for i := range nodes {
		if nodes[i].ID == self.ID {
			nodes[i], found = self, true
		}
	}
	if !found {
		// Not announced yet (or its lease lapsed while the store was down).
		nodes = append(nodes, self)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes, nil
}
