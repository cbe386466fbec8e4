package spectest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// TestDocumentLoads: api/openapi.yaml is a valid OpenAPI document (the
// loader refuses a malformed one, such as a flow mapping whose unquoted
// description split into stray keys).
func TestDocumentLoads(t *testing.T) {
	v, err := New(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.CommonErrors()) == 0 {
		t.Fatal("no x-common-errors")
	}
}

const sandboxJSON = `{"id":"abc","template":"host","state":"running","created_at":"2025-01-02T03:04:05Z",` +
	`"end_at":"2025-01-02T04:04:05Z","access_token":"t","resources":{"memory":536870912,"cpus":1,"pids":256,"disk":1073741824}}`

// answer is what the test server answers one request.
type answer struct {
	status int
	ctype  string
	body   string
	header map[string]string
}

// roundTrip sends one request through the validating transport to a server
// that gives ans, and returns the body the caller read and the violations.
func roundTrip(t *testing.T, method, path, ctype, accept, body string, ans answer) (string, []Violation) {
	t.Helper()
	v, err := New(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		for k, val := range ans.header {
			w.Header().Set(k, val)
		}
		if ans.ctype != "" {
			w.Header().Set("Content-Type", ans.ctype)
		}
		w.WriteHeader(ans.status)
		io.WriteString(w, ans.body)
	}))
	defer srv.Close()
	var (
		mu  sync.Mutex
		got []Violation
	)
	hc := &http.Client{Transport: v.Transport(nil, func(x Violation) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, x)
	})}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != ans.body {
		t.Errorf("the caller read %q, the server sent %q", data, ans.body)
	}
	mu.Lock()
	defer mu.Unlock()
	return string(data), slices.Clone(got)
}

func TestValidatorAcceptsConformingExchanges(t *testing.T) {
	for _, c := range []struct {
		name                             string
		method, path, ctype, accept, req string
		ans                              answer
	}{
		{"sandbox", "GET", "/v1/sandboxes/abc", "", "", "", answer{status: 200, ctype: "application/json", body: sandboxJSON}},
		{"create", "POST", "/v1/sandboxes", "application/json", "", `{"template":"host","timeout":60,"resources":{"memory":"512M"}}`,
			answer{status: 201, ctype: "application/json", body: sandboxJSON}},
		{"documented error", "GET", "/v1/sandboxes/abc", "", "", "", answer{status: 404, ctype: "application/json", body: `{"code":"not_found","message":"no sandbox abc"}`}},
		{"common error", "GET", "/v1/sandboxes/abc", "", "", "", answer{status: 401, ctype: "application/json", body: `{"code":"unauthenticated","message":"missing API key"}`}},
		{"busy", "POST", "/v1/sandboxes/abc/exec", "application/json", "", `{"cmd":["true"]}`,
			answer{status: 429, ctype: "application/json", body: `{"code":"quota_exceeded","message":"busy"}`, header: map[string]string{"Retry-After": "1"}}},
		{"invalid request refused", "POST", "/v1/sandboxes/abc/exec", "application/json", "", `{"cwd":"/"}`,
			answer{status: 400, ctype: "application/json", body: `{"code":"invalid_argument","message":"cmd is required","field":"cmd"}`}},
		{"exec stream", "POST", "/v1/sandboxes/abc/exec", "application/json", "application/x-ndjson", `{"cmd":["echo","hi"]}`,
			answer{status: 200, ctype: "application/x-ndjson", body: "{\"type\":\"start\",\"pid\":7}\n{\"type\":\"stdout\",\"data\":\"hi\\n\"}\n{\"type\":\"exit\",\"exit_code\":0,\"status\":\"exit status 0\",\"duration_ms\":1.5}\n"}},
		{"upload of any type", "PUT", "/v1/sandboxes/abc/files?path=x", "", "", "hello",
			answer{status: 201, ctype: "application/json", body: `{"name":"x","path":"/home/user/x","type":"file","size":5}`}},
		{"download", "GET", "/v1/sandboxes/abc/files?path=/etc/hostname", "", "", "", answer{status: 200, ctype: "application/octet-stream", body: "abc\n"}},
		{"delete", "DELETE", "/v1/sandboxes/abc", "", "", "", answer{status: 204}},
		{"unknown route refused", "GET", "/v1/nothing/here", "", "", "", answer{status: 404, ctype: "application/json", body: `{"code":"not_found","message":"no route"}`}},
		{"mcp is not checked", "POST", "/v1/sandboxes/abc/mcp", "application/json", "", `{}`, answer{status: 200, ctype: "text/plain", body: "whatever"}},
		{"previews are not checked", "GET", "/v1/sandboxes/abc/ports/8080/x", "", "", "", answer{status: 418, ctype: "text/plain", body: "teapot"}},
		{"health is not checked", "GET", "/healthz", "", "", "", answer{status: 200, ctype: "text/plain", body: "ok"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, got := roundTrip(t, c.method, c.path, c.ctype, c.accept, c.req, c.ans)
			for _, v := range got {
				t.Errorf("unexpected violation: %s", v)
			}
		})
	}
}

