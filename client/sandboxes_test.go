package client_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

func TestCreateGetDelete(t *testing.T) {
	_, c, ctx := setup(t)
	sb, err := c.Create(ctx, client.CreateRequest{
		Template:  "host",
		Timeout:   90 * time.Second,
		Env:       map[string]string{"A": "1"},
		Metadata:  map[string]string{"owner": "me"},
		Resources: &client.Resources{MemoryBytes: 512 << 20, CPUs: 0.5, PIDs: 64, DiskBytes: 1 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID == "" || sb.State != "running" || sb.Template != "host" || sb.AccessToken == "" {
		t.Errorf("sandbox = %+v", sb)
	}
	if life := sb.EndAt.Sub(sb.CreatedAt); life < 89*time.Second || life > 91*time.Second {
		t.Errorf("life = %s, want 90s (timeout sent in seconds)", life)
	}
	if sb.Resources.MemoryBytes != 512<<20 || sb.Resources.PIDs != 64 || sb.Resources.CPUs != 0.5 {
		t.Errorf("resources = %+v", sb.Resources)
	}
	if sb.Metadata["owner"] != "me" || sb.Env["A"] != "1" {
		t.Errorf("metadata/env = %v %v", sb.Metadata, sb.Env)
	}

	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.ID != sb.ID {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, sb.ID); !client.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := c.Delete(ctx, sb.ID); !client.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestCreateInvalidArgumentNamesField(t *testing.T) {
	_, c, ctx := setup(t)
	_, err := c.Create(ctx, client.CreateRequest{Template: "nope"})
	var e *client.Error
	if !client.IsInvalidArgument(err) || !errors.As(err, &e) || e.Field != "template" {
		t.Fatalf("got %v", err)
	}
}

func TestListAllFollowsPages(t *testing.T) {
	fs, c, ctx := setup(t)
	fs.PageSize = 2
	var want []string
	for i := range 5 {
		md := map[string]string{"n": string(rune('a' + i))}
		if i%2 == 0 {
			md["even"] = "yes"
		}
		want = append([]string{fs.AddSandbox("host", md, 0, time.Hour)}, want...) // newest first
	}
	page, err := c.List(ctx, client.ListOptions{})
	if err != nil || len(page.Sandboxes) != 2 || page.NextToken == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}

	var got []string
	for sb, err := range c.ListAll(ctx, client.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, sb.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("ListAll = %v, want %v", got, want)
	}

	got = nil
	for sb, err := range c.ListAll(ctx, client.ListOptions{Metadata: map[string]string{"even": "yes"}, Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, sb.ID)
	}
	if !slices.Equal(got, []string{want[0], want[2], want[4]}) {
		t.Errorf("filtered ListAll = %v", got)
	}

	fs.SetState(want[1], "stopped")
	page, err = c.List(ctx, client.ListOptions{States: []string{"stopped"}})
	if err != nil || len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != want[1] {
		t.Errorf("state filter: %+v, %v", page, err)
	}

	// Breaking out of the loop early stops fetching.
	n := len(fs.Headers())
	for range c.ListAll(ctx, client.ListOptions{}) {
		break
	}
	if extra := len(fs.Headers()) - n; extra != 1 {
		t.Errorf("early break made %d requests, want 1", extra)
	}
}

func TestListSendsMetadataEncodedOnce(t *testing.T) {
	var raw string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw = r.URL.Query().Get("metadata")
		_ = json.NewEncoder(w).Encode(map[string]any{"sandboxes": []any{}})
	}))
	defer ts.Close()
	c, _ := client.New(ts.URL)
	if _, err := c.List(t.Context(), client.ListOptions{Metadata: map[string]string{"a": "1&2", "b": "x y"}}); err != nil {
		t.Fatal(err)
	}
	if raw != "a=1%262&b=x+y" {
		t.Errorf("metadata parameter = %q", raw)
	}
}

