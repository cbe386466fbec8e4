package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/internal/cluster"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// GET /v1/nodes lists the replicas registered in a real Redis, to the
// operator only; without a registry it is a clear 503.
func TestListNodes(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for _, n := range []store.Node{{ID: "b", Address: "http://b:8000", Backends: []string{"native"}, Sandboxes: 2, Pooled: 1, MemoryBytes: 3 << 20},
		{ID: "a", Address: "http://a:8000", Backends: []string{"native"}, Sandboxes: 3, Pooled: 2, MemoryBytes: 1 << 20}} {
		n := n
		if err := cluster.New(rs, func() store.Node { return n }, 0, nil).Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Config{APIKeys: map[string]string{"op": DefaultUser, "t": "alice"}}, manager.New(manager.Config{}, nil, store.NewMemory()))
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()

	resp, body := call(t, "GET", hs.URL+"/v1/nodes", "op", "", "", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("without a registry: %d %s", resp.StatusCode, body)
	}
	s.SetNodes(cluster.New(rs, nil, 0, nil).List)
	resp, body = call(t, "GET", hs.URL+"/v1/nodes", "t", "", "", nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("tenant: %d %s", resp.StatusCode, body)
	}
	resp, body = call(t, "GET", hs.URL+"/v1/nodes", "op", "", "", nil)
	var out struct {
		Nodes  []store.Node
		Totals struct {
			Nodes, Sandboxes, Pooled int
			MemoryBytes              int64 `json:"memory_bytes"`
		}
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil {
		t.Fatalf("operator: %d %s", resp.StatusCode, body)
	}
	// Pools are per node; the totals count them over the cluster.
	if out.Totals.Nodes != 2 || out.Totals.Sandboxes != 5 || out.Totals.Pooled != 3 || out.Totals.MemoryBytes != 4<<20 {
		t.Fatalf("totals: %s", body)
	}
	if len(out.Nodes) != 2 || out.Nodes[0].ID != "a" || out.Nodes[1].Sandboxes != 2 || out.Nodes[1].SeenAt.IsZero() {
		t.Fatalf("nodes: %s", body)
	}
	// Redis down: 503 with class unavailable, not a hang or a 500.
	srv.Stop()
	resp, body = call(t, "GET", hs.URL+"/v1/nodes", "op", "", "", nil)
	var e struct{ Code string }
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "unavailable" {
		t.Fatalf("Redis down: %d %s", resp.StatusCode, body)
	}
}
