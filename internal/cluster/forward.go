package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/internal/httpbody"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tracing"
)

// HeaderForwarded marks a request one replica forwarded to another:
// "NODE;UNIXTIME;HMAC" where HMAC is HMAC-SHA256 under the cluster secret
// of the node, the time, the method and the request URI. A replica serves
// such a request itself (no second hop). Any other value is refused (403),
// so an outside caller or a sandbox, which do not know the secret, can
// neither set it nor replay one for another request or after maxSkew.
//
// The forwarder asserts nothing about the caller: the request keeps the
// caller's own credentials (API key, access token, preview token) and the
// hosting daemon authenticates them and checks ownership as for a request
// it got directly. Replicas must therefore share API_KEYS.
const HeaderForwarded = "X-Agentbox-Forwarded"

// maxSkew bounds the age of a forwarding signature (clock skew and queueing
// included).
const maxSkew = time.Minute

// maxPeekBody bounds the agentscope body read to find its identity (the
// agentscope front-end's own limit is larger only for uploads, which carry
// no identity in JSON).
const maxPeekBody = 1 << 20

// ForwardConfig sets up a Forwarder.
type ForwardConfig struct {
	// Self is this node's id.
	Self string
	// Secret is CLUSTER_SECRET; empty: nothing is forwarded (a request
	// for another node's sandbox gets a 503 saying so).
	Secret []byte
	// Store holds the records (which node runs a sandbox).
	Store store.Store
	// Nodes lists the live nodes (Registry.List).
	Nodes func(ctx context.Context) ([]store.Node, error)
	// Local reports whether this daemon runs a sandbox (no store read then).
	Local func(id sandbox.ID) bool
	// PreviewDomain is PREVIEW_DOMAIN (host-form preview and E2B envd).
	PreviewDomain string
	// Prefix is agentscope's CONTAINER_PREFIX_KEY (container names).
	Prefix string
	// Place forwards creates to the least loaded live node.
	Place bool
	// Shared says the store is shared by replicas; without it the
	// forwarder only refuses forged forwarding headers.
	Shared bool
	// MaxConns bounds the connections to each other replica, and so the
	// requests in flight to it (CLUSTER_MAX_CONNS; 0: its default).
	MaxConns int
	// MaxPerUser bounds the requests of one user in flight to one other
	// replica (CLUSTER_MAX_PER_USER; 0: no per-user bound).
	MaxPerUser int
	// User returns the user a request's API key belongs to, "" when it
	// carries none this daemon knows (nil: none ever does).
	User func(r *http.Request) string
	Log  *slog.Logger
}

// Forwarder sends each request for a sandbox another replica runs to that
// replica, and spreads creates over the replicas.
type Forwarder struct {
	cfg   ForwardConfig
	proxy *httputil.ReverseProxy
	slots *slots

	mu     sync.Mutex
	cached []store.Node
	at     time.Time
	ttl    time.Duration // how long cached serves (nodesTTL)
	// placed holds when this replica sent creates to each node, until
	// that node's heartbeat counts them (place).
	placed map[string][]time.Time
}

