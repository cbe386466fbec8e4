package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// replica is one forwarder-wrapped test server answering "served by ID".
type replica struct {
	id  string
	srv *httptest.Server
	f   *Forwarder
}

func newReplicas(t *testing.T, st store.Store, secret string, ids ...string) []*replica {
	t.Helper()
	var reps []*replica
	nodes := func(context.Context) ([]store.Node, error) {
		var out []store.Node
		for _, r := range reps {
			out = append(out, store.Node{ID: r.id, Address: r.srv.URL, Sandboxes: map[string]int{"a": 5, "b": 1}[r.id]})
		}
		return out, nil
	}
	for _, id := range ids {
		r := &replica{id: id}
		r.f = NewForwarder(ForwardConfig{Self: id, Secret: []byte(secret), Store: st, Nodes: nodes, Shared: true,
			Place: true, PreviewDomain: "sb.example", Prefix: "box-"})
		r.srv = httptest.NewServer(r.f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			w.Header().Set("X-Served-By", id)
			w.Header().Set("X-Saw-Forwarded", req.Header.Get(HeaderForwarded))
			w.Write(body)
		})))
		t.Cleanup(r.srv.Close)
		reps = append(reps, r)
	}
	return reps
}

func do(t *testing.T, method, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// Requests for b's sandbox sent to a are served by b, in every route
// family; the hop's header is checked and removed before the handler; a's
// own and unknown sandboxes stay on a; creates go to the least loaded node.
func TestForwardRoutes(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	st.Put(ctx, &store.Record{ID: "onb", Node: "b", Owner: "alice"})
	st.Put(ctx, &store.Record{ID: "ona", Node: "a", Owner: "alice"})
	reps := newReplicas(t, st, testSecret, "a", "b")
	a := reps[0].srv.URL
	for _, c := range []struct {
		method, path, body string
		hdr                []string
		want               string
	}{
		{"GET", "/v1/sandboxes/onb/files?path=/x", "", nil, "b"},
		{"POST", "/v1/sandboxes/onb/exec", `{"cmd":["true"]}`, nil, "b"},
		{"DELETE", "/sandboxes/onb", "", nil, "b"},
		{"POST", "/v2/sandboxes/onb/connect", "{}", nil, "b"},
		{"GET", "/proxy/box-onb/index.html", "", nil, "b"},
		{"POST", "/call_tool", `{"identity":"box-onb","tool_name":"run_shell_command"}`, nil, "b"},
		{"POST", "/get_status_async", `{"args":["onb"]}`, nil, "b"},
		{"GET", "/", "", []string{"Host", "8080-onb.sb.example"}, "b"},
		{"POST", "/process.Process/Start", "{}", []string{"E2b-Sandbox-Id", "ONB", "E2b-Sandbox-Port", "49983"}, "b"},
		{"POST", "/process.Process/Start", "{}", []string{"E2b-Sandbox-Id", "ona"}, "a"},
		{"GET", "/v1/sandboxes/ona/logs", "", nil, "a"},
		{"GET", "/v1/sandboxes/nosuch/logs", "", nil, "a"},
		{"GET", "/v1/sandboxes", "", nil, "a"},
		{"POST", "/v1/sandboxes", "{}", nil, "b"}, // b is less loaded
		{"POST", "/create_from_pool", "{}", nil, "b"},
		{"POST", "/api/sandbox/onb/stop", "", nil, "b"},
		{"GET", "/api/sandbox/onb", "", nil, "b"},
		{"POST", "/api/toolbox/onb/process/execute", `{"command":"true"}`, nil, "b"},
		{"GET", "/api/toolbox/ona/files?path=/", "", nil, "a"},
		{"GET", "/api/sandbox/by-a-name", "", nil, "a"}, // names: the Daytona door's ServeBy
		{"GET", "/api/sandbox", "", nil, "a"},
		{"POST", "/api/sandbox", "{}", nil, "b"},
	} {
		resp := do(t, c.method, a+c.path, c.body, c.hdr...)
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != c.want || string(got) != c.body {
			t.Errorf("%s %s: %d served by %q body %q; want %s", c.method, c.path, resp.StatusCode, resp.Header.Get("X-Served-By"), got, c.want)
		}
		if resp.Header.Get("X-Saw-Forwarded") != "" {
			t.Errorf("%s %s: the handler saw the forwarding header", c.method, c.path)
		}
	}
}

// The forwarding header: a valid one is honoured once (no second hop even
// when the record names another node); a forged, replayed-elsewhere,
// stale, doubled or wrongly keyed one is refused with 403; without a
// secret every one is.
func TestForwardHeader(t *testing.T) {
	st := store.NewMemory()
	st.Put(context.Background(), &store.Record{ID: "onb", Node: "b"})
	reps := newReplicas(t, st, testSecret, "a", "b")
	a := reps[0]
	now := time.Now()
	valid := a.f.sign("GET", "/v1/sandboxes/onb/logs", now)
	// Valid: served where it arrived (b's record notwithstanding).
	resp := do(t, "GET", a.srv.URL+"/v1/sandboxes/onb/logs", "", HeaderForwarded, valid)
	if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != "a" {
		t.Fatalf("valid header: %d served by %q", resp.StatusCode, resp.Header.Get("X-Served-By"))
	}
	other := NewForwarder(ForwardConfig{Self: "a", Secret: []byte(strings.Repeat("x", 32))})
	for name, h := range map[string]string{
		"other path":   valid[:0] + a.f.sign("GET", "/v1/sandboxes/onb/files", now),
		"other method": a.f.sign("DELETE", "/v1/sandboxes/onb/logs", now),
		"stale":        a.f.sign("GET", "/v1/sandboxes/onb/logs", now.Add(-2*time.Minute)),
		"future":       a.f.sign("GET", "/v1/sandboxes/onb/logs", now.Add(2*time.Minute)),
		"other secret": other.sign("GET", "/v1/sandboxes/onb/logs", now),
		"garbage":      "nonsense",
		"no mac":       "a;" + strconv.FormatInt(now.Unix(), 10) + ";",
		"other node":   "b" + valid[1:],
	} {
		resp := do(t, "GET", a.srv.URL+"/v1/sandboxes/onb/logs", "", HeaderForwarded, h)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Served-By") != "" {
			t.Errorf("%s: %d served by %q", name, resp.StatusCode, resp.Header.Get("X-Served-By"))
		}
	}
	// Two headers, one valid: refused.
	req, _ := http.NewRequest("GET", a.srv.URL+"/v1/sandboxes/onb/logs", nil)
	req.Header.Add(HeaderForwarded, valid)
	req.Header.Add(HeaderForwarded, valid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("doubled header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("doubled header: %v", resp.StatusCode)
	}
	// Without a secret, nothing is forwarded and every header refused.
	bare := newReplicas(t, st, "", "a", "b")[0]
	if resp := do(t, "GET", bare.srv.URL+"/v1/sandboxes/onb/logs", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("no secret, other node's sandbox: %d", resp.StatusCode)
	}
	if resp := do(t, "GET", bare.srv.URL+"/v1/sandboxes", "", HeaderForwarded, valid); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no secret, a header: %d", resp.StatusCode)
	}
}

