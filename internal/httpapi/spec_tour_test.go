package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSpecTour walks the native API over the fake backend (a real agent
// per sandbox, on the host, no isolation) with every exchange checked
// against api/openapi.yaml (api/spectest): the routes the e2e suite takes
// on real sandboxes, in seconds and without root, so a drift between the
// handlers and the document fails here first.
func TestSpecTour(t *testing.T) {
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	m := manager.New(manager.Config{}, b, store.NewMemory())
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	s := New(Config{APIKeys: map[string]string{"op": "ops", "k": "alice"}, TemplateAdmins: []string{"ops"}}, m)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	hc := specClient(t, nil)

	// do sends one request (a JSON body unless body is a []byte) and
	// fails the test unless the status is want; it returns the body.
	do := func(method, path, key string, body any, want int, hdr ...string) []byte {
		t.Helper()
		var rd io.Reader
		ctype := "application/json"
		switch b := body.(type) {
		case nil:
		case []byte:
			rd, ctype = bytes.NewReader(b), "application/octet-stream"
		default:
			data, _ := json.Marshal(b)
			rd = bytes.NewReader(data)
		}
		req, _ := http.NewRequest(method, hs.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		if rd != nil || method == "POST" {
			req.Header.Set("Content-Type", ctype)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Errorf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
		}
		return data
	}

	var sb struct{ ID string }
	if err := json.Unmarshal(do("POST", "/v1/sandboxes", "k", map[string]any{"timeout": 300, "metadata": map[string]string{"tour": "yes"}}, 201), &sb); err != nil || sb.ID == "" {
		t.Fatalf("create: %v", err)
	}
	sbp := "/v1/sandboxes/" + sb.ID
	do("GET", sbp, "k", nil, 200)
	do("GET", "/v1/sandboxes?metadata="+url.QueryEscape("tour=yes")+"&state=running&limit=10", "k", nil, 200)
	do("GET", "/v1/sandboxes/nope", "k", nil, 404)
	do("GET", "/v1/info", "k", nil, 200)
	do("GET", "/v1/openapi.yaml", "k", nil, 200)
	do("GET", "/v1/pools", "op", nil, 200)
	do("GET", "/v1/pools", "k", nil, 403)
	do("GET", "/v1/admin/overview", "op", nil, 200)
	do("GET", "/v1/templates", "k", nil, 503)
	do("GET", "/v1/nodes", "op", nil, 503)

	// Exec: buffered, streamed, refused.
	do("POST", sbp+"/exec", "k", map[string]any{"cmd": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, "timeout": 30}, 200)
	do("POST", sbp+"/exec", "k", map[string]any{"cmd": []string{"echo", "hi"}}, 200, "Accept", "application/x-ndjson")
	do("POST", sbp+"/exec", "k", map[string]any{"cwd": "/"}, 400)

	// Code: a bash context, a run, the contexts routes.
	var cc struct{ ID string }
	if err := json.Unmarshal(do("POST", sbp+"/code/contexts", "k", map[string]any{"language": "bash"}, 201), &cc); err != nil || cc.ID == "" {
		t.Fatalf("code context: %v", err)
	}
	do("POST", sbp+"/code", "k", map[string]any{"context_id": cc.ID, "code": "echo $((6*7))"}, 200)
	do("GET", sbp+"/code/contexts", "k", nil, 200)
	do("POST", sbp+"/code/contexts/"+cc.ID+"/restart", "k", nil, 204)
	do("DELETE", sbp+"/code/contexts/"+cc.ID, "k", nil, 204)
	do("DELETE", sbp+"/code/contexts/"+cc.ID, "k", nil, 404)

	// Files, in a directory of the host (the fake backend has no other).
	dir := t.TempDir()
	q := func(p string) string { return "?path=" + url.QueryEscape(p) }
	do("PUT", sbp+"/files"+q(dir+"/a/b.txt"), "k", []byte("hello"), 201)
	if got := do("GET", sbp+"/files"+q(dir+"/a/b.txt"), "k", nil, 200); string(got) != "hello" {
		t.Errorf("download: %q", got)
	}
	do("GET", sbp+"/files/stat"+q(dir+"/a/b.txt"), "k", nil, 200)
	do("GET", sbp+"/files/list"+q(dir)+"&depth=2", "k", nil, 200)
	do("POST", sbp+"/files/mkdir", "k", map[string]any{"path": dir + "/c"}, 201)
	do("POST", sbp+"/files/mkdir", "k", map[string]any{"path": dir + "/c"}, 409)
	do("POST", sbp+"/files/move", "k", map[string]any{"source": dir + "/a/b.txt", "destination": dir + "/c/b.txt"}, 200)
	do("GET", sbp+"/files/stat"+q(dir+"/a/b.txt"), "k", nil, 404)
	do("DELETE", sbp+"/files"+q(dir+"/c"), "k", nil, 204)
	watchOnce(t, hc, hs.URL+sbp+"/files/watch"+q(dir)+"&recursive=true", "k")

	// The sandbox's own state.
	do("GET", sbp+"/stats", "k", nil, 503) // the fake backend reports none
	do("GET", sbp+"/logs?limit=50", "k", nil, 200)
	do("POST", sbp+"/timeout", "k", map[string]any{"timeout": 120}, 200)
	do("POST", sbp+"/refresh", "k", map[string]any{"duration": 60}, 200)
	do("GET", sbp+"/logs?limit=0", "k", nil, 400)
	do("POST", sbp+"/preview-tokens", "k", map[string]any{"port": 8080, "ttl": 60}, 201)
	do("POST", sbp+"/preview-tokens", "k", map[string]any{"port": 0}, 400)
	do("POST", sbp+"/refresh", "k", map[string]any{"duration": -1}, 400)
	do("POST", sbp+"/stop", "k", nil, 400, "Content-Type", "text/plain") // every POST is JSON
	do("POST", sbp+"/pty-tickets", "k", nil, 201)
	do("PUT", sbp+"/network", "k", map[string]any{"mode": "egress", "allow_out": []string{"10.0.0.0/8"}}, 400) // no networking here
	do("POST", sbp+"/snapshot", "k", map[string]any{"name": "tour:1"}, 503)
	do("POST", sbp+"/pause", "k", nil, 200)
	do("POST", sbp+"/exec", "k", map[string]any{"cmd": []string{"true"}}, 409)
	do("GET", sbp+"/files/stat"+q(dir), "k", nil, 409)
	do("POST", sbp+"/resume", "k", map[string]any{"timeout": 120}, 200)
	do("POST", sbp+"/stop", "k", nil, 200)
	do("POST", sbp+"/start", "k", nil, 200)

	// Sessions.
	do("POST", "/v1/sessions/tour/connect", "k", map[string]any{"user_id": "u1", "types": []string{"base"}, "timeout": 60}, 200)
	do("POST", "/v1/sessions/tour/release", "k", map[string]any{"user_id": "u1"}, 200)

	do("DELETE", sbp, "k", nil, 204)
	do("GET", sbp, "k", nil, 404)
}

// watchOnce opens a watch, reads its start event and one change (made by
// the test through the host), and goes away.
func watchOnce(t *testing.T, hc *http.Client, url, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch: %d %s", resp.StatusCode, data)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"start"`) {
		t.Fatalf("watch: first event %q", sc.Text())
	}
}
