package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxRPCMessage bounds one received RPC message.
const maxRPCMessage = 16 << 20

// Config configures a Server.
type Config struct {
	// Workdir is the default working directory of processes; when it does
	// not exist (or the user cannot enter it) the user's home is used.
	Workdir string
	// AccessToken, when set, must be sent as X-Access-Token on every
	// request except GET /health.
	AccessToken string
	// Env is the default environment of processes and what GET /envs
	// reports, as KEY=VALUE pairs; nil means os.Environ(). AGENTBOX_*
	// variables are always removed.
	Env []string
	// Logger receives the agent's logs; nil means slog.Default().
	Logger *slog.Logger
	// PasswdFile and GroupFile are the account databases; empty means
	// /etc/passwd and /etc/group.
	PasswdFile string
	GroupFile  string
	// Shim is the supervisor of every process the process API starts, so
	// that a timeout or a kill ends the process's whole tree (see
	// ShimArg): the agent's own executable, re-executed with ShimArg, or
	// with ShimExternal agentbox-shim (cmd/agentbox-shim), the same
	// protocol in a small static program. Empty starts processes
	// directly: then only their process group is signalled.
	Shim string
	// ShimExternal says Shim is agentbox-shim. It starts in a tenth of
	// a millisecond, so none is started ahead of need: an idle sandbox
	// holds no shim.
	ShimExternal bool
	// Service is what StartService runs and supervises; nil runs nothing.
	Service *sandbox.Service
	// Reset, when set, enables the host's warm reset routes (reset_linux.go).
	Reset *ResetConfig
	// DefaultUser, when set, is who processes and file operations run as
	// when a request names no user; nil means the agent's own identity.
	// An agent running as root of its sandbox's user namespace acts as
	// uid 1000 this way, and as root only when a request asks for it.
	// It must be the agent's own identity unless the agent runs as uid 0.
	DefaultUser *Identity
	// OnlyDefaultUser, when set, refuses every request for another user
	// than DefaultUser with permission_denied, giving this reason: the
	// agent runs as root only to guard its own socket (a gVisor sandbox,
	// where root's files on the host would be the host's root's).
	OnlyDefaultUser string
	// DeferShims leaves the first exec shim to StartShims (or the first
	// process start): an agent that reports ready before it starts one
	// does not compete with it for the CPU on the way to ready.
	DeferShims bool
}

// Server is the agent's HTTP server: the envd services plus REST routes.
// Create it with NewServer; it starts the process-wide Reaper.
type Server struct {
	cfg Config
	// devNull is the stdin of every process started without a stdin pipe
	// (opened once, see childStdin).
	devNull      *os.File
	devNullErr   error
	devNullOnce  sync.Once
	log          *slog.Logger
	accounts     *accounts
	self         *User // the agent's own identity
	def          *User // who requests naming no user act as (Config.DefaultUser, else self)
	reaper       *Reaper
	shims        *shimPool // nil without Config.Shim
	procs        *procTable
	pollWatchers *pollWatchers
	// envMu guards defaultEnv, which POST /init can extend at any time.
	envMu      sync.RWMutex
	defaultEnv map[string]string
	mux        *http.ServeMux
	handler    http.Handler
	code       *codeService
	svc        *supervisor
	closing    atomic.Bool // Shutdown began: the service is not restarted
	// token is the SHA-256 of the access token (nil: none), replaced by
	// POST /init's accessToken; startToken the one the agent started with
	// (still valid on ServeHost's listener).
	token      atomic.Pointer[[32]byte]
	startToken *[32]byte
	// reset is nil unless Config.Reset enabled the warm reset; killed is
	// set once /reset/kill ended this generation's processes.
	reset  *resetState
	killed atomic.Bool
	// front is what the generations of a server renewed by warm resets
	// share: the listeners' handler, connections and requests.
	front *frontend
}

// frontend dispatches every request to the active generation of a server
// (a warm reset replaces it, see renew) and tracks the open connections
// and the requests being handled, which a warm reset cuts and waits for.
type frontend struct {
	active   atomic.Pointer[Server]
	handler  http.Handler
	conns    connSet
	inflight atomic.Int64
}

func newFrontend(first *Server) *frontend {
	f := &frontend{}
	f.active.Store(first)
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.inflight.Add(1)
		defer f.inflight.Add(-1)
		f.active.Load().handler.ServeHTTP(w, r)
	})
	return f
}

// connKey marks a request's context with its connection.
type connKey struct{}

// connSet tracks a server's open connections (http.Server.ConnState).
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (cs *connSet) track(c net.Conn, st http.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch st {
	case http.StateNew:
		if cs.m == nil {
			cs.m = map[net.Conn]struct{}{}
		}
		cs.m[c] = struct{}{}
	case http.StateClosed:
		delete(cs.m, c)
	}
}