func TestListAllStopsOnRepeatedToken(t *testing.T) {
	calls := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		_ = json.NewEncoder(w).Encode(map[string]any{
			"sandboxes":  []any{map[string]any{"id": "x", "template": "host", "state": "running"}},
			"next_token": "same",
		})
	}))
	defer ts.Close()
	c, _ := client.New(ts.URL)
	var err error
	n := 0
	for _, e := range c.ListAll(t.Context(), client.ListOptions{}) {
		if n++; n > 10 {
			t.Fatal("iteration does not stop")
		}
		err = e
	}
	if err == nil || !strings.Contains(err.Error(), "repeated") || calls != 2 {
		t.Errorf("err = %v after %d calls", err, calls)
	}
}

func TestTimeoutAndRefresh(t *testing.T) {
	_, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	sb, err := c.SetTimeout(ctx, sb.ID, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(sb.EndAt); left < 9*time.Minute || left > 11*time.Minute {
		t.Errorf("after SetTimeout(10m) %s left", left)
	}
	sb, err = c.Refresh(ctx, sb.ID, time.Minute)
	if err != nil || time.Until(sb.EndAt) < 9*time.Minute {
		t.Errorf("Refresh(1m) shortened life: %v, %v", sb.EndAt, err)
	}
	if _, err := c.SetTimeout(ctx, sb.ID, 0); !client.IsInvalidArgument(err) {
		t.Errorf("SetTimeout(0): %v", err)
	}
	if _, err := c.Refresh(ctx, "missing", 0); !client.IsNotFound(err) {
		t.Errorf("Refresh(missing): %v", err)
	}
}

func TestStatsLogsInfo(t *testing.T) {
	_, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	st, err := c.Stats(ctx, sb.ID)
	if err != nil || st.PIDsLimit != 256 || st.MemoryLimit != 512<<20 || st.CPUSeconds != 1.5 {
		t.Errorf("stats = %+v, %v", st, err)
	}
	logs, err := c.Logs(ctx, sb.ID, 2)
	if err != nil || len(logs) != 2 || logs[1].Level != "warn" || logs[0].Timestamp.IsZero() {
		t.Errorf("logs = %+v, %v", logs, err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.Version != "fake" || info.User != "tester" || info.Capabilities["pty"] != true {
		t.Errorf("info = %+v, %v", info, err)
	}
}

func TestSessions(t *testing.T) {
	_, c, ctx := setup(t)
	s, err := c.ConnectSession(ctx, "chat 1", client.ConnectSessionRequest{UserID: "u1", Types: []string{"base", "browser"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s.SessionKey != "chat 1_u1" || len(s.Sandboxes) != 2 || s.Sandboxes[1].Type != "browser" {
		t.Fatalf("session = %+v", s)
	}
	again, err := c.ConnectSession(ctx, "chat 1", client.ConnectSessionRequest{UserID: "u1", Types: []string{"browser"}})
	if err != nil || again.Sandboxes[0].ID != s.Sandboxes[1].ID {
		t.Fatalf("reconnect = %+v, %v", again, err)
	}
	released, err := c.ReleaseSession(ctx, "chat 1", "u1")
	if err != nil || len(released) != 2 {
		t.Fatalf("released = %v, %v", released, err)
	}
	if _, err := c.Get(ctx, released[0]); !client.IsNotFound(err) {
		t.Errorf("sandbox survived release: %v", err)
	}
}

// TestCreateNoService: NoService sends "service": false; by default the
// field is left out (the template's service runs).
func TestCreateNoService(t *testing.T) {
	var bodies []map[string]any
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("body: %v", err)
		}
		bodies = append(bodies, b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"sb1","template":"web","state":"running"}`))
	}))
	defer ts.Close()
	c, _ := client.New(ts.URL)
	for _, req := range []client.CreateRequest{{Template: "web", NoService: true}, {Template: "web"}} {
		if _, err := c.Create(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := bodies[0]["service"]; !ok || v != false {
		t.Errorf("NoService body = %v, want service false", bodies[0])
	}
	if _, ok := bodies[1]["service"]; ok {
		t.Errorf("default body = %v, want no service field", bodies[1])
	}
}
