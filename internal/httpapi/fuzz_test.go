package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// fuzzRoutes are the JSON-body routes FuzzAPIBodies sends bodies to. The
// sandbox ones name a sandbox that does not exist: the body is decoded and
// checked before the lookup, so every decode path runs without anything
// being executed on the host.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/v1/sandboxes"},
	{"POST", "/v1/sandboxes/sbx-none/exec"},
	{"POST", "/v1/sandboxes/sbx-none/code"},
	{"PUT", "/v1/sandboxes/sbx-none/network"},
	{"POST", "/v1/sandboxes/sbx-none/files/move"},
	{"POST", "/v1/sandboxes/sbx-none/files/mkdir"},
	{"POST", "/v1/sandboxes/sbx-none/timeout"},
	{"POST", "/v1/sessions/s1/connect"},
	{"POST", "/v1/sandboxes/sbx-none/code/contexts"},
	{"POST", "/v1/sandboxes/sbx-none/preview-tokens"},
	{"POST", "/v1/sandboxes/sbx-none/snapshot"},
	{"PUT", "/v1/sandboxes/sbx-none/files"},
	{"GET", "/v1/sandboxes/sbx-none/files/stat"},
	{"GET", "/v1/sandboxes/sbx-none/pty"},
}

var (
	fuzzOnce    sync.Once
	fuzzHandler http.Handler
	// fuzzEnd shuts down what fuzzServer started; TestMain calls it
	// after every test (the fuzz targets share one server).
	fuzzEnd = func() {}
)

// errFuzzNoBoot fails every create before a sandbox boots: the fuzzer
// checks the API's parsing, not the backend.
var errFuzzNoBoot = sandbox.Errorf(sandbox.ClassUnavailable, "fuzz: sandboxes are not booted")

func fuzzServer(f *testing.F) http.Handler {
	fuzzOnce.Do(func() {
		// Not f.TempDir: the server outlives the first target.
		dir, err := os.MkdirTemp("", "agentbox-fuzz-")
		if err != nil {
			f.Fatal(err)
		}
		b := fake.New(testutil.AgentBinary(f), dir)
		b.CreateHook = func(ctx context.Context, s sandbox.Spec) error { return errFuzzNoBoot }
		tmpl := sandbox.Template{Ref: "host", Kind: sandbox.TemplateHost}
		m := manager.New(manager.Config{Resolver: oneTemplate{tmpl}}, b, store.NewMemory())
		if err := m.Start(context.Background()); err != nil {
			f.Fatal(err)
		}
		fuzzHandler = New(Config{}, m).Handler()
		fuzzEnd = func() {
			m.Shutdown(context.Background(), true)
			b.Close()
			os.RemoveAll(dir)
		}
	})
	return fuzzHandler
}

// FuzzAPIBodies sends arbitrary bodies and ?path= values to the native
// API's JSON routes. Whatever the input: no panic, never a 500 (bad input
// is the caller's error, and says so), and every error is the one JSON
// error shape with a code and a message.
func FuzzAPIBodies(f *testing.F) {
	seeds := []string{
		`{"template":"base","timeout":30,"env":{"A":"1"},"metadata":{"k":"v"}}`,
		`{"template":"base","resources":{"memory":"512MiB","cpus":1.5,"pids":64,"disk":"1GiB"}}`,
		`{"template":"base","network":{"mode":"none"}}`,
		`{"template":"base","network":{"allow_out":["*.example.com","10.0.0.0/8"],"deny_out":["::1"]}}`,
		`{"cmd":["sh","-c","echo hi"],"stdin":"aGk=","env":{"X":"y"},"cwd":"/tmp","timeout":5}`,
		`{"cmd":["cat"],"stdin":"\u0000\ud800\udc00\\\"\/\b\f\n\r\t"}`,
		`{"code":"print(1)","language":"python","context_id":"x"}`,
		`{"from":"/a","to":"/b"}`, `{"path":"../../etc"}`, `{"timeout":-1}`, `{"timeout":1e309}`,
		`{"port":8080,"ttl":60}`, `{"name":"snap:1"}`, `null`, `[]`, `"x"`, `{`, `{"a":1}`,
		`{"cmd":"not a list"}`, `{"template":"base","timeout":"30"}`, "\xff\xfe{}", strings.Repeat("[", 10000),
	}
	paths := []string{"", "/workspace/a", "../../../etc/passwd", "a\x00b", strings.Repeat("a/", 3000), "ü/🙂", "~/x"}
	for i, s := range seeds {
		f.Add(uint8(i%len(fuzzRoutes)), []byte(s), paths[i%len(paths)])
	}
	h := fuzzServer(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte, path string) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		target := rt.path + "?path=" + url.QueryEscape(path)
		req := httptest.NewRequest(rt.method, target, bytes.NewReader(body))
		req.Host = "127.0.0.1:8000" // the browser guard serves loopback names without keys
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s %.200q: status %d: %s", rt.method, rt.path, body, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusServiceUnavailable && !strings.Contains(rec.Body.String(), "fuzz: sandboxes are not booted") {
			t.Fatalf("%s %s %.200q: 503 not from the test's backend: %s", rt.method, rt.path, body, rec.Body)
		}
		if rec.Code < 400 {
			t.Fatalf("%s %s %.200q: status %d for a sandbox that does not exist", rt.method, rt.path, body, rec.Code)
		}
		var e errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
			t.Fatalf("%s %s %.200q: status %d, body is not the error shape (%v): %s", rt.method, rt.path, body, rec.Code, err, rec.Body)
		}
	})
}

