package agentscope

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Server is the agentscope front-end, a door of the shared server
// (httpapi.Door): create it with New, mount it with httpapi.Config.Doors
// (which registers its routes and closes it at shutdown).
type Server struct {
	cfg Config
	m   *manager.Manager
	dp  *dataplane.Service
	log *slog.Logger
	reg *registry

	procMu sync.Mutex
	mcps   map[sandbox.ID]*mcpGroup // MCP servers added to each sandbox

	browsers browserConns // browser sandboxes' Playwright MCP servers (browser.go)

	ctx    context.Context // ends at Close: bounds background processes
	cancel context.CancelFunc
	pruned chan struct{} // closed when the prune loop is done
}

// New returns the front-end over m and registers its heartbeat hook.
func New(cfg Config, m *manager.Manager) *Server {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	log := cfg.Logger.With("component", "agentscope")
	if cfg.DataPlane == nil {
		cfg.DataPlane = dataplane.New(dataplane.Config{Logger: cfg.Logger}, m, m.Admission())
	}
	s := &Server{
		cfg: cfg, m: m, dp: cfg.DataPlane, log: log, reg: newRegistry(cfg.Docs, log),
		mcps: map[sandbox.ID]*mcpGroup{},
		ctx:  ctx, cancel: cancel,
	}
	if err := s.migrateStorage(); err != nil {
		// Copies of unknown owners may still sit where an owner's area
		// would be: keep no copies rather than hand one to the wrong user.
		s.log.Error("agentscope: cannot lay out STORAGE_FOLDER per owner; workspace copies are off", "err", err)
		s.cfg.StorageFolder = ""
	}
	m.OnHeartbeatRecycle(s.onRecycle)
	m.OnGone(s.onGone)
	s.pruned = make(chan struct{})
	go s.pruneLoop()
	return s
}

// Close stops the MCP servers this front-end started. Sandboxes are left
// to the manager.
func (s *Server) Close() error {
	s.cancel()
	<-s.pruned
	s.procMu.Lock()
	mcps := s.mcps
	s.mcps = map[sandbox.ID]*mcpGroup{}
	s.procMu.Unlock()
	for _, g := range mcps {
		g.close()
	}
	s.browsers.stopAll()
	return nil
}

// Register adds the agentscope routes to mux (the native API's, so both
// share one port).
func (s *Server) Register(mux *http.ServeMux) {
	for _, m := range s.methods() {
		h := s.methodHandler(m)
		mux.Handle("POST /"+m.name, h)
		mux.Handle("POST /"+m.name+"_async", s.methodHandler(m.async()))
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "healthy", "version": s.cfg.Version})
	})
	mux.HandleFunc("/proxy/{identity}/{path...}", s.serveProxy)
	mux.HandleFunc("/proxy/{identity}", s.serveProxy)
	mux.HandleFunc("GET /desktop/{identity}/{path...}", s.serveDesktop)
	mux.HandleFunc("GET /desktop/{identity}", s.serveDesktop)
}

// IsMultipartUpload reports whether r is the sandbox API's batch upload
// (POST /proxy/{identity}/[fastapi/]workspace/files:batch), the one
// agentscope route whose body is multipart/form-data rather than JSON.
func IsMultipartUpload(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/proxy/")
	if !ok {
		return false
	}
	_, rest, _ = strings.Cut(rest, "/")
	rest = strings.TrimPrefix(rest, "fastapi/")
	return rest == "workspace/files:batch"
}

// withSession runs fn holding owner's session key (manager.WithSession:
// the one session hold of every front end, here and on every replica), so
// a restore happens once however many calls race into it, and creates and
// releases of the session do not interleave with it. Without a key there
// is nothing to hold: fn runs with a nil session.
func (s *Server) withSession(ctx context.Context, owner, key string, fn func(ctx context.Context, sess *manager.Session) error) error {
	if key == "" {
		return fn(ctx, nil)
	}
	return s.m.WithSession(ctx, owner, key, fn)
}

// baseURL is the daemon's address as the caller reached it.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// hostPort is the port of the daemon as the caller reached it.
func hostPort(r *http.Request) int {
	_, p, err := net.SplitHostPort(r.Host)
	if err != nil {
		if r.TLS != nil {
			return 443
		}
		return 80
	}
	n, _ := strconv.Atoi(p)
	return n
}

// pruneEvery spaces the sweeps of expired records in a store that keeps
// them until then (bbolt; Redis expires them itself). The first sweep
// comes pruneFirst after the start: a daemon restarted more often than
// pruneEvery (a crash loop, frequent rollouts, the soak's restarts every
// 5 minutes) would otherwise never sweep, and its bbolt file would keep
// every record it ever wrote.
const (
	pruneEvery = 10 * time.Minute
	pruneFirst = 30 * time.Second
)

// pruneLoop deletes expired records (released, replaced, recycled ones
// past their time) until Close: records nobody reads again would otherwise
// stay in the daemon's bbolt file.
func (s *Server) pruneLoop() {
	defer close(s.pruned)
	p, ok := s.cfg.Docs.(store.DocPruner)
	if !ok {
		return
	}
	pruneEach(s.ctx, p, pruneFirst, pruneEvery, s.log)
}

// pruneEach sweeps the expired records of p first after start, then every
// every, until ctx ends.
func pruneEach(ctx context.Context, p store.DocPruner, first, every time.Duration, log *slog.Logger) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(every)
		}
		for _, kind := range []string{docKind, legacyLockKind} {
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			n, err := p.PruneDocs(pctx, kind)
			cancel()
			if err != nil {
				log.Warn("agentscope: prune expired records", "kind", kind, "err", err)
			} else if n > 0 {
				log.Debug("agentscope: pruned expired records", "kind", kind, "records", n)
			}
		}
	}
}