// NewForwarder returns a forwarder.
func NewForwarder(cfg ForwardConfig) *Forwarder {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Log = cfg.Log.With("component", "forward")
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaults.ClusterMaxConns
	}
	f := &Forwarder{cfg: cfg, ttl: nodesTTL, slots: newSlots(cfg.MaxConns, cfg.MaxPerUser)}
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(targetKey{}).(*url.URL)
			pr.SetURL(target)
			// The caller's host name stays: URLs the hosting daemon puts in
			// its answer (agentscope's, previews) point where the caller
			// came in, and any replica serves them.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set(HeaderForwarded, f.sign(pr.Out.Method, pr.In.URL.RequestURI(), time.Now()))
			if span := trace.SpanFromContext(pr.In.Context()); span.SpanContext().IsValid() {
				tracing.Propagator.Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
			}
		},
		// A placed create refused by its replica's own limit (it filled up
		// since its last heartbeat): this replica tries instead.
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request == nil {
				return nil
			}
			fb, ok := resp.Request.Context().Value(fallbackKey{}).(*fallback)
			if !ok || fb == nil {
				return nil
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				resp.Body.Close()
				return errPlacedFull
			}
			if resp.StatusCode == http.StatusOK && agentscopeCreate(resp.Request.URL.Path) {
				// agentscope answers a create refused by a limit with
				// {"data": null}.
				body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				if err != nil {
					return err
				}
				var v map[string]json.RawMessage
				if json.Unmarshal(body, &v) == nil && len(v) == 1 && string(v["data"]) == "null" {
					return errPlacedFull
				}
				resp.Body = io.NopCloser(bytes.NewReader(body))
			}
			return nil
		},
		// Streams (exec output, downloads, PTY) pass as they come.
		FlushInterval: -1,
		// One pool per replica, bounded: the forwarder holds at most
		// MaxConns requests in flight to a replica (slots), and the
		// transport opens no more connections than that to it, which the
		// replica accepts as this one's (the daemon's limitListener).
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxConnsPerHost:     cfg.MaxConns,
			MaxIdleConnsPerHost: min(64, cfg.MaxConns),
			IdleConnTimeout:     90 * time.Second,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if fb, ok := r.Context().Value(fallbackKey{}).(*fallback); ok && fb != nil && (isDialError(err) || errors.Is(err, errPlacedFull)) {
				// A placed create whose replica could not be reached (it
				// just died or restarted, its lease not yet run out) or
				// refused it (full, or a limit of its own): this replica
				// creates instead (its own limits apply).
				f.cfg.Log.Warn("placement: the chosen replica did not take the create; creating here", "node", fb.node, "err", err)
				f.forget()
				fb.serveHere(w, r)
				return
			}
			f.cfg.Log.Warn("forward failed", "path", r.URL.Path, "err", err)
			writeErr(w, http.StatusBadGateway, "unavailable", "the replica running this sandbox did not answer; retry")
		},
	}
	return f
}

type targetKey struct{}

func (f *Forwarder) sign(method, uri string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return f.cfg.Self + ";" + ts + ";" + hex.EncodeToString(f.mac(f.cfg.Self, ts, method, uri))
}

func (f *Forwarder) mac(node, ts, method, uri string) []byte {
	h := hmac.New(sha256.New, f.cfg.Secret)
	h.Write([]byte(node + "\n" + ts + "\n" + method + "\n" + uri))
	return h.Sum(nil)
}

// verify checks a forwarding header.
func (f *Forwarder) verify(r *http.Request, v string) bool {
	if len(f.cfg.Secret) == 0 {
		return false
	}
	parts := strings.Split(v, ";")
	if len(parts) != 3 {
		return false
	}
	sec, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return false
	}
	if d := time.Since(time.Unix(sec, 0)); d > maxSkew || d < -maxSkew {
		return false
	}
	got, err := hex.DecodeString(parts[2])
	if err != nil {
		return false
	}
	return hmac.Equal(got, f.mac(parts[0], parts[1], r.Method, r.URL.RequestURI()))
}

// Peer returns the replica that forwarded r, when r carries one valid
// forwarding header.
func (f *Forwarder) Peer(r *http.Request) (node string, ok bool) {
	v := r.Header.Values(HeaderForwarded)
	if len(v) != 1 || !f.verify(r, v[0]) {
		return "", false
	}
	node, _, _ = strings.Cut(v[0], ";")
	return node, true
}

// Wrap returns next behind the forwarder.
func (f *Forwarder) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values(HeaderForwarded)) > 0 {
			from, ok := f.Peer(r)
			if !ok {
				writeErr(w, http.StatusForbidden, "permission_denied", "invalid "+HeaderForwarded+" header: it is for agentbox replicas sharing CLUSTER_SECRET only")
				return
			}
			// A replica sent it here: serve it, never forward again.
			f.cfg.Log.Debug("serving a forwarded request", "from", from, "method", r.Method, "path", r.URL.Path)
			r.Header.Del(HeaderForwarded)
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardedKey{}, from)))
			return
		}
		if !f.cfg.Shared || !f.forward(w, r, next) {
			if f.cfg.Shared && strings.HasPrefix(r.URL.Path, "/v1/sessions/") {
				// A session's release destroys its sandboxes other replicas
				// run through them, as the caller (DestroyBy).
				r = r.WithContext(context.WithValue(r.Context(), callerKey{}, r))
			}
			next.ServeHTTP(w, r)
		}
	})
}