// TestValidatorFindsMismatches: deliberately wrong answers (and requests
// the server should not have accepted) are reported.
func TestValidatorFindsMismatches(t *testing.T) {
	for _, c := range []struct {
		name                             string
		method, path, ctype, accept, req string
		ans                              answer
		want                             string // in the violation
	}{
		{"wrong enum", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 200, ctype: "application/json", body: strings.Replace(sandboxJSON, `"running"`, `"sleeping"`, 1)}, "state"},
		{"wrong type", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 200, ctype: "application/json", body: strings.Replace(sandboxJSON, `"cpus":1`, `"cpus":"one"`, 1)}, "cpus"},
		{"undocumented field", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 200, ctype: "application/json", body: strings.Replace(sandboxJSON, `"id":"abc"`, `"id":"abc","colour":"blue"`, 1)}, "colour"},
		{"missing required field", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 200, ctype: "application/json", body: strings.Replace(sandboxJSON, `,"access_token":"t"`, ``, 1)}, "access_token"},
		{"bad date-time", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 200, ctype: "application/json", body: strings.Replace(sandboxJSON, `"2025-01-02T03:04:05Z"`, `"yesterday"`, 1)}, "created_at"},
		{"null for an array", "GET", "/v1/sandboxes", "", "", "",
			answer{status: 200, ctype: "application/json", body: `{"sandboxes":null}`}, "sandboxes"},
		{"undocumented status", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 418, ctype: "application/json", body: `{"code":"internal","message":"teapot"}`}, "418"},
		{"undocumented success status", "POST", "/v1/sandboxes", "application/json", "", `{}`,
			answer{status: 200, ctype: "application/json", body: sandboxJSON}, "200"},
		{"error not an Error", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 404, ctype: "application/json", body: `{"message":"not found"}`}, "code"},
		{"common error not an Error", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 503, ctype: "application/json", body: `{"message":"starting"}`}, "code"},
		{"common error in text", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 500, ctype: "text/plain", body: "oops"}, "Content-Type"},
		{"wrong content type", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 200, ctype: "text/plain", body: sandboxJSON}, "Content-Type"},
		{"not JSON", "GET", "/v1/sandboxes/abc", "", "", "",
			answer{status: 200, ctype: "application/json", body: `{"id":`}, "not JSON"},
		{"bad Retry-After", "POST", "/v1/sandboxes/abc/exec", "application/json", "", `{"cmd":["true"]}`,
			answer{status: 429, ctype: "application/json", body: `{"code":"quota_exceeded","message":"busy"}`, header: map[string]string{"Retry-After": "soon"}}, "Retry-After"},
		{"bad NDJSON line", "POST", "/v1/sandboxes/abc/exec", "application/json", "application/x-ndjson", `{"cmd":["true"]}`,
			answer{status: 200, ctype: "application/x-ndjson", body: "{\"type\":\"start\",\"pid\":7}\n{\"type\":\"finish\",\"exit_code\":0}\n"}, "finish"},
		{"NDJSON line not JSON", "POST", "/v1/sandboxes/abc/code", "application/json", "", `{"code":"1"}`,
			answer{status: 200, ctype: "application/x-ndjson", body: "{\"type\":\"number_of_executions\",\"execution_count\":1}\nhello\n"}, "not JSON"},
		{"accepted an invalid body", "POST", "/v1/sandboxes/abc/exec", "application/json", "", `{"cwd":"/"}`,
			answer{status: 200, ctype: "application/json", body: `{"exit_code":0,"stdout":"","stderr":""}`}, "accepted a request"},
		{"accepted an unknown field", "POST", "/v1/sandboxes/abc/timeout", "application/json", "", `{"timeout":5,"when":"now"}`,
			answer{status: 200, ctype: "application/json", body: sandboxJSON}, "accepted a request"},
		{"accepted a bad query", "GET", "/v1/sandboxes?limit=0", "", "", "",
			answer{status: 200, ctype: "application/json", body: `{"sandboxes":[]}`}, "limit"},
		{"accepted an undeclared query parameter", "GET", "/v1/sandboxes/abc/files/stat?path=x&as=root", "", "", "",
			answer{status: 200, ctype: "application/json", body: `{"name":"x","path":"/home/user/x","type":"file","size":5}`}, "as"},
		{"accepted a zero timeout", "POST", "/v1/sandboxes/abc/timeout", "application/json", "", `{"timeout":0}`,
			answer{status: 200, ctype: "application/json", body: sandboxJSON}, "timeout"},
		{"accepted a body of the wrong type", "POST", "/v1/sandboxes/abc/exec", "text/plain", "", `{"cmd":["true"]}`,
			answer{status: 200, ctype: "application/json", body: `{"exit_code":0,"stdout":"","stderr":""}`}, "Content-Type"},
		{"served an undocumented route", "GET", "/v1/secret", "", "", "",
			answer{status: 200, ctype: "application/json", body: `{}`}, "no such operation"},
		{"served an undocumented method", "PATCH", "/v1/sandboxes/abc", "application/json", "", `{}`,
			answer{status: 200, ctype: "application/json", body: sandboxJSON}, "no such operation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, got := roundTrip(t, c.method, c.path, c.ctype, c.accept, c.req, c.ans)
			if len(got) == 0 {
				t.Fatalf("no violation reported")
			}
			var all []string
			for _, v := range got {
				all = append(all, v.String())
			}
			t.Log(strings.Join(all, "\n"))
			if s := strings.Join(all, "\n"); !strings.Contains(s, c.want) {
				t.Errorf("violations do not mention %q:\n%s", c.want, s)
			}
		})
	}
}

