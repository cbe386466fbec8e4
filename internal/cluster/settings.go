package cluster

import (
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the replicas' settings (internal/settings): this daemon's
// name and address among them, and how requests are forwarded between
// them. The daemon gives them to ForwardConfig and the node registry.
type Settings struct {
	NodeID            NodeID    `env:"NODE_ID" envDefault:"" help:"this daemon's name among the replicas sharing a Redis; empty: the one kept in the data dir (node-id), chosen at the first start from the host name and a hash of the data dir"`
	NodeAddress       string    `env:"NODE_ADDRESS" envDefault:"" help:"URL other replicas and operators reach this daemon at, shown in GET /v1/nodes; empty: http://HOST:PORT"`
	ClusterSecret     Secret    `env:"CLUSTER_SECRET" envDefault:"" help:"secret shared by the replicas on one Redis, signing the requests one forwards to the replica that runs the sandbox (at least 32 characters); empty: nothing is forwarded and another replica's sandbox answers 503"`
	ClusterMaxConns   int       `env:"CLUSTER_MAX_CONNS" envDefault:"256" min:"1" max:"65536" help:"connections this replica opens to each other replica at most, and so the requests it forwards to each at once (more get 503 with Retry-After); also the forwarding connections it accepts from each other replica, once authenticated, outside MAX_CONNECTIONS_PER_IP"`
	ClusterMaxPerUser int       `env:"CLUSTER_MAX_PER_USER" envDefault:"64" min:"0" max:"65536" help:"requests of one user this replica forwards to one other replica at once (more get 429 with Retry-After), so one user cannot take every connection to it; less than CLUSTER_MAX_CONNS, 0 = no per-user limit"`
	ClusterPlacement  Placement `env:"CLUSTER_PLACEMENT" envDefault:"least_loaded" help:"where a create runs with several replicas: least_loaded (the live replica with the fewest sandboxes, then the least memory; needs CLUSTER_SECRET) or local (the replica that got the request)"`
}

var defaults = settings.Defaults[Settings]()

// NodeID names a replica: at most 128 characters without spaces ("": the
// daemon makes one).
type NodeID string

// UnmarshalText checks the name.
func (n *NodeID) UnmarshalText(b []byte) error {
	if v := string(b); len(v) > 128 || strings.ContainsAny(v, " \t\n\r") {
		return fmt.Errorf("want at most 128 characters without spaces")
	}
	*n = NodeID(b)
	return nil
}

// Secret is CLUSTER_SECRET: at least 32 characters, or none.
type Secret string

// UnmarshalText checks the length.
func (s *Secret) UnmarshalText(b []byte) error {
	if len(b) > 0 && len(b) < 32 {
		return fmt.Errorf("want at least 32 characters (e.g. openssl rand -hex 32)")
	}
	*s = Secret(b)
	return nil
}

// Placement is CLUSTER_PLACEMENT: least_loaded (true: creates go to the
// live replica with the fewest sandboxes) or local (false).
type Placement bool

// UnmarshalText reads least_loaded ("" too) or local.
func (p *Placement) UnmarshalText(b []byte) error {
	switch string(b) {
	case "least_loaded", "":
		*p = true
	case "local":
		*p = false
	default:
		return fmt.Errorf("want least_loaded or local")
	}
	return nil
}