// forward serves r by another replica when it is for a sandbox that
// replica runs (or a create placed there), reporting whether it did.
func (f *Forwarder) forward(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	t := f.target(r)
	if t.create {
		return f.place(w, r, next)
	}
	if t.id == "" || (f.cfg.Local != nil && f.cfg.Local(t.id)) {
		return false
	}
	rec, err := f.cfg.Store.Get(r.Context(), t.id)
	if sandbox.ClassOf(err) == sandbox.ClassUnavailable {
		// Not ours, and the store that says whose it is is away: a 404
		// would tell the caller a sandbox another replica runs is gone.
		writeErr(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf(
			"sandbox %s does not run on this replica, and the state store (Redis) that says which one runs it is unavailable; retry", t.id))
		return true
	}
	if err != nil || rec.Node == "" || rec.Node == f.cfg.Self || rec.State == sandbox.StateCreating {
		// Unknown (404 locally) or ours: the daemon answers as a lone one
		// would.
		return false
	}
	node, live := f.node(r.Context(), rec.Node)
	if !live {
		if t.manage {
			return false // shown as lost, deletable: the manager handles it
		}
		writeErr(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf(
			"sandbox %s is lost: its node %s stopped answering (no heartbeat within its lease); delete it, or restart that node", t.id, rec.Node))
		return true
	}
	f.proxyTo(w, r, node, rec.Owner)
	return true
}

// forwardedKey marks the context of a request another replica forwarded.
type forwardedKey struct{}

// Forwarded reports whether r came from another replica (its forwarding
// header verified): it is served here, never sent on.
func Forwarded(r *http.Request) bool { return r.Context().Value(forwardedKey{}) != nil }

// ServeBy serves r by the live replica that runs sandbox id, for a front-
// end that finds the sandbox behind a request only once it read its own
// records (agentscope: an identity redirected to a restored sandbox, or a
// cleanup releasing sandboxes of every replica). It reports false, having
// written nothing, when that is this daemon, no replica (the sandbox is
// unknown, or its replica is lost), the store cannot say, or r was itself
// forwarded: the caller serves r then. r's body must not have been read.
func (f *Forwarder) ServeBy(w http.ResponseWriter, r *http.Request, id sandbox.ID) bool {
	if !f.cfg.Shared || Forwarded(r) || id.Validate() != nil || (f.cfg.Local != nil && f.cfg.Local(id)) {
		return false
	}
	rec, err := f.cfg.Store.Get(r.Context(), id)
	if err != nil || rec.Node == "" || rec.Node == f.cfg.Self || rec.State == sandbox.StateCreating {
		return false
	}
	node, live := f.node(r.Context(), rec.Node)
	if !live {
		return false
	}
	f.proxyTo(w, r, node, rec.Owner)
	return true
}

// proxyTo sends r to node, within the forwarder's bounds of requests in
// flight to node, in total and of the caller's user: owner is the user of
// the sandbox r is for ("" for a create).
func (f *Forwarder) proxyTo(w http.ResponseWriter, r *http.Request, node store.Node, owner string) {
	if len(f.cfg.Secret) == 0 {
		writeErr(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf(
			"this sandbox runs on node %s and this daemon cannot forward to it: set the same CLUSTER_SECRET on every replica", node.ID))
		return
	}
	u, err := url.Parse(node.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		writeErr(w, http.StatusBadGateway, "unavailable", fmt.Sprintf("node %s announces no usable address (NODE_ADDRESS)", node.ID))
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		body, err := wholeBody(r)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "request body: "+err.Error())
			return
		}
		r.Body = body
	}
	// Taken after the body was read (a slow client holds no slot) and
	// held until the answer, a stream or a WebSocket included, is over.
	release, err := f.slots.take(node.ID, f.userOf(r, owner))
	if err != nil {
		if fb, ok := r.Context().Value(fallbackKey{}).(*fallback); ok && fb != nil {
			// A placed create: no room to send it, this replica creates.
			f.cfg.Log.Warn("placement: too many requests in flight to the chosen replica; creating here", "node", fb.node, "err", err)
			fb.serveHere(w, r)
			return
		}
		status, code := http.StatusServiceUnavailable, "unavailable"
		var full *slotsFull
		if errors.As(err, &full) && full.user {
			status, code = http.StatusTooManyRequests, "quota_exceeded"
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(slotRetryAfter/time.Second)))
		writeErr(w, status, code, err.Error())
		return
	}
	defer release()
	// The hop is a client span of the caller's trace (or the root of a new
	// one): the serving replica's spans continue it (Rewrite injects it).
	ctx, span := tracing.Tracer().Start(tracing.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), "forward "+r.Method,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("agentbox.node", node.ID), attribute.String("url.path", r.URL.Path)))
	defer span.End()
	ctx = context.WithValue(ctx, targetKey{}, u)
	f.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// userOf is whom a forwarded request counts against: the user of its API
