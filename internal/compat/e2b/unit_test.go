package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// hostOnly resolves base and code-interpreter to the host template.
type hostOnly struct{}

func (hostOnly) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	switch ref {
	case "base", "code-interpreter", "host":
		t := sandbox.HostTemplate()
		t.Ref = ref
		return t, nil
	}
	return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "unknown template %q", ref)
}

const keyAlice, keyBob = "e2b_aaaa", "e2b_bbbb"

// newTestServer serves the E2B routes and data plane over a manager of
// fake sandboxes (real agents as host processes), with two tenants.
func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	return newTestServerWith(t, Config{})
}

func newTestServerWith(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	m := manager.New(manager.Config{Resolver: hostOnly{}}, b, store.NewMemory())
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	keys := map[string]string{keyAlice: "alice", keyBob: "bob"}
	cfg.APIKeys = keys
	api := httpapi.New(httpapi.Config{APIKeys: keys, PreviewDomain: "localhost", Doors: []httpapi.Door{New(cfg, m)}}, m)
	hs := httptest.NewServer(api.Handler())
	t.Cleanup(hs.Close)
	return hs
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// call sends a request; hdr are name, value pairs.
func call(t *testing.T, hs *httptest.Server, method, path, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, data}
}

// wantError checks an E2B error reply: the status, and the same code in
// the body with a message.
func wantError(t *testing.T, what string, r reply, status int) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r.status != status || json.Unmarshal(r.body, &e) != nil || e.Code != status || e.Message == "" {
		t.Errorf("%s: %d %s, want %d with {code: %d, message}", what, r.status, r.body, status, status)
	}
}

func create(t *testing.T, hs *httptest.Server, key, body string) sandboxOut {
	t.Helper()
	r := call(t, hs, "POST", "/sandboxes", body, "X-API-Key", key)
	if r.status != http.StatusCreated {
		t.Fatalf("create %s: %d %s", body, r.status, r.body)
	}
	var out sandboxOut
	r.json(t, &out)
	return out
}

