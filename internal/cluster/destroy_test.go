package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// A session route on replica a deletes b's sandboxes through b, as the
// caller (its API key, not a's), with a signed hop b verifies; a sandbox b
// no longer has is not found; a route that is not a session's, or a
// request b forwarded, cannot reach other replicas this way.
func TestDestroyBy(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	for _, id := range []sandbox.ID{"onb", "goneonb"} {
		st.Put(ctx, &store.Record{ID: id, Node: "b", Owner: "alice"})
	}
	st.Put(ctx, &store.Record{ID: "ona", Node: "a", Owner: "alice"})

	var mu sync.Mutex
	var seen []string // what b's handler got
	urls := map[string]string{}
	nodes := func(context.Context) ([]store.Node, error) {
		return []store.Node{{ID: "a", Address: urls["a"]}, {ID: "b", Address: urls["b"]}}, nil
	}
	fb := NewForwarder(ForwardConfig{Self: "b", Secret: []byte(testSecret), Store: st, Nodes: nodes, Shared: true})
	b := httptest.NewServer(fb.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" key="+r.Header.Get("X-API-Key")+" forwarded="+boolStr(Forwarded(r)))
		mu.Unlock()
		if r.URL.Path == "/v1/sandboxes/goneonb" {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		if r.URL.Path == "/v1/sessions/s/release" {
			// Forwarded here, it must not go on.
			if err := fb.DestroyBy(r.Context(), "ona"); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
				t.Errorf("DestroyBy from a forwarded request: %v", err)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	defer b.Close()
	fa := NewForwarder(ForwardConfig{Self: "a", Secret: []byte(testSecret), Store: st, Nodes: nodes, Shared: true})
	results := map[string]error{}
	a := httptest.NewServer(fa.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, id := range strings.Split(r.URL.Query().Get("ids"), ",") {
			results[r.URL.Path+" "+id] = fa.DestroyBy(r.Context(), sandbox.ID(id))
		}
		w.WriteHeader(http.StatusOK)
	})))
	defer a.Close()
	urls["a"], urls["b"] = a.URL, b.URL

	resp := do(t, http.MethodPost, a.URL+"/v1/sessions/s/release?ids=onb,goneonb,ona", `{"user_id":"u"}`,
		"X-API-Key", "k1", "Content-Type", "application/json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := results["/v1/sessions/s/release onb"]; err != nil {
		t.Errorf("destroy onb: %v", err)
	}
	if err := results["/v1/sessions/s/release goneonb"]; sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("destroy of a sandbox b no longer has: %v, want not found", err)
	}
	if err := results["/v1/sessions/s/release ona"]; sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("destroy of a's own sandbox through a peer: %v, want unavailable", err)
	}
	mu.Lock()
	want := []string{
		"DELETE /v1/sandboxes/onb key=k1 forwarded=true",
		"DELETE /v1/sandboxes/goneonb key=k1 forwarded=true",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("b got:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	seen = nil
	mu.Unlock()

	// Any other route: no caller to act for.
	do(t, http.MethodPost, a.URL+"/v1/other?ids=onb", "", "X-API-Key", "k1")
	if err := results["/v1/other onb"]; sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("destroy from a route that is not a session's: %v, want unavailable", err)
	}
	// A session request b got forwarded from a (signed by a) is served by
	// b and cannot hop on.
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/sessions/s/release", nil)
	req.Header.Set(HeaderForwarded, fa.sign(http.MethodPost, "/v1/sessions/s/release", time.Now()))
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || !strings.HasSuffix(seen[0], "forwarded=true") {
		t.Errorf("b got %v", seen)
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