// key, else the owner of its sandbox (access and preview tokens open one
// sandbox, as its owner), else nobody in particular (a create without a
// key this daemon knows: the other replica refuses it at once).
func (f *Forwarder) userOf(r *http.Request, owner string) string {
	if f.cfg.User != nil {
		if u := f.cfg.User(r); u != "" {
			return u
		}
	}
	return owner
}

// maxBufferedBody is the largest request body the forwarder reads whole
// before it forwards the request.
const maxBufferedBody = 1 << 20

// wholeBody returns r's body read whole when it is small (requests that
// are not uploads), else one that ends as soon as its declared length has
// come. Streamed, a small body could still be on its way to the hosting
// daemon while its answer (an exec or RPC stream) already flows back, and
// an HTTP/1 server refuses body reads once it has answered: the transport
// would then drop the connection in the middle of the stream. A large
// body is an upload, answered after its end.
func wholeBody(r *http.Request) (io.ReadCloser, error) {
	if r.ContentLength > maxBufferedBody {
		return httpbody.EndAtLength(r.Body, r.ContentLength), nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxBufferedBody+1))
	if err != nil {
		return nil, err
	}
	if len(buf) <= maxBufferedBody {
		r.ContentLength = int64(len(buf))
		return io.NopCloser(bytes.NewReader(buf)), nil
	}
	// Larger than it said, or of unknown length: the rest streams.
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}, nil
}

// place forwards a create to the least loaded live node, when that is not
// this one.
func (f *Forwarder) place(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	if !f.cfg.Place || len(f.cfg.Secret) == 0 {
		return false
	}
	nodes := f.live(r.Context()) // refreshed when old
	if len(nodes) < 2 {
		return false
	}
	f.mu.Lock()
	now := time.Now()
	best := -1
	for i := range nodes {
		n := &nodes[i]
		// Loads are as of each node's last heartbeat: add the creates this
		// replica sent it since, so a burst between two heartbeats spreads
		// instead of piling onto the node that was least loaded when it
		// began (and a node's room is not overrun).
		n.Sandboxes += f.placedSince(n.ID, n.SeenAt.Add(-placedMargin), now)
		if n.MaxSandboxes > 0 && n.Sandboxes-n.Pooled >= n.MaxSandboxes {
			continue // full
		}
		if best < 0 || lessLoaded(*n, nodes[best], f.cfg.Self) {
			best = i
		}
	}
	if best < 0 {
		// Every replica is full: this one answers (its own limit refuses).
		f.mu.Unlock()
		return false
	}
	target := nodes[best]
	if f.placed == nil {
		f.placed = map[string][]time.Time{}
	}
	f.placed[target.ID] = append(f.placed[target.ID], now)
	f.mu.Unlock()
	if target.ID == f.cfg.Self {
		return false
	}
	if next != nil && r.ContentLength <= maxBufferedBody {
		// Kept to create here should the chosen replica be unreachable.
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBufferedBody+1))
		if err != nil || len(body) > maxBufferedBody {
			writeErr(w, http.StatusBadRequest, "invalid_argument", "request body too large or unreadable")
			return true
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r = r.WithContext(context.WithValue(r.Context(), fallbackKey{}, &fallback{body: body, next: next, node: target.ID}))
	}
	f.proxyTo(w, r, target, "")
	return true
}

// placedMargin is how long before a heartbeat a create sent to its node
// may still be missing from the load it announced (it had not reached the
// node yet): counted twice rather than not at all.
const placedMargin = time.Second