// FuzzInlineBytes checks the in-place JSON string decoder that exec's
// stdin goes through against encoding/json: for every valid string literal
// of valid UTF-8 both give the same bytes, and the result never grows past
// the literal (it is written over it).
func FuzzInlineBytes(f *testing.F) {
	for _, s := range []string{`""`, `"abc"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`, `"\\\"\/\b\f\n\r\t"`,
		`"\udc00\ud800"`, `"\u0000"`, "\"\xff\"", `"a\ud83dz"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		// encoding/json hands UnmarshalJSON the literal without the
		// whitespace around it.
		lit = bytes.TrimSpace(lit)
		if !json.Valid(lit) || len(lit) < 2 || lit[0] != '"' {
			return
		}
		var want string
		if err := json.Unmarshal(lit, &want); err != nil {
			t.Fatalf("json.Valid but Unmarshal fails: %v", err)
		}
		n := len(lit)
		var got inlineBytes
		if err := got.UnmarshalJSON(bytes.Clone(lit)); err != nil {
			t.Fatalf("%q: %v", lit, err)
		}
		if len(got) > n-2 {
			t.Fatalf("%q: decoded %d bytes from a literal of %d", lit, len(got), n)
		}
		if utf8.Valid(lit) && string(got) != want {
			t.Fatalf("%q: inline %q, encoding/json %q", lit, got, want)
		}
	})
}

// FuzzPTYFrames covers what a PTY websocket client controls: text frames
// (resize) and the close reason built from agent errors. A resize is only
// ever a pair of 16-bit sizes; a close reason is valid UTF-8 of at most
// 123 bytes whatever the error said.
func FuzzPTYFrames(f *testing.F) {
	f.Add([]byte(`{"type":"resize","cols":120,"rows":40}`), "agent: start: no such file")
	f.Add([]byte(`{"type":"resize","cols":4294967295,"rows":1}`), strings.Repeat("é", 100))
	f.Add([]byte(`{"type":"resize","cols":65536,"rows":65535}`), strings.Repeat("x", 119)+"🙂")
	f.Add([]byte(`{"type":"resize","cols":-1,"rows":1}`), "\xff\xfe")
	f.Add([]byte(`{"type":"exit"}`), "")
	f.Fuzz(func(t *testing.T, frame []byte, reason string) {
		cols, rows, ok := parseResize(frame)
		if ok && (cols == 0 || rows == 0 || cols > 65535 || rows > 65535) {
			t.Fatalf("%q: resize %dx%d accepted", frame, cols, rows)
		}
		r := truncateReason(reason)
		if len(r) > 123 || !utf8.ValidString(r) {
			t.Fatalf("close reason %q from %q: %d bytes, valid UTF-8 %v", r, reason, len(r), utf8.ValidString(r))
		}
		if utf8.ValidString(reason) && !strings.HasPrefix(reason, r) {
			t.Fatalf("close reason %q is not a prefix of %q", r, reason)
		}
	})
}
