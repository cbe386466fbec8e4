package cluster

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// result is how one request through the forwarder ended.
type result struct {
	status     int
	retryAfter string
	body       string
	err        error
}

func get(ctx context.Context, url string, limit time.Duration, hdr ...string) result {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return result{err: err}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(body), err: err}
}

func post(ctx context.Context, url, key string) result {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("{}"))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Authorization", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, body: string(body), err: err}
}

// A forwarder holds at most MaxPerUser requests of one user and MaxConns
// in all in flight to another replica, and opens no more connections than
// MaxConns to it: one user's requests that wait there (previews of a port
// that never answers) are refused at once beyond the user's share, with
// 429 and Retry-After (whichever credential they carry: a token counts as
// its sandbox's owner), while another user's requests are served; beyond
// MaxConns everyone gets 503 with Retry-After until requests end (and a
// create placed there is made here instead).
func TestForwardFairness(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	for id, owner := range map[string]string{"sa": "alice", "sb": "bob", "sc": "carol"} {
		st.Put(ctx, &store.Record{ID: sandbox.ID("onb" + id), Node: "b", Owner: owner})
	}
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	var fa, fb *Forwarder
	var aURL, bURL string
	nodes := func(context.Context) ([]store.Node, error) {
		// b is the less loaded: creates are placed there.
		return []store.Node{{ID: "a", Address: aURL, Sandboxes: 5}, {ID: "b", Address: bURL}}, nil
	}
	fb = NewForwarder(ForwardConfig{Self: "b", Secret: []byte(testSecret), Store: st, Nodes: nodes, Shared: true})
	b := httptest.NewUnstartedServer(fb.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/hang") {
			entered <- struct{}{}
			select {
			case <-release:
				io.WriteString(w, "released")
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok")
	})))
	accepted := &countingListener{Listener: b.Listener}
	b.Listener = accepted
	b.Start()
	t.Cleanup(b.Close)
	users := map[string]string{"Bearer ka": "alice", "Bearer kb": "bob", "Bearer kc": "carol"}
	fa = NewForwarder(ForwardConfig{Self: "a", Secret: []byte(testSecret), Store: st, Nodes: nodes, Shared: true, Place: true,
		MaxConns: 4, MaxPerUser: 2, User: func(r *http.Request) string { return users[r.Header.Get("Authorization")] }})
	a := httptest.NewServer(fa.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "created on a")
	})))
	t.Cleanup(a.Close)
	aURL, bURL = a.URL, b.URL
	defer close(release) // nothing stays waiting on a failure

	// hang sends n waiting requests of key to sandbox id through a.
	hang := func(id, key string, n int) chan result {
		out := make(chan result, n)
		for range n {
			go func() {
				out <- get(ctx, a.URL+"/v1/sandboxes/onb"+id+"/ports/8000/hang", time.Minute, "Authorization", key)
			}()
		}
		return out
	}
	// settled waits until a holds n requests in flight to b: a request's
	// slot is given back just after its answer went out.
	settled := func(n int) {
		t.Helper()
		for i := 0; ; i++ {
			got := fa.slots.inFlight("b")
			if got == n {
				return
			}
			if i == 500 {
				t.Fatalf("a holds %d requests in flight to b, want %d", got, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitEntered := func(n int, what string) {
		t.Helper()
		for i := range n {
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: %d of %d requests reached b", what, i, n)
			}
		}
	}

	alice := hang("sa", "Bearer ka", 3)
	waitEntered(2, "alice's 3 requests")
	select {
	case r := <-alice:
		if r.err != nil || r.status != http.StatusTooManyRequests || r.retryAfter == "" || !strings.Contains(r.body, "CLUSTER_MAX_PER_USER") {
			t.Fatalf("alice's third request while two wait: %+v; want 429 with Retry-After", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice's third request was not refused at once; her share is 2")
	}
	if r := get(ctx, a.URL+"/v1/sandboxes/onbsa/files", 10*time.Second, "X-Access-Token", "t"); r.status != http.StatusTooManyRequests {
		t.Fatalf("a token request for alice's sandbox while she has two waiting: %+v; want 429 (it counts as hers)", r)
	}
	if r := get(ctx, a.URL+"/v1/sandboxes/onbsb/logs", 10*time.Second, "Authorization", "Bearer kb"); r.err != nil || r.status != http.StatusOK || r.body != "ok" {
		t.Fatalf("bob's request while alice has her share waiting: %+v", r)
	}
	settled(2)
	bob := hang("sb", "Bearer kb", 2)
	waitEntered(2, "bob's 2 requests")
	if r := get(ctx, a.URL+"/v1/sandboxes/onbsc/logs", 10*time.Second, "Authorization", "Bearer kc"); r.status != http.StatusServiceUnavailable ||
		r.retryAfter == "" || !strings.Contains(r.body, "CLUSTER_MAX_CONNS") {
		t.Fatalf("carol's request with 4 (MaxConns) in flight to b: %+v; want 503 with Retry-After", r)
	}
	// A create placed on b while there is no room to send it: a creates it.
	if r := post(ctx, a.URL+"/v1/sandboxes", "Bearer kc"); r.status != http.StatusOK || r.body != "created on a" {
		t.Fatalf("a create placed on b with 4 (MaxConns) in flight to b: %+v; want it created on a", r)
	}
	if n := accepted.n.Load(); n > 4 {
		t.Fatalf("b accepted %d connections from a; MaxConns is 4", n)
	}

	release <- struct{}{} // one of the four ends
	var ended result
	select {
	case ended = <-alice:
	case ended = <-bob:
	case <-time.After(30 * time.Second):
		t.Fatal("a released request did not end")
	}
	if ended.status != http.StatusOK || ended.body != "released" {
		t.Fatalf("a released request: %+v", ended)
	}
	settled(3)
	if r := get(ctx, a.URL+"/v1/sandboxes/onbsc/logs", 10*time.Second, "Authorization", "Bearer kc"); r.status != http.StatusOK || r.body != "ok" {
		t.Fatalf("carol's request once a slot is free: %+v", r)
	}
}