// placedSince counts the creates sent to node after since, dropping older
// ones (and every record of a node not heard of for a minute). f.mu held.
func (f *Forwarder) placedSince(node string, since, now time.Time) int {
	times := f.placed[node]
	i := 0
	for i < len(times) && !times[i].After(since) {
		i++
	}
	times = times[i:]
	if len(times) == 0 {
		delete(f.placed, node)
	} else {
		f.placed[node] = times
	}
	for id, ts := range f.placed {
		if now.Sub(ts[len(ts)-1]) > time.Minute {
			delete(f.placed, id)
		}
	}
	return len(times)
}

// fallbackKey carries a placed create's fallback.
type fallbackKey struct{}

// fallback serves a placed create here when its replica is unreachable.
type fallback struct {
	body []byte
	next http.Handler
	node string
}

// serveHere creates here what r asked of another replica.
func (fb *fallback) serveHere(w http.ResponseWriter, r *http.Request) {
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(fb.body)), int64(len(fb.body))
	fb.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), fallbackKey{}, nil)))
}

// errPlacedFull is a placed create refused by its replica's limit (429,
// or agentscope's null).
var errPlacedFull = errors.New("the chosen replica refused the create (a limit)")

// agentscopeCreate reports whether path is agentscope's create or
// create_from_pool (or their _async twins).
func agentscopeCreate(path string) bool {
	m := strings.TrimSuffix(strings.TrimPrefix(path, "/"), "_async")
	return m == "create" || m == "create_from_pool"
}

// isDialError reports whether err is a failure to connect (the request
// never reached the other replica).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// forget drops the cached node list, so the next request reads it afresh.
func (f *Forwarder) forget() {
	f.mu.Lock()
	f.at = time.Time{}
	f.mu.Unlock()
}

// lessLoaded orders nodes by handed-out sandboxes, then memory, then
// prefers self (no hop), then the id.
func lessLoaded(a, b store.Node, self string) bool {
	if ua, ub := a.Sandboxes-a.Pooled, b.Sandboxes-b.Pooled; ua != ub {
		return ua < ub
	}
	if a.MemoryBytes != b.MemoryBytes {
		return a.MemoryBytes < b.MemoryBytes
	}
	if (a.ID == self) != (b.ID == self) {
		return a.ID == self
	}
	return a.ID < b.ID
}

// nodesTTL is how long the forwarder reuses a node list: heartbeats come
// every 5 s, so a second more changes nothing but saves a store read per
// request.
const nodesTTL = time.Second

func (f *Forwarder) live(ctx context.Context) []store.Node {
	return f.nodes(ctx, false)
}

// nodes returns the live nodes, from the cache unless fresh is set.
func (f *Forwarder) nodes(ctx context.Context, fresh bool) []store.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !fresh && f.cached != nil && time.Since(f.at) < f.ttl {
		return slices.Clone(f.cached)
	}
	nodes, err := f.cfg.Nodes(ctx)
	if err != nil {
		return slices.Clone(f.cached) // the store is away: the last list, if any
	}
	f.cached, f.at = nodes, time.Now()
	return slices.Clone(nodes)
}

// node returns live node id. A node missing from the cached list is looked
// up again before it is called lost: it may have come back within the
// cache's second.
func (f *Forwarder) node(ctx context.Context, id string) (store.Node, bool) {
	for _, fresh := range []bool{false, true} {
		for _, n := range f.nodes(ctx, fresh) {
			if n.ID == id {
				return n, true
			}
		}
	}
	return store.Node{}, false
}

// target is what a request is about.
type target struct {
	id sandbox.ID
	// manage: the request reads or deletes the sandbox itself (answered
	// for a lost sandbox), rather than using it.
	manage bool
	// create: a create that placement may send elsewhere.
	create bool
}