// TestValidatorPassesStreamsThrough: an NDJSON stream reaches the caller
// line by line as the server flushes it (nothing is buffered whole).
func TestValidatorPassesStreamsThrough(t *testing.T) {
	v, err := New(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(200)
		io.WriteString(w, "{\"type\":\"start\",\"pid\":1}\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "{\"type\":\"exit\",\"exit_code\":0}\n")
	}))
	defer srv.Close()
	defer close(next)
	var bad []Violation
	hc := &http.Client{Transport: v.Transport(nil, func(x Violation) { bad = append(bad, x) })}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/sandboxes/abc/exec", bytes.NewReader([]byte(`{"cmd":["true"]}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), `{"type":"start"`) {
		t.Fatalf("first line: %q, %v", buf[:n], err)
	}
	if len(bad) != 0 {
		t.Fatalf("violations: %v", bad)
	}
}

// TestNewRefusesWhatItCannotCheck: a keyword only JSON Schema 2020-12
// validation checks is refused rather than silently skipped (the validator
// uses kin-openapi's built-in one), and x-common-errors must be statuses.
func TestNewRefusesWhatItCannotCheck(t *testing.T) {
	doc := func(extra, schema string) []byte {
		return []byte(`openapi: 3.1.0
info: {title: t, version: "1"}
` + extra + `
paths: {}
components:
  schemas:
    Error: {type: object, properties: {code: {type: string}}}
    X: ` + schema + "\n")
	}
	if _, err := New(doc("x-common-errors: [401, 503]", "{type: object, properties: {a: {type: string}}}")); err != nil {
		t.Fatalf("a plain document: %v", err)
	}
	for name, d := range map[string][]byte{
		"const":        doc("", "{const: 1}"),
		"type list":    doc("", "{type: [string, 'null']}"),
		"if":           doc("", "{if: {type: string}, then: {minLength: 1}}"),
		"not a status": doc("x-common-errors: [200]", "{type: string}"),
	} {
		if _, err := New(d); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestValidatorChecksDecodedBodies: a body read by a json.Decoder (which
// stops before the last newline) and closed is checked; one closed
// unread is not.
func TestValidatorChecksDecodedBodies(t *testing.T) {
	v, err := New(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(sandboxJSON, `"running"`, `"sleeping"`, 1) + "\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		io.WriteString(w, bad[:10])
		w.(http.Flusher).Flush() // chunked: no Content-Length
		io.WriteString(w, bad[10:])
	}))
	defer srv.Close()
	for _, decode := range []bool{true, false} {
		var (
			mu  sync.Mutex
			got []Violation
		)
		hc := &http.Client{Transport: v.Transport(nil, func(x Violation) { mu.Lock(); got = append(got, x); mu.Unlock() })}
		resp, err := hc.Get(srv.URL + "/v1/sandboxes/abc")
		if err != nil {
			t.Fatal(err)
		}
		if decode {
			var m map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
		}
		resp.Body.Close()
		mu.Lock()
		if n := len(got); decode && n != 1 || !decode && n != 0 {
			t.Errorf("decode %v: %d violations: %v", decode, n, got)
		}
		mu.Unlock()
	}
}