// A node missing from the registry is lost: using its sandbox fails with
// 503 naming it; reading or deleting the sandbox itself reaches the local
// handler (which shows it lost and drops its record).
func TestForwardLost(t *testing.T) {
	st := store.NewMemory()
	st.Put(context.Background(), &store.Record{ID: "ongone", Node: "gone"})
	a := newReplicas(t, st, testSecret, "a", "b")[0]
	resp := do(t, "POST", a.srv.URL+"/v1/sandboxes/ongone/exec", "{}")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "lost") || !strings.Contains(string(body), "gone") {
		t.Fatalf("exec in a lost sandbox: %d %s", resp.StatusCode, body)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if resp := do(t, m, a.srv.URL+"/v1/sandboxes/ongone", ""); resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != "a" {
			t.Fatalf("%s of a lost sandbox: %d by %q", m, resp.StatusCode, resp.Header.Get("X-Served-By"))
		}
	}
}

func TestLessLoaded(t *testing.T) {
	n := func(id string, used, pooled int, mem int64) store.Node {
		return store.Node{ID: id, Sandboxes: used + pooled, Pooled: pooled, MemoryBytes: mem}
	}
	for _, c := range []struct {
		a, b store.Node
		want bool
	}{
		{n("x", 1, 0, 0), n("y", 2, 0, 0), true},
		{n("x", 1, 9, 0), n("y", 2, 0, 0), true}, // pooled ones do not count
		{n("x", 1, 0, 2), n("y", 1, 0, 1), false},
		{n("self", 1, 0, 1), n("a", 1, 0, 1), true},
		{n("a", 1, 0, 1), n("b", 1, 0, 1), true},
	} {
		if got := lessLoaded(c.a, c.b, "self"); got != c.want {
			t.Errorf("lessLoaded(%+v, %+v) = %v", c.a, c.b, got)
		}
	}
}