// target finds the sandbox a request is for, in every route family: the
// native API, E2B's control plane, previews and E2B's data plane by host
// name or E2b-Sandbox-Id header, agentscope's methods (their "identity")
// and its proxy.
func (f *Forwarder) target(r *http.Request) target {
	if id, ok := f.hostTarget(r.Host); ok {
		return target{id: id}
	}
	if raw := r.Header.Get("E2b-Sandbox-Id"); raw != "" {
		// E2B's data plane addressed by header (the SDKs' sandbox URL
		// pointing at the API).
		if id := sandbox.ID(strings.ToLower(strings.TrimSpace(raw))); id.Validate() == nil {
			return target{id: id}
		}
		return target{}
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && (p == "/v1/sandboxes" || p == "/sandboxes" || p == "/v2/sandboxes"):
		return target{create: true}
	case strings.HasPrefix(p, "/v1/sandboxes/"):
		return pathTarget(r.Method, strings.TrimPrefix(p, "/v1/sandboxes/"))
	case strings.HasPrefix(p, "/v2/sandboxes/"):
		return pathTarget(r.Method, strings.TrimPrefix(p, "/v2/sandboxes/"))
	case strings.HasPrefix(p, "/sandboxes/"):
		return pathTarget(r.Method, strings.TrimPrefix(p, "/sandboxes/"))
	case r.Method == http.MethodPost && p == "/api/sandbox":
		// Daytona's create.
		return target{create: true}
	case strings.HasPrefix(p, "/api/sandbox/"):
		// Daytona's control plane by sandbox ID (a name is resolved by
		// the Daytona front end, which forwards through ServeBy).
		return pathTarget(r.Method, strings.TrimPrefix(p, "/api/sandbox/"))
	case strings.HasPrefix(p, "/api/toolbox/"):
		// Daytona's toolbox (its sessions live on the sandbox's replica).
		return pathTarget(r.Method, strings.TrimPrefix(p, "/api/toolbox/"))
	case strings.HasPrefix(p, "/proxy/"):
		rest := strings.TrimPrefix(p, "/proxy/")
		ident, _, _ := strings.Cut(rest, "/")
		return target{id: f.identity(ident)}
	case r.Method == http.MethodPost && strings.Count(p, "/") == 1:
		return f.agentscopeTarget(r)
	}
	return target{}
}

func pathTarget(method, rest string) target {
	id, sub, _ := strings.Cut(rest, "/")
	t := target{id: sandbox.ID(id)}
	if t.id.Validate() != nil {
		return target{}
	}
	t.manage = sub == "" && (method == http.MethodGet || method == http.MethodDelete)
	return t
}

// hostTarget parses PORT-ID.PREVIEW_DOMAIN.
func (f *Forwarder) hostTarget(host string) (sandbox.ID, bool) {
	if f.cfg.PreviewDomain == "" {
		return "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	label, ok := strings.CutSuffix(host, "."+f.cfg.PreviewDomain)
	if !ok || strings.Contains(label, ".") {
		return "", false
	}
	_, id, ok := strings.Cut(label, "-")
	if !ok || sandbox.ID(id).Validate() != nil {
		return "", false
	}
	return sandbox.ID(id), true
}

// agentscopeManage are the agentscope methods answered for a lost sandbox
// (its status, and release deletes its record).
var agentscopeManage = map[string]bool{"release": true, "get_status": true, "get_info": true}

// agentscopeTarget reads an agentscope method's JSON body for its identity
// (and puts the body back for the handler). create and create_from_pool
// are placed.
func (f *Forwarder) agentscopeTarget(r *http.Request) target {
	method := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "_async")
	switch method {
	case "create", "create_from_pool":
		return target{create: true}
	case "release", "start", "stop", "get_status", "get_info", "check_health", "list_tools", "call_tool", "add_mcp_servers":
	default:
		return target{}
	}
	if r.Body == nil || r.ContentLength > maxPeekBody {
		return target{}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPeekBody+1))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	if err != nil || len(body) > maxPeekBody {
		return target{}
	}
	var args struct {
		Identity json.RawMessage `json:"identity"`
		Args     json.RawMessage `json:"args"` // a positional first argument, or a list
	}
	if json.Unmarshal(body, &args) != nil {
		return target{}
	}
	raw := args.Identity
	if len(raw) == 0 && len(args.Args) > 0 {
		var list []json.RawMessage
		if json.Unmarshal(args.Args, &list) == nil && len(list) > 0 {
			raw = list[0]
		} else {
			raw = args.Args
		}
	}
	var ident string
	if json.Unmarshal(raw, &ident) != nil {
		return target{}
	}
	return target{id: f.identity(ident), manage: agentscopeManage[method]}
}

// identity maps an agentscope identity (a container name or a sandbox id)
// to a sandbox id.
func (f *Forwarder) identity(ident string) sandbox.ID {
	id := sandbox.ID(strings.TrimPrefix(ident, f.cfg.Prefix))
	if id.Validate() != nil {
		return ""
	}
	return id
}

// writeErr answers in the native API's error shape; code is one of its
// stable codes (api/openapi.yaml, Error).
func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}
