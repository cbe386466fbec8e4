package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/cluster"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// openStore opens the state store: Redis (shared by replicas) with
// REDIS_ENABLED, else the local bbolt file. The returned Nodes is nil
// without Redis. release closes the store and frees the data dir.
func openStore(ctx context.Context, cfg *config.Config, dataDir string, log *slog.Logger) (store.Store, cluster.Nodes, func(), error) {
	if !cfg.Redis.Enabled {
		st, err := store.OpenBolt(filepath.Join(dataDir, "agentbox.db"))
		if err != nil {
			return nil, nil, nil, err
		}
		return st, nil, func() { st.Close() }, nil
	}
	// bbolt's file lock kept a second daemon off this data dir (its
	// sandboxes); with the records in Redis a lock file does that job.
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, nil, nil, err
	}
	addr := net.JoinHostPort(string(cfg.Redis.Server), strconv.Itoa(cfg.Redis.Port))
	octx, cancel := context.WithTimeout(ctx, cfg.Redis.Timeout+time.Second)
	defer cancel()
	rs, err := store.OpenRedis(octx, store.RedisConfig{Addr: addr, DB: cfg.Redis.DB, Username: cfg.Redis.User,
		Password: cfg.Redis.Password, KeyPrefix: string(cfg.Redis.KeyPrefix), PoolKey: string(cfg.Redis.PoolKey), Timeout: cfg.Redis.Timeout})
	if err != nil {
		unlock()
		return nil, nil, nil, fmt.Errorf("REDIS_ENABLED: %w", err)
	}
	log.Info("state store: Redis", "addr", addr, "db", cfg.Redis.DB, "key_prefix", cfg.Redis.KeyPrefix)
	return rs, rs, func() { rs.Close(); unlock() }, nil
}

// lockDataDir takes an exclusive lock on DATA_DIR/agentbox.lock for the
// daemon's lifetime: two daemons on one data dir would destroy each other's
// sandboxes at recovery.
func lockDataDir(dataDir string) (func(), error) {
	path := filepath.Join(dataDir, "agentbox.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s (is another agentbox using this data dir?): %w", path, err)
	}
	return func() { f.Close() }, nil
}

// nodeIDFile keeps the data dir's node id once chosen.
const nodeIDFile = "node-id"

// nodeID is NODE_ID, else the id kept in the data dir, else (its first
// start) the host name with a hash of the data dir, which it then keeps
// there. A restarted daemon must find its records, which carry the id:
// a pod's host name is its name, new at every rollout, and a container's
// is its id, so the host name alone would make a restarted daemon take
// its own records for another replica's and destroy its sandboxes as
// nobody's. Two daemons on one host have distinct data dirs, so distinct
// ids.
func nodeID(cfg *config.Config, dataDir string) string {
	if cfg.NodeID != "" {
		return string(cfg.NodeID)
	}
	path := filepath.Join(dataDir, nodeIDFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" && len(id) <= 128 && !strings.ContainsAny(id, " \t\r\n") {
			return id
		}
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "agentbox"
	}
	sum := sha256.Sum256([]byte(dataDir))
	id := host + "-" + hex.EncodeToString(sum[:4])
	// Kept only where the data dir exists; it does once the daemon runs.
	if st, err := os.Stat(dataDir); err == nil && st.IsDir() {
		tmp := path + ".tmp"
		if os.WriteFile(tmp, []byte(id+"\n"), 0o600) == nil {
			_ = os.Rename(tmp, path)
		}
	}
	return id
}

// nodeAddress is where the other replicas reach this one: NODE_ADDRESS,
// a worker's own port (workers.go), else the listener's address.
func nodeAddress(cfg *config.Config, addr, announce string) string {
	switch {
	case announce != "":
		return announce
	case cfg.NodeAddress != "":
		return cfg.NodeAddress
	}
	return "http://" + addr
}

// shared reports whether st is shared by replicas (Redis).
func shared(st store.Store) bool {
	_, ok := st.(store.Atomic)
	return ok
}

// forwarder sends requests for other replicas' sandboxes to them (and
// places creates); without a shared store it passes everything through.
func forwarder(cfg *config.Config, node string, st store.Store, registry *cluster.Registry, local func(sandbox.ID) bool, log *slog.Logger) *cluster.Forwarder {
	if shared(st) && cfg.ClusterSecret == "" {
		log.Warn("CLUSTER_SECRET is not set: requests for sandboxes other replicas run answer 503, and creates stay on the replica that gets them")
	}
	return cluster.NewForwarder(cluster.ForwardConfig{
		Self: node, Secret: []byte(cfg.ClusterSecret), Store: st, Nodes: registry.List, Local: local,
		PreviewDomain: string(cfg.PreviewDomain), Prefix: cfg.ContainerPrefix, Place: bool(cfg.ClusterPlacement),
		Shared:   shared(st),
		MaxConns: cfg.ClusterMaxConns, MaxPerUser: cfg.ClusterMaxPerUser,
		User: func(r *http.Request) string { return httpapi.KeyUser(cfg.APIKeys, r) },
		Log:  log,
	})
}

// peerAddrs is the set of the other live replicas' addresses, for the
// connection limits (limitListener.isPeer). It is refreshed from the node
// registry in the background, so that accepting a connection never waits
// for Redis or DNS.
type peerAddrs struct {
	set atomic.Pointer[map[netip.Addr]bool]
}

// peerRefresh is how often peerAddrs reads the registry: a replica that
// just started is known within it (its heartbeats come every 5 s).
const peerRefresh = 2 * time.Second

func (p *peerAddrs) has(a netip.Addr) bool {
	m := p.set.Load()
	return m != nil && (*m)[a]
}

// run refreshes the set until ctx ends. A node that names its address by
// host name is looked up; when a lookup fails, the addresses it had last
// time stay.
func (p *peerAddrs) run(ctx context.Context, list func(context.Context) ([]store.Node, error), self string, log *slog.Logger) {
	resolved := map[string][]netip.Addr{}
	t := time.NewTicker(peerRefresh)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, peerRefresh)
		nodes, err := list(lctx)
		cancel()
		if err == nil {
			set := map[netip.Addr]bool{}
			next := map[string][]netip.Addr{}
			for _, n := range nodes {
				if n.ID == self {
					continue
				}
				u, err := url.Parse(n.Address)
				if err != nil || u.Hostname() == "" {
					continue
				}
				host := u.Hostname()
				addrs := resolved[host]
				if a, err := netip.ParseAddr(host); err == nil {
					addrs = []netip.Addr{a}
				} else {
					lctx, cancel := context.WithTimeout(ctx, peerRefresh)
					if got, err := net.DefaultResolver.LookupNetIP(lctx, "ip", host); err == nil {
						addrs = got
					} else {
						log.Debug("look up a replica's address", "node", n.ID, "host", host, "err", err)
					}
					cancel()
				}
				next[host] = addrs
				for _, a := range addrs {
					set[a.Unmap()] = true
				}
			}
			resolved = next
			p.set.Store(&set)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// docsOf is the store's documents for front-ends (agentscope's records):
// shared between replicas on Redis, kept across restarts in bbolt.
func docsOf(st store.Store) store.Docs {
	d, _ := st.(store.Docs)
	return d
}
