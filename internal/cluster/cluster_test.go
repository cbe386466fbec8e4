package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

type fakeNodes struct {
	mu      sync.Mutex
	nodes   map[string]store.Node
	beats   int
	failing bool
	deleted []string
}

func (f *fakeNodes) PutNode(_ context.Context, n store.Node, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats++
	if f.failing {
		return errors.New("store down")
	}
	f.nodes[n.ID] = n
	return nil
}

func (f *fakeNodes) DeleteNode(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.nodes, id)
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeNodes) Nodes(context.Context) ([]store.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Node
	for _, n := range f.nodes {
		out = append(out, n)
	}
	return out, nil
}

func (f *fakeNodes) count() (beats int, listed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beats, len(f.nodes)
}

// Run beats repeatedly, keeps beating through store failures, and leaves
// the registry when stopped; List puts this node's current load in.
func TestRegistryRun(t *testing.T) {
	f := &fakeNodes{nodes: map[string]store.Node{"other": {ID: "other"}}, failing: true}
	var mu sync.Mutex
	load := 1
	r := New(f, func() store.Node {
		mu.Lock()
		defer mu.Unlock()
		return store.Node{ID: "me", Sandboxes: load}
	}, 90*time.Millisecond, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	waitUntil(t, "beats while failing", func() bool { b, _ := f.count(); return b >= 3 })
	f.mu.Lock()
	f.failing = false
	f.mu.Unlock()
	waitUntil(t, "registered after the store came back", func() bool { _, n := f.count(); return n == 2 })

	mu.Lock()
	load = 7
	mu.Unlock()
	nodes, err := r.List(context.Background())
	if err != nil || len(nodes) != 2 || nodes[0].ID != "me" || nodes[0].Sandboxes != 7 || nodes[0].SeenAt.IsZero() {
		t.Fatalf("list: %+v %v", nodes, err)
	}
	cancel()
	<-done
	if f.deleted[0] != "me" {
		t.Fatalf("did not leave: %v", f.deleted)
	}
	// A lone daemon lists itself.
	lone, err := New(nil, func() store.Node { return store.Node{ID: "solo"} }, 0, nil).List(context.Background())
	if err != nil || len(lone) != 1 || lone[0].ID != "solo" {
		t.Fatalf("lone: %+v %v", lone, err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