// TestAuthErrorsAndTenancy: keys map onto tenants, another tenant's
// sandbox is 404 on every route (control and data plane), and errors have
// E2B's {code, message} shape with the right status.
func TestAuthErrorsAndTenancy(t *testing.T) {
	hs := newTestServer(t)
	wantError(t, "no key", call(t, hs, "GET", "/v2/sandboxes", ""), 401)
	wantError(t, "wrong key", call(t, hs, "GET", "/v2/sandboxes", "", "X-API-Key", "e2b_nope"), 401)
	wantError(t, "unknown template", call(t, hs, "POST", "/sandboxes", `{"templateID":"nope"}`, "X-API-Key", keyAlice), 400)
	wantError(t, "bad timeout", call(t, hs, "POST", "/sandboxes", `{"timeout":-1}`, "X-API-Key", keyAlice), 400)
	wantError(t, "malformed body", call(t, hs, "POST", "/sandboxes", `{"templateID":`, "X-API-Key", keyAlice), 400)

	sb := create(t, hs, keyAlice, `{"templateID":"code-interpreter-v1","metadata":{"k":"v"},"envVars":{"A":"1"}}`)
	if sb.SandboxID == "" || sb.EnvdAccessToken == "" || sb.EnvdVersion != EnvdVersion || sb.TemplateID != "code-interpreter-v1" ||
		sb.TrafficAccessToken == nil || *sb.TrafficAccessToken == sb.EnvdAccessToken {
		t.Fatalf("create answer: %+v", sb)
	}
	id := sb.SandboxID
	var got sandboxOut
	r := call(t, hs, "GET", "/sandboxes/"+id, "", "X-API-Key", keyAlice)
	r.json(t, &got)
	if r.status != 200 || got.State != "running" || got.Metadata["k"] != "v" || got.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/" + id, ""},
		{"DELETE", "/sandboxes/" + id, ""},
		{"POST", "/sandboxes/" + id + "/timeout", `{"timeout":60}`},
		{"POST", "/sandboxes/" + id + "/refreshes", `{"duration":60}`},
		{"POST", "/sandboxes/" + id + "/connect", `{"timeout":60}`},
		{"POST", "/v2/sandboxes/" + id + "/connect", `{}`},
		{"POST", "/sandboxes/" + id + "/pause", `{}`},
		{"POST", "/sandboxes/" + id + "/resume", `{}`},
		{"GET", "/sandboxes/" + id + "/metrics", ""},
		{"GET", "/v2/sandboxes/" + id + "/logs", ""},
	} {
		wantError(t, "bob: "+c.method+" "+c.path, call(t, hs, c.method, c.path, c.body, "X-API-Key", keyBob), 404)
	}
	// The data plane: the access token or the owner's key, nothing else.
	dp := []string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "49983"}
	wantError(t, "data plane without a token", call(t, hs, "GET", "/health", "", dp...), 401)
	wantError(t, "data plane with bob's key", call(t, hs, "GET", "/health", "", append(dp, "X-API-Key", keyBob)...), 401)
	wantError(t, "data plane with the traffic token on envd", call(t, hs, "GET", "/health", "", append(dp, "E2b-Traffic-Access-Token", *sb.TrafficAccessToken)...), 401)
	if r := call(t, hs, "GET", "/health", "", append(dp, "X-Access-Token", sb.EnvdAccessToken)...); r.status != 204 {
		t.Errorf("data plane with the token: %d %s", r.status, r.body)
	}
	if r := call(t, hs, "GET", "/health", "", append(dp, "X-API-Key", keyAlice)...); r.status != 204 {
		t.Errorf("data plane with the owner's key: %d %s", r.status, r.body)
	}
	ci := []string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "49999", "E2b-Traffic-Access-Token", *sb.TrafficAccessToken}
	if r := call(t, hs, "GET", "/contexts", "", ci...); r.status != 200 {
		t.Errorf("code contexts with the traffic token: %d %s", r.status, r.body)
	}
	wantError(t, "an agent route that is not E2B's", call(t, hs, "POST", "/init", `{}`, append(dp, "X-Access-Token", sb.EnvdAccessToken)...), 404)
	// A sandbox that is not there is E2B's proxy's 502 (the SDKs: "not
	// running"), not a 404 the SDKs would read as a missing file.
	wantError(t, "unknown sandbox on the data plane", call(t, hs, "GET", "/health", "", "E2b-Sandbox-Id", "nosuchsandbox0000000", "X-Access-Token", "x"), 502)

	// The owner's lifecycle calls.
	if r := call(t, hs, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":30}`, "X-API-Key", keyAlice); r.status != 204 {
		t.Errorf("timeout: %d %s", r.status, r.body)
	}
	var before, after sandboxOut
	call(t, hs, "GET", "/sandboxes/"+id, "", "X-API-Key", keyAlice).json(t, &before)
	if r := call(t, hs, "POST", "/sandboxes/"+id+"/refreshes", `{"duration":600}`, "X-API-Key", keyAlice); r.status != 204 {
		t.Errorf("refreshes: %d %s", r.status, r.body)
	}
	call(t, hs, "GET", "/sandboxes/"+id, "", "X-API-Key", keyAlice).json(t, &after)
	if !after.EndAt.After(before.EndAt.Add(500 * time.Second)) {
		t.Errorf("refreshes: endAt %v -> %v", before.EndAt, after.EndAt)
	}
	wantError(t, "refresh over an hour", call(t, hs, "POST", "/sandboxes/"+id+"/refreshes", `{"duration":3601}`, "X-API-Key", keyAlice), 400)
	wantError(t, "timeout missing", call(t, hs, "POST", "/sandboxes/"+id+"/timeout", `{}`, "X-API-Key", keyAlice), 400)
	r = call(t, hs, "POST", "/sandboxes/"+id+"/connect", `{"timeout":60}`, "X-API-Key", keyAlice)
	var conn sandboxOut
	r.json(t, &conn)
	if r.status != 200 || conn.EnvdAccessToken != sb.EnvdAccessToken {
		t.Errorf("connect to a running sandbox: %d %s", r.status, r.body)
	}
	wantError(t, "resume of a running sandbox", call(t, hs, "POST", "/sandboxes/"+id+"/resume", `{}`, "X-API-Key", keyAlice), 409)
	var logs struct {
		Logs []logOut `json:"logs"`
	}
	r = call(t, hs, "GET", "/v2/sandboxes/"+id+"/logs?limit=50", "", "X-API-Key", keyAlice)
	r.json(t, &logs)
	if r.status != 200 || len(logs.Logs) == 0 {
		t.Errorf("logs: %d %s", r.status, r.body)
	}
	// v1 logs: each line a JSON object with level and message (E2B's CLI
	// parses it); start is the v1 name of the cursor.
	var v1 struct {
		Logs []struct {
			Line string `json:"line"`
		} `json:"logs"`
	}
	r = call(t, hs, "GET", "/sandboxes/"+id+"/logs?start=0", "", "X-API-Key", keyAlice)
	r.json(t, &v1)
	for _, l := range v1.Logs {
		var obj map[string]any
		if json.Unmarshal([]byte(l.Line), &obj) != nil || obj["level"] == nil || obj["message"] == nil {
			t.Errorf("v1 log line %q is not a JSON object with level and message", l.Line)
		}
	}
	if r.status != 200 || len(v1.Logs) == 0 {
		t.Errorf("v1 logs: %d %s", r.status, r.body)
	}
	// Metrics: a range without now is empty, start after end is refused.
	// (The fake backend has no stats: a range holding now is the SDK
	// suite's, test/compat/e2b/controlplane.test.cjs.)
	now := time.Now().Unix()
	pts := []metricOut{{}}
	call(t, hs, "GET", fmt.Sprintf("/sandboxes/%s/metrics?start=%d&end=%d", id, now-7200, now-3600), "", "X-API-Key", keyAlice).json(t, &pts)
	if len(pts) != 0 {
		t.Errorf("metrics an hour ago: %v", pts)
	}
	wantError(t, "metrics start after end", call(t, hs, "GET", fmt.Sprintf("/sandboxes/%s/metrics?start=%d&end=%d", id, now, now-10), "", "X-API-Key", keyAlice), 400)
	wantError(t, "logs with a bad direction", call(t, hs, "GET", "/v2/sandboxes/"+id+"/logs?direction=up", "", "X-API-Key", keyAlice), 400)

	if r := call(t, hs, "DELETE", "/sandboxes/"+id, "", "X-API-Key", keyAlice); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantError(t, "get after delete", call(t, hs, "GET", "/sandboxes/"+id, "", "X-API-Key", keyAlice), 404)
	wantError(t, "data plane after delete", call(t, hs, "GET", "/health", "", append(dp, "X-Access-Token", sb.EnvdAccessToken)...), 502)
}