// A burst of creates between two heartbeats spreads: each placement
// counts on its node until the next refresh of the node list.
func TestPlacementSpreadsBurst(t *testing.T) {
	reps := newReplicas(t, store.NewMemory(), testSecret, "a", "b")
	reps[0].f.ttl = time.Hour // one node list for the whole burst
	served := map[string]int{}
	for i := 0; i < 8; i++ {
		resp := do(t, "POST", reps[0].srv.URL+"/v1/sandboxes", "{}")
		served[resp.Header.Get("X-Served-By")]++
	}
	// a has 5, b 1: b takes four, then they alternate (a first: no hop).
	if served["a"] != 2 || served["b"] != 6 {
		t.Fatalf("8 creates placed %v, want a:2 b:6", served)
	}
}

// downStore is a state store that is away.
type downStore struct{ store.Store }

func (downStore) Get(context.Context, sandbox.ID) (*store.Record, error) {
	return nil, sandbox.Errorf(sandbox.ClassUnavailable, "state store (Redis) unavailable")
}

// With the store away, a sandbox this replica runs is served (no store
// read), and any other id is a 503, not a 404 that would call it gone.
func TestForwardStoreDown(t *testing.T) {
	f := NewForwarder(ForwardConfig{Self: "a", Secret: []byte(testSecret), Store: downStore{store.NewMemory()}, Shared: true,
		Nodes: func(context.Context) ([]store.Node, error) {
			return nil, sandbox.Errorf(sandbox.ClassUnavailable, "down")
		},
		Local: func(id sandbox.ID) bool { return id == "mine" }})
	srv := httptest.NewServer(f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Served-By", "a") })))
	defer srv.Close()
	if resp := do(t, "POST", srv.URL+"/v1/sandboxes/mine/exec", "{}"); resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != "a" {
		t.Fatalf("own sandbox with the store down: %d", resp.StatusCode)
	}
	resp := do(t, "POST", srv.URL+"/v1/sandboxes/other/exec", "{}")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "Redis") {
		t.Fatalf("another id with the store down: %d %s", resp.StatusCode, body)
	}
	// Creates stay here (no node list to place by).
	if resp := do(t, "POST", srv.URL+"/v1/sandboxes", "{}"); resp.Header.Get("X-Served-By") != "a" {
		t.Fatalf("create with the store down: %d", resp.StatusCode)
	}
}

// A create placed on a replica that cannot be reached (it died, its lease
// has not run out) is served by the replica that got it, body intact.
func TestPlaceFallsBackWhenUnreachable(t *testing.T) {
	reps := newReplicas(t, store.NewMemory(), testSecret, "a", "b")
	reps[1].srv.Close() // b (the least loaded) is gone
	resp := do(t, "POST", reps[0].srv.URL+"/v1/sandboxes", `{"template":"x"}`)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Served-By") != "a" || string(body) != `{"template":"x"}` {
		t.Fatalf("got %d by %q: %s", resp.StatusCode, resp.Header.Get("X-Served-By"), body)
	}
	// A request for a sandbox b runs is not re-served here: 502.
	st := reps[0].f.cfg.Store
	st.Put(context.Background(), &store.Record{ID: "onb", Node: "b", Owner: "alice"})
	if resp := do(t, "GET", reps[0].srv.URL+"/v1/sandboxes/onb/files", ""); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("sandbox route to an unreachable replica: %d", resp.StatusCode)
	}
}

