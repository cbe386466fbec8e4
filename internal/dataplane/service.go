// Package dataplane is the one service through which every front end —
// the native API, E2B's data plane, agentscope's routes and tools, MCP
// and function calling, the console — works inside a sandbox: commands,
// files, code contexts, terminals, and E2B's envd protocol. No front end
// holds an agent client; each opens a Request here, which
//
//   - checks that the caller owns the sandbox (not found otherwise),
//   - admits the request against the caller's share of the daemon
//     (MAX_REQUESTS_PER_USER, REQUEST_MEMORY: 429 with a retry hint when
//     it does not fit), so the limits hold on every door alike, and
//   - confines its paths, when the front end asks for it, in the sandbox's
//     agent: resolved there under the given roots in one round trip, with
//     no check-then-act race.
//
// A new protocol is an adapter over this package, never a new copy of
// exec or files.
package dataplane

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/admission"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Sandboxes is what the service needs of the lifecycle manager.
type Sandboxes interface {
	// Get returns owner's sandbox id (ClassNotFound for anyone else's).
	Get(ctx context.Context, owner string, id sandbox.ID) (*store.Record, error)
	// Agent returns the agent client of owner's running sandbox id. Only
	// this package may hold one.
	Agent(ctx context.Context, owner string, id sandbox.ID) (*agentclient.Client, error)
	// LimitCounters reads the sandbox's OOM kills and pids-limit hits;
	// ok is false when the backend cannot tell.
	LimitCounters(ctx context.Context, id sandbox.ID) (oomKills, pidsLimitHits int64, ok bool)
	// Log adds a line to the sandbox's log.
	Log(id sandbox.ID, level, msg string, fields map[string]any)
}

// LimitReporter is a Sandboxes that records when a limit killed a
// process during a command (the lifecycle event process_killed).
type LimitReporter interface {
	LimitHit(id sandbox.ID, oom bool, exitCode int, cmd []string)
}

// Config configures the service.
type Config struct {
	// MaxExecOutput caps the bytes of each stream kept for a buffered
	// exec.
	MaxExecOutput int64
	// DefaultExecTimeout applies to an exec that names no timeout.
	DefaultExecTimeout time.Duration
	// Registry receives the service's metrics (nil: not registered).
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Service is the data plane. It is safe for concurrent use.
type Service struct {
	cfg       Config
	sandboxes Sandboxes
	admission *admission.Tracker
	log       *slog.Logger
	// execSeconds is the duration of commands.
	execSeconds prometheus.Histogram
	// execs is each sandbox's last commands (ExecHistory).
	execs execHistory
}

// New returns the service over sandboxes, admitting requests with adm
// (the daemon's one tracker, shared with the template routes).
func New(cfg Config, sandboxes Sandboxes, adm *admission.Tracker) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultExecTimeout == 0 {
		cfg.DefaultExecTimeout = 60 * time.Second
	}
	if cfg.MaxExecOutput == 0 {
		cfg.MaxExecOutput = defaults.MaxExecOutputBytes
	}
	if adm == nil {
		adm = admission.New(0, 0)
	}
	s := &Service{cfg: cfg, sandboxes: sandboxes, admission: adm, log: cfg.Logger,
		execSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentbox_exec_seconds", Help: "Duration of exec requests.", Buckets: latencyBuckets,
		})}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(s.execSeconds)
	}
	return s
}

// latencyBuckets span 0.5 ms to 10 s, as the manager's: short commands
// take milliseconds, long ones seconds.
var latencyBuckets = []float64{.0005, .001, .002, .005, .01, .02, .03, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Option tunes a Request.
type Option func(*Request)

// Confine resolves every path of the request in the sandbox under roots
// (absolute directories): relative paths are relative to the first, and a
// path or symbolic link leading out of all of them is refused with a
// ClassForbidden error wrapping ErrOutsideRoot.
func Confine(roots ...string) Option {
	return func(r *Request) { r.roots = append([]string(nil), roots...) }
}

// Weight reserves bytes of the daemon's request memory for the request's
// buffers up front (its body, say), besides the fixed overhead every
// request is charged.
func Weight(bytes int64) Option {
	return func(r *Request) { r.weight = bytes }
}

// Uncounted opens a request the daemon makes on its own behalf (copying a
// workspace out at release, keeping an MCP server running): it is not
// counted against the owner's requests in flight, so the owner's load
// never makes the daemon drop such work. Memory it reserves is charged.
func Uncounted() Option {
	return func(r *Request) { r.uncounted = true }
}

// ErrOutsideRoot is wrapped by the refusal of a confined request's path
// that leads outside its roots.
var ErrOutsideRoot = agentclient.ErrOutsideRoot

// ErrExecutableNotFound is wrapped by the refusal of an exec whose
// executable does not exist in the sandbox (class invalid_argument).
var ErrExecutableNotFound = agentclient.ErrExecutableNotFound

// Request is one admitted request of a front end on one sandbox. Every
// operation inside the sandbox goes through one; End gives its admission
// and reservations back. A Request may be used by several goroutines.
type Request struct {
	s      *Service
	owner  string
	id     sandbox.ID
	roots  []string
	weight int64
	// uncounted: the daemon's own work (see Uncounted).
	uncounted bool
	client    *agentclient.Client // the agent, confined to roots if any

	mu       sync.Mutex
	releases []func()
}

// Begin opens a request of owner on sandbox id: the sandbox must be
// owner's and running, and the request must fit owner's share of the
// daemon (a ClassQuota error carrying an *admission.RetryAfterError
// otherwise). The caller must End it.
func (s *Service) Begin(ctx context.Context, owner string, id sandbox.ID, opts ...Option) (*Request, error) {
	r := &Request{s: s, owner: owner, id: id}
	for _, o := range opts {
		o(r)
	}
	client, err := s.sandboxes.Agent(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if r.uncounted {
		if err := r.Reserve(r.weight); err != nil {
			return nil, err
		}
	} else {
		release, err := s.admission.Admit(owner, r.weight)
		if err != nil {
			return nil, err
		}
		r.releases = []func(){release}
	}
	if len(r.roots) > 0 {
		client = client.Confined(r.roots...)
	}
	r.client = client
	return r, nil
}

// Owner is the user the request acts for.
func (r *Request) Owner() string { return r.owner }

// Sandbox is the sandbox the request works in.
func (r *Request) Sandbox() sandbox.ID { return r.id }

// Reserve charges n more bytes of the daemon's request memory to the
// request, for buffers it finds it needs; they are given back at End.
func (r *Request) Reserve(n int64) error {
	if n <= 0 {
		return nil
	}
	release, err := r.s.admission.Reserve(r.owner, n)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.releases = append(r.releases, release)
	r.mu.Unlock()
	return nil
}

// End releases the request's admission and reservations. It may be
// called more than once.
func (r *Request) End() {
	r.mu.Lock()
	rs := r.releases
	r.releases = nil
	r.mu.Unlock()
	for _, release := range rs {
		release()
	}
}

// Do runs fn in a request of owner on sandbox id, ended when fn returns.
func (s *Service) Do(ctx context.Context, owner string, id sandbox.ID, fn func(*Request) error, opts ...Option) error {
	r, err := s.Begin(ctx, owner, id, opts...)
	if err != nil {
		return err
	}
	defer r.End()
	return fn(r)
}