// TestListFiltersAndPages: metadata (double-encoded, as the SDKs send it)
// and state filters, pages with X-Next-Token, and refusals of bad values.
func TestListFiltersAndPages(t *testing.T) {
	hs := newTestServer(t)
	for _, md := range []string{`{"team":"a b","n":"1"}`, `{"team":"a b","n":"2"}`, `{"team":"c","n":"3"}`} {
		create(t, hs, keyAlice, `{"metadata":`+md+`}`)
	}
	create(t, hs, keyBob, `{"metadata":{"team":"a b"}}`)
	list := func(query string) ([]sandboxOut, reply) {
		r := call(t, hs, "GET", "/v2/sandboxes?"+query, "", "X-API-Key", keyAlice)
		var out []sandboxOut
		if r.status == 200 {
			r.json(t, &out)
		}
		return out, r
	}
	// The SDK: encodeURIComponent each key and value, URLSearchParams the
	// pairs, then the query string encodes the whole again.
	inner := url.Values{url.QueryEscape("team"): {url.QueryEscape("a b")}}.Encode()
	got, r := list("metadata=" + url.QueryEscape(inner))
	if r.status != 200 || len(got) != 2 {
		t.Fatalf("metadata filter: %d %s", r.status, r.body)
	}
	for _, s := range got {
		if s.Metadata["team"] != "a b" {
			t.Errorf("filtered list has %+v", s)
		}
	}
	if got, r := list("state=paused"); r.status != 200 || len(got) != 0 {
		t.Errorf("state=paused: %d %s", r.status, r.body)
	}
	if got, r := list("state=running,paused"); r.status != 200 || len(got) != 3 {
		t.Errorf("state=running,paused: %d %s (bob's must not show)", r.status, r.body)
	}
	page1, r := list("limit=2")
	next := r.header.Get("X-Next-Token")
	if len(page1) != 2 || next == "" {
		t.Fatalf("first page: %d items, next %q", len(page1), next)
	}
	page2, r := list("limit=2&nextToken=" + url.QueryEscape(next))
	if len(page2) != 1 || r.header.Get("X-Next-Token") != "" || page2[0].SandboxID == page1[0].SandboxID || page2[0].SandboxID == page1[1].SandboxID {
		t.Fatalf("second page: %s, next %q", r.body, r.header.Get("X-Next-Token"))
	}
	// Oldest first, across pages: the reverse of the default order.
	newest, _ := list("")
	asc1, r := list("order=asc&limit=2")
	asc2, _ := list("order=asc&limit=2&nextToken=" + url.QueryEscape(r.header.Get("X-Next-Token")))
	if asc := append(asc1, asc2...); len(newest) != 3 || len(asc) != 3 || asc[0].SandboxID != newest[2].SandboxID || asc[2].SandboxID != newest[0].SandboxID {
		t.Errorf("order=asc pages %v, newest first %v", asc, newest)
	}
	if got, _ := list("startedAfter=" + url.QueryEscape(newest[0].StartedAt.Format(time.RFC3339Nano))); len(got) != 1 || got[0].SandboxID != newest[0].SandboxID {
		t.Errorf("startedAfter the newest: %v", got)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "state=gone", "nextToken=%25%25", "metadata=%25zz", "order=up", "startedAfter=yesterday"} {
		_, r := list(q)
		wantError(t, q, r, 400)
	}
	var v1 []sandboxOut
	r = call(t, hs, "GET", "/sandboxes", "", "X-API-Key", keyBob)
	r.json(t, &v1)
	if len(v1) != 1 {
		t.Errorf("v1 list of bob: %s", r.body)
	}
}