// Placement adds the creates it sent to a node since that node's last
// heartbeat to its load, and skips nodes that are full (NODE_MAX_SANDBOXES).
func TestPlaceCountsAndSkipsFull(t *testing.T) {
	var reps []*replica
	seen := time.Now()
	nodes := func(context.Context) ([]store.Node, error) {
		var out []store.Node
		for _, r := range reps {
			n := store.Node{ID: r.id, Address: r.srv.URL, SeenAt: seen}
			switch r.id {
			case "a":
				n.Sandboxes = 5
			case "b":
				n.Sandboxes = 1
			case "c":
				n.MaxSandboxes = 1
			}
			out = append(out, n)
		}
		return out, nil
	}
	for _, id := range []string{"a", "b", "c"} {
		r := &replica{id: id}
		r.f = NewForwarder(ForwardConfig{Self: id, Secret: []byte(testSecret), Store: store.NewMemory(), Nodes: nodes, Shared: true, Place: true})
		r.srv = httptest.NewServer(r.f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("X-Served-By", id)
		})))
		t.Cleanup(r.srv.Close)
		reps = append(reps, r)
	}
	var got []string
	for i := 0; i < 6; i++ {
		got = append(got, do(t, "POST", reps[0].srv.URL+"/v1/sandboxes", "{}").Header.Get("X-Served-By"))
	}
	// c (empty, room for one), then b until it has a's 5, then a (self) on ties.
	if want := "c b b b b a"; strings.Join(got, " ") != want {
		t.Fatalf("placed on %q, want %q", strings.Join(got, " "), want)
	}
	// A heartbeat that counts them replaces the creates sent before it.
	reps[0].f.mu.Lock()
	n := reps[0].f.placedSince("b", time.Now().Add(time.Second), time.Now())
	reps[0].f.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d placements kept after a later heartbeat", n)
	}
}

// A placed create that its replica refuses with 429, or with agentscope's
// null, is created by the replica that got it; an answer with a sandbox
// passes unchanged.
func TestPlaceFallsBackWhenRefused(t *testing.T) {
	var reps []*replica
	nodes := func(context.Context) ([]store.Node, error) {
		var out []store.Node
		for _, r := range reps {
			out = append(out, store.Node{ID: r.id, Address: r.srv.URL, Sandboxes: map[string]int{"a": 5}[r.id], SeenAt: time.Now()})
		}
		return out, nil
	}
	full := false
	for _, id := range []string{"a", "b"} {
		r := &replica{id: id}
		r.f = NewForwarder(ForwardConfig{Self: id, Secret: []byte(testSecret), Store: store.NewMemory(), Nodes: nodes, Shared: true, Place: true})
		r.srv = httptest.NewServer(r.f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			w.Header().Set("X-Served-By", id)
			switch {
			case id == "b" && full && req.URL.Path == "/v1/sandboxes":
				w.WriteHeader(http.StatusTooManyRequests)
			case id == "b" && full:
				w.Write([]byte(`{"data": null}`))
			case req.URL.Path == "/create":
				w.Write([]byte(`{"data": "box-` + id + `"}`))
			default:
				w.Write(body)
			}
		})))
		t.Cleanup(r.srv.Close)
		reps = append(reps, r)
	}
	check := func(path, body, by, want string) {
		t.Helper()
		resp := do(t, "POST", reps[0].srv.URL+path, body)
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Served-By") != by || string(got) != want {
			t.Fatalf("%s: %d by %q: %s", path, resp.StatusCode, resp.Header.Get("X-Served-By"), got)
		}
	}
	check("/create", `{"sandbox_type":"base"}`, "b", `{"data": "box-b"}`)
	full = true
	check("/v1/sandboxes", `{"template":"x"}`, "a", `{"template":"x"}`)
	check("/create", `{"sandbox_type":"base"}`, "a", `{"data": "box-a"}`)
	check("/create_from_pool_async", `{"sandbox_type":"base"}`, "a", `{"sandbox_type":"base"}`)
}
