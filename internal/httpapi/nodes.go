package httpapi

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// NodeLister lists the daemons (replicas) sharing this server's state.
type NodeLister func(ctx context.Context) ([]store.Node, error)

// SetNodes gives GET /v1/nodes its source, for a test of a server made
// without one; the daemon passes its node registry as Config.Nodes.
func (s *Server) SetNodes(list NodeLister) { s.nodes = list }

func (s *Server) nodesRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("GET /v1/nodes", s.listNodes)
}

// listNodes shows the replicas and their load. Operators only: a node's
// address and load say nothing a tenant needs, and much about the others.
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) error {
	if !s.isTemplateAdmin(r) {
		return sandbox.Errorf(sandbox.ClassForbidden, "only the server's operator (TEMPLATE_ADMIN_USERS) may list its nodes")
	}
	if s.nodes == nil {
		return sandbox.Errorf(sandbox.ClassUnavailable, "this server has no node registry")
	}
	nodes, err := s.nodes(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": nodes, "totals": nodeTotals(nodes)})
	return nil
}

// nodeTotals sums the replicas' loads: the cluster's sandboxes, the
// pooled ones of every replica's warm pools, their memory limits.
func nodeTotals(nodes []store.Node) map[string]any {
	var sandboxes, pooled int
	var mem int64
	for _, n := range nodes {
		sandboxes += n.Sandboxes
		pooled += n.Pooled
		mem += n.MemoryBytes
	}
	return map[string]any{"nodes": len(nodes), "sandboxes": sandboxes, "pooled": pooled, "memory_bytes": mem}
}