// TestDataPlaneGuard: a request naming a sandbox by header skips only the
// guard's Content-Type rule (it cannot come from a page without a
// preflight); the Origin rule still applies, and without the header the
// Content-Type rule does.
func TestDataPlaneGuard(t *testing.T) {
	hs := newTestServer(t)
	sb := create(t, hs, keyAlice, `{}`)
	h := []string{"E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken, "Content-Type", "application/connect+json"}
	r := call(t, hs, "POST", "/filesystem.Filesystem/Stat", "", h...)
	if r.status == http.StatusBadRequest && strings.Contains(string(r.body), "Content-Type") {
		t.Errorf("Connect content type refused by the guard: %s", r.body)
	}
	r = call(t, hs, "POST", "/filesystem.Filesystem/Stat", "", append(h, "Origin", "http://8000-"+sb.SandboxID+".localhost")...)
	if r.status != http.StatusForbidden {
		t.Errorf("data plane request from a preview origin: %d %s, want 403", r.status, r.body)
	}
	wantPlain := call(t, hs, "POST", "/sandboxes", "", "X-API-Key", keyAlice, "Content-Type", "text/plain")
	wantError(t, "text/plain create without the data plane header (the guard)", wantPlain, http.StatusBadRequest)
}

func TestAllowedRoutes(t *testing.T) {
	for _, c := range []struct {
		port         int
		method, path string
		ok           bool
	}{
		{EnvdPort, "POST", "/process.Process/Start", true},
		{EnvdPort, "GET", "/process.Process/Start", false},
		{EnvdPort, "POST", "/filesystem.Filesystem/Stat", true},
		{EnvdPort, "GET", "/files", true},
		{EnvdPort, "POST", "/files", true},
		{EnvdPort, "DELETE", "/files", false},
		{EnvdPort, "POST", "/init", false},
		{EnvdPort, "GET", "/service", false},
		{EnvdPort, "POST", "/execute", false},
		{JupyterPort, "POST", "/execute", true},
		{JupyterPort, "GET", "/contexts", true},
		{JupyterPort, "POST", "/contexts/abc/restart", true},
		{JupyterPort, "DELETE", "/contexts/abc", true},
		{JupyterPort, "POST", "/process.Process/Start", false},
		{JupyterPort, "GET", "/files", false},
	} {
		if got := allowedRoute(c.port, c.method, c.path); got != c.ok {
			t.Errorf("port %d %s %s: %v, want %v", c.port, c.method, c.path, got, c.ok)
		}
	}
}

func TestMapTemplate(t *testing.T) {
	for in, want := range map[string]string{"": "base", "base": "base", "code-interpreter-v1": "code-interpreter", "mine:2": "mine:2"} {
		if got := mapTemplate(in); got != want {
			t.Errorf("mapTemplate(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDockerfile: the Template SDK's steps as a Dockerfile; what cannot be
// expressed safely is refused, naming the step.
func TestDockerfile(t *testing.T) {
	h := strings.Repeat("a", 64)
	df, err := dockerfile(templateSpec{FromTemplate: "code-interpreter-v1", Steps: []step{
		{Type: "RUN", Args: []string{"echo a\necho b"}},
		{Type: "RUN", Args: []string{"id", "root"}},
		{Type: "USER", Args: []string{"user"}},
		{Type: "RUN", Args: []string{"id", "root"}},
		{Type: "COPY", Args: []string{"../etc/x", "/opt/x", "user", "0755"}, FilesHash: h},
		{Type: "ENV", Args: []string{"A", "1 2", "B", `"q"`}},
		{Type: "WORKDIR", Args: []string{"/opt"}},
	}, StartCmd: "serve", ReadyCmd: "curl -f localhost"}, map[string]bool{h: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `FROM code-interpreter
RUN ["/bin/bash", "-c", "echo a\necho b"]
USER root
RUN ["/bin/bash", "-c", "id"]
USER user
USER root
RUN ["/bin/bash", "-c", "id"]
USER user
COPY --chown=user --chmod=0755 ["files/` + h + `/etc/x", "/opt/x"]
ENV A="1 2"
ENV B="\"q\""
WORKDIR /opt
CMD ["/bin/bash", "-l", "-c", "serve"]
HEALTHCHECK --interval=1s --timeout=5s --start-period=60s --retries=60 CMD ["/bin/bash", "-l", "-c", "curl -f localhost"]
`
	if df != want {
		t.Errorf("dockerfile:\n%s\nwant:\n%s", df, want)
	}
	for name, spec := range map[string]templateSpec{
		"no base":          {},
		"files not sent":   {FromImage: "base", Steps: []step{{Type: "COPY", Args: []string{"a", "/a"}, FilesHash: h}}},
		"unknown step":     {FromImage: "base", Steps: []step{{Type: "ARG", Args: []string{"x"}}}},
		"bad mode":         {FromImage: "base", Steps: []step{{Type: "COPY", Args: []string{"a", "/a", "", "rwx"}, FilesHash: h}}},
		"newline in user":  {FromImage: "base", Steps: []step{{Type: "USER", Args: []string{"a\nRUN x"}}}},
		"newline in dir":   {FromImage: "base", Steps: []step{{Type: "WORKDIR", Args: []string{"/a\nRUN x"}}}},
		"bad env name":     {FromImage: "base", Steps: []step{{Type: "ENV", Args: []string{"A B", "1"}}}},
		"odd env":          {FromImage: "base", Steps: []step{{Type: "ENV", Args: []string{"A"}}}},
		"space in base":    {FromImage: "base\nRUN x"},
		"user with spaces": {FromImage: "base", Steps: []step{{Type: "RUN", Args: []string{"id", "a b"}}}},
	} {
		files := map[string]bool{h: true}
		if name == "files not sent" {
			files = nil
		}
		if _, err := dockerfile(spec, files); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}

// headerTransport adds the data plane's headers to every request.
type headerTransport struct {
	h  http.Header
	rt http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.rt.RoundTrip(r)
}

// TestDataPlaneConnectCodecs: a Connect server stream through the data
// plane, in both codecs, flows as it happens: the process prints, then
// waits for input that the test sends only once it has received that
// output and a keepalive (asked for by Keepalive-Ping-Interval); a proxy
// that held the stream back would never see either (bounded by the
// context's minute).
func TestDataPlaneConnectCodecs(t *testing.T) {
	hs := newTestServer(t)
	sb := create(t, hs, keyAlice, `{}`)
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", sb.SandboxID)
	h.Set("X-Access-Token", sb.EnvdAccessToken)
	h.Set("Keepalive-Ping-Interval", "1")
	hc := &http.Client{Transport: headerTransport{h: h, rt: hs.Client().Transport}}
	for name, opts := range map[string][]connect.ClientOption{"json": {connect.WithProtoJSON()}, "binary": nil} {
		t.Run(name, func(t *testing.T) {
			c := processconnect.NewProcessClient(hc, hs.URL, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stdin := true
			stream, err := c.Start(ctx, connect.NewRequest(&process.StartRequest{Stdin: &stdin, Process: &process.ProcessConfig{
				Cmd: "/bin/sh", Args: []string{"-c", `echo hi; read x; echo "got $x"`}}}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			var kinds []string
			var out string
			var pid uint32
			sent := false
			for stream.Receive() {
				ev := stream.Msg().GetEvent()
				switch {
				case ev.GetStart() != nil:
					pid = ev.GetStart().GetPid()
					kinds = append(kinds, "start")
				case ev.GetData() != nil:
					out += string(ev.GetData().GetStdout())
					kinds = append(kinds, "data")
				case ev.GetKeepalive() != nil:
					kinds = append(kinds, "keepalive")
				case ev.GetEnd() != nil:
					kinds = append(kinds, "end")
				}
				if !sent && out == "hi\n" && kinds[len(kinds)-1] == "keepalive" {
					sent = true
					_, err := c.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
						Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
						Input:   &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("there\n")}}}))
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v (events %v)", err, kinds)
			}
			if kinds[0] != "start" || kinds[len(kinds)-1] != "end" || out != "hi\ngot there\n" || !sent {
				t.Errorf("events %v, stdout %q", kinds, out)
			}
		})
	}
}

// TestStoppedSandbox: a stopped agentbox sandbox lists as paused, and
// connect boots it again (201).
func TestStoppedSandbox(t *testing.T) {
	hs := newTestServer(t)
	sb := create(t, hs, keyAlice, `{}`)
	if r := call(t, hs, "POST", "/v1/sandboxes/"+sb.SandboxID+"/stop", "{}", "Authorization", "Bearer "+keyAlice); r.status != 200 {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	var got sandboxOut
	call(t, hs, "GET", "/sandboxes/"+sb.SandboxID, "", "X-API-Key", keyAlice).json(t, &got)
	if got.State != "paused" {
		t.Errorf("stopped sandbox state %q, want paused", got.State)
	}
	wantError(t, "pause of a stopped sandbox", call(t, hs, "POST", "/sandboxes/"+sb.SandboxID+"/pause", "{}", "X-API-Key", keyAlice), 409)
	r := call(t, hs, "POST", "/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":60}`, "X-API-Key", keyAlice)
	if r.status != 201 {
		t.Fatalf("connect to a stopped sandbox: %d %s", r.status, r.body)
	}
	call(t, hs, "GET", "/sandboxes/"+sb.SandboxID, "", "X-API-Key", keyAlice).json(t, &got)
	if got.State != "running" {
		t.Errorf("after connect: %q", got.State)
	}
	if r := call(t, hs, "GET", "/health", "", "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", got.EnvdAccessToken); r.status != 204 {
		t.Errorf("data plane after connect: %d %s", r.status, r.body)
	}
}

// TestUploadLimit: an upload over MAX_UPLOAD_SIZE is refused (413) and
// writes nothing; one under it passes.
func TestUploadLimit(t *testing.T) {
	hs := newTestServerWith(t, Config{MaxUploadBytes: 64 << 10})
	sb := create(t, hs, keyAlice, `{}`)
	up := func(path string, n int) reply {
		req, _ := http.NewRequest("POST", hs.URL+"/files?path="+url.QueryEscape(path), strings.NewReader(strings.Repeat("x", n)))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, data}
	}
	dir := t.TempDir() // the fake backend's sandboxes see the host's files
	if r := up(dir+"/small", 1000); r.status != 200 {
		t.Fatalf("small upload: %d %s", r.status, r.body)
	}
	wantError(t, "upload over the limit", up(dir+"/big", 200<<10), http.StatusRequestEntityTooLarge)
	if r := call(t, hs, "GET", "/files?path="+url.QueryEscape(dir+"/big"), "", "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken); r.status == 200 && len(r.body) == 200<<10 {
		t.Errorf("the refused upload was written whole")
	}
}

// TestSignedFileURLs: a signature made as the SDKs make it (known vector)
// opens /files of its sandbox alone, by the sandbox header or without it;
// a wrong or expired one is 401.
func TestSignedFileURLs(t *testing.T) {
	// The SDK's getSignature("a.txt", "read", "", "tok") (node: "v1_" +
	// base64 sha256, padding cut).
	if got := fileSignature("a.txt", "read", "", "tok", ""); got != "v1_gDv73H8R9a10OdCSX0/JNMqMYLPpmCQAYJY+U68oQjM" {
		t.Errorf("fileSignature = %s", got)
	}
	hs := newTestServer(t)
	sb := create(t, hs, keyAlice, `{}`)
	other := create(t, hs, keyAlice, `{}`)
	signed := func(token, exp string) string {
		q := url.Values{"path": {"/etc/hostname"}, "signature": {fileSignature("/etc/hostname", "read", "", token, exp)}}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return "/files?" + q.Encode()
	}
	future := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	for _, h := range [][]string{nil, {"E2b-Sandbox-Id", sb.SandboxID}} {
		for _, p := range []string{signed(sb.EnvdAccessToken, ""), signed(sb.EnvdAccessToken, future)} {
			r := call(t, hs, "GET", p, "", h...)
			if r.status != 200 {
				t.Errorf("%v GET %s: %d %s", h, p, r.status, r.body)
			}
			// The sandbox's bytes on the API's origin: never a page of it.
			if r.header.Get("Content-Security-Policy") != "sandbox" || r.header.Get("X-Content-Type-Options") != "nosniff" ||
				r.header.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment") {
				t.Errorf("%v GET %s: headers %v, want an inert attachment", h, p, r.header)
			}
		}
		wantError(t, "expired", call(t, hs, "GET", signed(sb.EnvdAccessToken, past), "", h...), 401)
		wantError(t, "another token", call(t, hs, "GET", signed("x"+sb.EnvdAccessToken, ""), "", h...), 401)
	}
	// The other sandbox's signature does not open this one by its header.
	wantError(t, "another sandbox's signature", call(t, hs, "GET", signed(other.EnvdAccessToken, ""), "", "E2b-Sandbox-Id", sb.SandboxID), 401)
	wantError(t, "no signature", call(t, hs, "GET", "/files?path=/etc/hostname", ""), 401)
}