// closeAllBut closes every tracked connection but keep.
func (cs *connSet) closeAllBut(keep net.Conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for c := range cs.m {
		if c != keep {
			c.Close()
		}
	}
}

// NewServer builds a server. It starts the process-wide reaper, so the
// embedding program must not wait for child processes itself.
func NewServer(cfg Config) *Server {
	s := newServer(cfg)
	s.front = newFrontend(s)
	return s
}

// newServer builds one generation of a server, without its frontend.
func newServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PasswdFile == "" {
		cfg.PasswdFile = "/etc/passwd"
	}
	if cfg.GroupFile == "" {
		cfg.GroupFile = "/etc/group"
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	s := &Server{
		cfg:          cfg,
		log:          cfg.Logger,
		accounts:     newAccounts(cfg.PasswdFile, cfg.GroupFile),
		reaper:       StartReaper(cfg.Logger),
		procs:        newProcTable(),
		pollWatchers: newPollWatchers(),
		defaultEnv:   envMap(cfg.Env),
		mux:          http.NewServeMux(),
	}
	s.self = currentUser(s.accounts, cfg.DefaultUser)
	s.def = defaultUser(s.accounts, s.self, cfg.DefaultUser)
	if cfg.Shim != "" {
		s.shims = newShimPool(s, cfg.Shim, cfg.ShimExternal)
		if !cfg.DeferShims {
			s.shims.poke()
		}
	}
	// Messages are small (input chunks, paths); file content goes through
	// /files. The cap keeps a bogus length prefix from allocating wildly.
	limit := connect.WithReadMaxBytes(maxRPCMessage)
	s.mux.Handle(processconnect.NewProcessHandler(&processService{s: s}, limit))
	s.mux.Handle(filesystemconnect.NewFilesystemHandler(&fsService{s: s}, limit))
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s.mux.HandleFunc("GET /envs", s.handleEnvs)
	s.mux.HandleFunc("POST /init", s.handleInit)
	s.mux.HandleFunc("GET /files", s.handleDownload)
	s.mux.HandleFunc("POST /files", s.handleUpload)
	s.mux.HandleFunc("POST /fs/edit", s.handleEdit)
	s.mountCode() // code contexts: /execute, /contexts (code.go)
	s.svc = newSupervisor(s, cfg.Service)
	s.mux.HandleFunc("GET /service", s.handleService)
	s.mountReset(cfg.Reset)
	s.handler = s.authorize(s.mux)
	return s
}

// StartShims starts the exec shims kept ready ahead of need (see
// Config.DeferShims).
func (s *Server) StartShims() {
	if s.shims != nil {
		s.shims.poke()
	}
}

// Mux returns the router, so that other handler sets (for example the
// code-interpreter routes) can be mounted on the same server. Routes added
// here are behind the same access-token check as the built-in ones. A warm
// reset's new generation has the built-in routes only.
func (s *Server) Mux() *http.ServeMux { return s.mux }

// Handler returns the complete HTTP handler (routes plus authorization).
func (s *Server) Handler() http.Handler { return s.front.handler }

// Serve serves HTTP/1.1 and cleartext HTTP/2 (for gRPC clients) on ln until
// ctx is cancelled, then closes the listener and all connections.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, false)
}

// hostConn marks the context of a connection accepted by ServeHost.
type hostConn struct{}

// ServeHost is Serve for the listener only the host reaches (the
// sandbox's host socket) of an agent that also serves a second, reachable
// one (--listen-also: the pod IP on an agentbox node). On it the access
// token the agent started with stays valid after POST /init replaced the
// token: a caller that rotated the token on the pod IP (a warm pool's
// hand-out) shuts out the pool's token there, not the node that runs the
// sandbox (its exec, logs and health checks).
func (s *Server) ServeHost(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, true)
}

func (s *Server) serve(ctx context.Context, ln net.Listener, host bool) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           s.front.handler,
		Protocols:         &protocols,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       10 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	srv.ConnState = s.front.conns.track
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		ctx = context.WithValue(ctx, connKey{}, c)
		if host {
			ctx = context.WithValue(ctx, hostConn{}, true)
		}
		return ctx
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve: %w", err)
}

// Shutdown ends every process the agent started: SIGTERM to each process
// group, then SIGKILL to those still running when ctx ends. It returns
// once all of them have been reaped or ctx is done, and also stops the
// polling watchers.
func (s *Server) Shutdown(ctx context.Context) {
	s = s.front.active.Load() // the generation a warm reset left serving
	s.closing.Store(true)
	s.pollWatchers.closeAll()
	if s.shims != nil {
		s.shims.close()
	}
	procs := s.procs.list()
	for _, p := range procs {
		_ = p.signal(sigTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			_ = p.signal(sigKILL)
		}
	}
	kill, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-kill.Done():
			return
		}
	}
}
