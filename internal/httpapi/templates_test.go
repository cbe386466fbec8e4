package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/template"
)

// fakeTemplates is a TemplateStore in memory: the routes' own behaviour
// (auth, validation, streaming, spooling) is what these tests check; the
// real store has its own tests, and test/e2e drives both together.
type fakeTemplates struct {
	mu        sync.Mutex
	infos     map[string]template.Info
	inUse     map[string]bool
	imported  []byte // content of the last imported file
	importDir string // directory of the last imported file
	pullErr   error
	exportErr error
}

func newFakeTemplates() *fakeTemplates {
	return &fakeTemplates{infos: map[string]template.Info{
		"host:latest":   {Name: "host", Tag: "latest", Kind: sandbox.TemplateHost},
		"rootfs:latest": {Name: "rootfs", Tag: "latest", Kind: sandbox.TemplateDir, Source: "/srv/secret/rootfs"},
		"library/python:3.12": {Name: "library/python", Tag: "3.12", Kind: sandbox.TemplateImage, Digest: "sha256:aa",
			Source: "python:3.12", Layers: []template.LayerInfo{{DiffID: "sha256:11", Size: 10}}, Size: 10},
	}, inUse: map[string]bool{}}
}

func key(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref
	}
	return ref + ":latest"
}

func (f *fakeTemplates) List(ctx context.Context) ([]template.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []template.Info
	for _, i := range f.infos {
		out = append(out, i)
	}
	return out, nil
}

func (f *fakeTemplates) Get(ctx context.Context, ref string) (template.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.infos[key(ref)]
	if !ok {
		return i, sandbox.Errorf(sandbox.ClassNotFound, "no template %q", ref)
	}
	return i, nil
}

func (f *fakeTemplates) Delete(ctx context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.infos[key(ref)]; !ok {
		return sandbox.Errorf(sandbox.ClassNotFound, "no template %q", ref)
	}
	if f.inUse[key(ref)] {
		return sandbox.Errorf(sandbox.ClassConflict, "template %q is in use", ref)
	}
	delete(f.infos, key(ref))
	return nil
}

func (f *fakeTemplates) Pull(ctx context.Context, ref, name string, opts template.PullOptions, progress func(template.Progress)) (template.Info, error) {
	for i := range 3 {
		progress(template.Progress{Layer: "sha256:11", Status: "downloading", Current: int64(i), Total: 2})
	}
	progress(template.Progress{Layer: "sha256:11", Status: "done"})
	if f.pullErr != nil {
		return template.Info{}, f.pullErr
	}
	if name == "" {
		name = ref
	}
	n, tag, _ := strings.Cut(key(name), ":")
	info := template.Info{Name: n, Tag: tag, Kind: sandbox.TemplateImage, Source: ref + "@" + opts.Platform, Digest: "sha256:bb"}
	f.mu.Lock()
	f.infos[key(name)] = info
	f.mu.Unlock()
	return info, nil
}

func (f *fakeTemplates) Import(ctx context.Context, path, name string, progress func(template.Progress)) (template.Info, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return template.Info{}, err
	}
	n, tag, _ := strings.Cut(key(name), ":")
	info := template.Info{Name: n, Tag: tag, Kind: sandbox.TemplateImage, Source: path}
	f.mu.Lock()
	f.imported, f.importDir = data, filepath.Dir(path)
	f.infos[key(name)] = info
	f.mu.Unlock()
	return info, nil
}

func (f *fakeTemplates) Export(ctx context.Context, ref, format string, w io.Writer) error {
	if _, err := w.Write([]byte(format + " tar of " + ref)); err != nil {
		return err
	}
	return f.exportErr
}

// templateServer serves the API with the fake store: key "op" is the
// operator (user default), key "t" a tenant.
func templateServer(t *testing.T, ts TemplateStore) (*httptest.Server, string) {
	t.Helper()
	importDir := t.TempDir()
	s := New(Config{APIKeys: map[string]string{"op": DefaultUser, "t": "alice"}, Templates: ts,
		ImportDir: importDir, MaxImportBytes: 1 << 20},
		manager.New(manager.Config{}, nil, store.NewMemory()))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv, importDir
}

func call(t *testing.T, method, url, key, ctype, accept string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := specClient(t, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func errCode(t *testing.T, data []byte) string {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(data, &e); err != nil || e.Code == "" || e.Message == "" || e.RequestID == "" {
		t.Fatalf("not the API's error shape: %s", data)
	}
	return e.Code
}

// Every caller lists and reads templates; a tenant never sees where an
// operator's directory is.
func TestTemplatesListAndGet(t *testing.T) {
	srv, _ := templateServer(t, newFakeTemplates())
	for _, k := range []string{"op", "t"} {
		resp, data := call(t, "GET", srv.URL+"/v1/templates", k, "", "", nil)
		var out struct{ Templates []template.Info }
		if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil || len(out.Templates) != 3 {
			t.Fatalf("%s: list: %d %s", k, resp.StatusCode, data)
		}
		for _, info := range out.Templates {
			if info.Kind == sandbox.TemplateDir && (info.Source != "") != (k == "op") {
				t.Errorf("%s sees the dir template's source %q", k, info.Source)
			}
			if info.Layers == nil {
				t.Errorf("layers of %s are null, want a list", info.Name)
			}
		}
		if k == "t" && strings.Contains(string(data), "/srv/secret") {
			t.Errorf("tenant list leaks a host path: %s", data)
		}
	}
	// A name with a slash and a tag, escaped as one path segment.
	resp, data := call(t, "GET", srv.URL+"/v1/templates/"+url.PathEscape("library/python:3.12"), "t", "", "", nil)
	var info template.Info
	if resp.StatusCode != 200 || json.Unmarshal(data, &info) != nil || info.Digest != "sha256:aa" || info.Layers[0].Size != 10 {
		t.Fatalf("get: %d %s", resp.StatusCode, data)
	}
	resp, data = call(t, "GET", srv.URL+"/v1/templates/nope", "t", "", "", nil)
	if resp.StatusCode != 404 || errCode(t, data) != "not_found" {
		t.Fatalf("unknown template: %d %s", resp.StatusCode, data)
	}
	resp, data = call(t, "GET", srv.URL+"/v1/templates/"+url.PathEscape("a b"), "t", "", "", nil)
	if resp.StatusCode != 400 || errCode(t, data) != "invalid_argument" {
		t.Fatalf("bad name: %d %s", resp.StatusCode, data)
	}
}

// Pull, import, export and delete are for the operator only.
func TestTemplatesTenantRefused(t *testing.T) {
	fs := newFakeTemplates()
	srv, importDir := templateServer(t, fs)
	for _, c := range []struct{ method, path, ctype, body string }{
		{"POST", "/v1/templates/pulls", "application/json", `{"image":"alpine"}`},
		{"POST", "/v1/templates/imports?name=x", "application/x-tar", "tar"},
		{"DELETE", "/v1/templates/" + url.PathEscape("library/python:3.12"), "", ""},
		{"GET", "/v1/templates/host/export", "", ""},
	} {
		resp, data := call(t, c.method, srv.URL+c.path, "t", c.ctype, "", strings.NewReader(c.body))
		if resp.StatusCode != 403 || errCode(t, data) != "permission_denied" {
			t.Errorf("tenant %s %s: %d %s", c.method, c.path, resp.StatusCode, data)
		}
	}
	if len(fs.infos) != 3 || fs.imported != nil {
		t.Fatalf("a tenant changed the templates: %v", fs.infos)
	}
	if left, _ := os.ReadDir(importDir); len(left) != 0 {
		t.Fatalf("a refused import left files: %v", left)
	}
}

func TestTemplatesDelete(t *testing.T) {
	fs := newFakeTemplates()
	fs.inUse["rootfs:latest"] = true
	srv, _ := templateServer(t, fs)
	resp, data := call(t, "DELETE", srv.URL+"/v1/templates/rootfs", "op", "", "", nil)
	if resp.StatusCode != 409 || errCode(t, data) != "conflict" {
		t.Fatalf("in-use delete: %d %s", resp.StatusCode, data)
	}
	resp, data = call(t, "DELETE", srv.URL+"/v1/templates/"+url.PathEscape("library/python:3.12"), "op", "", "", nil)
	if resp.StatusCode != 204 {
		t.Fatalf("delete: %d %s", resp.StatusCode, data)
	}
	if _, ok := fs.infos["library/python:3.12"]; ok {
		t.Fatal("template still there")
	}
	resp, data = call(t, "DELETE", srv.URL+"/v1/templates/"+url.PathEscape("library/python:3.12"), "op", "", "", nil)
	if resp.StatusCode != 404 || errCode(t, data) != "not_found" {
		t.Fatalf("second delete: %d %s", resp.StatusCode, data)
	}
}

func TestTemplatesPull(t *testing.T) {
	fs := newFakeTemplates()
	srv, _ := templateServer(t, fs)
	// Plain JSON: the template, 201.
	resp, data := call(t, "POST", srv.URL+"/v1/templates/pulls", "op", "application/json", "",
		strings.NewReader(`{"image":"reg.example:5000/ns/app:1","name":"app:v1","platform":"linux/arm64/v8"}`))
	var info template.Info
	if resp.StatusCode != 201 || json.Unmarshal(data, &info) != nil || info.Name != "app" || info.Tag != "v1" ||
		info.Source != "reg.example:5000/ns/app:1@linux/arm64/v8" {
		t.Fatalf("pull: %d %s", resp.StatusCode, data)
	}
	// NDJSON: progress events, then done with the template.
	resp, data = call(t, "POST", srv.URL+"/v1/templates/pulls", "op", "application/json", "application/x-ndjson",
		strings.NewReader(`{"image":"alpine:3"}`))
	events := ndjson(t, data)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" || len(events) < 3 {
		t.Fatalf("stream: %d %s", resp.StatusCode, data)
	}
	if events[0]["type"] != "progress" || events[0]["layer"] != "sha256:11" || events[0]["status"] != "downloading" {
		t.Errorf("first event: %v", events[0])
	}
	last := events[len(events)-1]
	if last["type"] != "done" || last["template"].(map[string]any)["name"] != "alpine" {
		t.Errorf("last event: %v", last)
	}
	// A failure after the stream started is an error event in the API's
	// error shape.
	fs.pullErr = sandbox.Errorf(sandbox.ClassNotFound, "manifest unknown")
	_, data = call(t, "POST", srv.URL+"/v1/templates/pulls", "op", "application/json", "application/x-ndjson",
		strings.NewReader(`{"image":"alpine:9"}`))
	events = ndjson(t, data)
	last = events[len(events)-1]
	e, _ := last["error"].(map[string]any)
	if last["type"] != "error" || e["code"] != "not_found" || e["message"] != "manifest unknown" || e["request_id"] == "" {
		t.Errorf("error event: %v", last)
	}
	// Internal errors keep their details in the log.
	fs.pullErr = errors.New("open /var/lib/secret: boom")
	_, data = call(t, "POST", srv.URL+"/v1/templates/pulls", "op", "application/json", "application/x-ndjson",
		strings.NewReader(`{"image":"alpine:9"}`))
	if strings.Contains(string(data), "/var/lib/secret") || !strings.Contains(string(data), `"code":"internal"`) {
		t.Errorf("internal error leaked or missing: %s", data)
	}
	// Bad requests, before anything runs.
	fs.pullErr = errors.New("the store was called")
	for body, field := range map[string]string{
		`{}`:              "image",
		`{"image":"a b"}`: "image",
		`{"image":"` + strings.Repeat("a", 600) + `"}`: "image",
		`{"image":"alpine","name":"x\ny"}`:             "name",
		`{"image":"alpine","platform":"linux"}`:        "platform",
		`{"image":"alpine","platform":"../x/y"}`:       "platform",
		`{"image":"alpine","insecure":true}`:           "insecure",
	} {
		resp, data := call(t, "POST", srv.URL+"/v1/templates/pulls", "op", "application/json", "", strings.NewReader(body))
		var eb errorBody
		_ = json.Unmarshal(data, &eb)
		if resp.StatusCode != 400 || eb.Field != field {
			t.Errorf("%s: %d %s", body, resp.StatusCode, data)
		}
	}
}

func ndjson(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatalf("no events: %q", data)
	}
	return out
}

// An import is spooled to a file in the import directory (the store's
// tmp dir), handed to the store, and removed; an oversized one is refused
// and leaves nothing.
func TestTemplatesImport(t *testing.T) {
	fs := newFakeTemplates()
	srv, importDir := templateServer(t, fs)
	payload := bytes.Repeat([]byte("layer data "), 50000) // 550 kB
	resp, data := call(t, "POST", srv.URL+"/v1/templates/imports?name="+url.QueryEscape("mine:v2"), "op", "application/x-tar", "", bytes.NewReader(payload))
	var info template.Info
	if resp.StatusCode != 201 || json.Unmarshal(data, &info) != nil || info.Name != "mine" || info.Tag != "v2" {
		t.Fatalf("import: %d %s", resp.StatusCode, data)
	}
	if !bytes.Equal(fs.imported, payload) || fs.importDir != importDir {
		t.Fatalf("store got %d bytes in %s, want %d in %s", len(fs.imported), fs.importDir, len(payload), importDir)
	}
	// Chunked (no Content-Length) and too large: cut at the limit.
	big := io.MultiReader(bytes.NewReader(payload), bytes.NewReader(payload))
	resp, data = call(t, "POST", srv.URL+"/v1/templates/imports?name=big", "op", "application/x-tar", "", io.NopCloser(big))
	if resp.StatusCode != 413 || errCode(t, data) != "too_large" {
		t.Fatalf("oversized import: %d %s", resp.StatusCode, data)
	}
	// Declared too large: refused before reading.
	req, _ := http.NewRequest("POST", srv.URL+"/v1/templates/imports?name=big", bytes.NewReader(make([]byte, 2<<20)))
	req.Header.Set("Authorization", "Bearer op")
	req.Header.Set("Content-Type", "application/x-tar")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("declared oversized import: %v", err)
	}
	r.Body.Close()
	if r.StatusCode != 413 {
		t.Fatalf("declared oversized import: %v", r.Status)
	}
	for _, c := range []struct{ query, ctype string }{{"", "application/x-tar"}, {"?name=x", "application/json"}, {"?name=x", "text/plain"}} {
		resp, data := call(t, "POST", srv.URL+"/v1/templates/imports"+c.query, "op", c.ctype, "", strings.NewReader("x"))
		if resp.StatusCode != 400 {
			t.Errorf("import %s as %s: %d %s", c.query, c.ctype, resp.StatusCode, data)
		}
	}
	if left, _ := os.ReadDir(importDir); len(left) != 0 {
		t.Fatalf("imports left files behind: %v", left)
	}
}

func TestTemplatesExport(t *testing.T) {
	fs := newFakeTemplates()
	srv, _ := templateServer(t, fs)
	resp, data := call(t, "GET", srv.URL+"/v1/templates/"+url.PathEscape("library/python:3.12")+"/export?format=oci", "op", "", "", nil)
	if resp.StatusCode != 200 || string(data) != "oci tar of library/python:3.12" || resp.Header.Get("Content-Type") != "application/x-tar" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename=library_python_3.12.oci.tar` {
		t.Fatalf("export: %d %v %q", resp.StatusCode, resp.Header, data)
	}
	resp, data = call(t, "GET", srv.URL+"/v1/templates/host/export?format=zip", "op", "", "", nil)
	if resp.StatusCode != 400 || errCode(t, data) != "invalid_argument" {
		t.Fatalf("bad format: %d %s", resp.StatusCode, data)
	}
	resp, data = call(t, "GET", srv.URL+"/v1/templates/nope/export", "op", "", "", nil)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown export: %d %s", resp.StatusCode, data)
	}
	// A failure mid-stream cuts the connection: the client never takes a
	// truncated tar for a whole one.
	fs.exportErr = errors.New("disk error")
	req, _ := http.NewRequest("GET", srv.URL+"/v1/templates/host/export", nil)
	req.Header.Set("Authorization", "Bearer op")
	r, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = io.ReadAll(r.Body)
		r.Body.Close()
	}
	if err == nil {
		t.Fatal("a failed export read as complete")
	}
}

func TestTemplatesWithoutStore(t *testing.T) {
	srv, _ := templateServer(t, nil)
	resp, data := call(t, "GET", srv.URL+"/v1/templates", "t", "", "", nil)
	if resp.StatusCode != 503 || errCode(t, data) != "unavailable" {
		t.Fatalf("no store: %d %s", resp.StatusCode, data)
	}
}

// The gate admits n operations at once; a waiter gives up with its
// context.
func TestTemplateGate(t *testing.T) {
	acquire := NewTemplateGate(1)
	release, err := acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := acquire(ctx); sandbox.ClassOf(err) != sandbox.ClassTimeout {
		t.Fatalf("full gate: %v", err)
	}
	release()
	release() // idempotent
	r2, err := acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r2()
}

// TestSecurityPrivateTemplates: a tenant's snapshots (its private
// namespace) are listed, read and deletable by that tenant only; other
// tenants see nothing of them, not even their names.
func TestSecurityPrivateTemplates(t *testing.T) {
	fs := newFakeTemplates()
	aliceSnap := template.PrivateName("alice", "snap:v1")
	bobSnap := template.PrivateName("bob", "snap:v1")
	for _, n := range []string{aliceSnap, bobSnap} {
		name, tag, _ := strings.Cut(n, ":")
		fs.infos[n] = template.Info{Name: name, Tag: tag, Kind: sandbox.TemplateImage, Digest: "sha256:" + tag}
	}
	srv, _ := templateServer(t, fs)
	resp, data := call(t, "GET", srv.URL+"/v1/templates", "t", "", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(data), aliceSnap[:strings.Index(aliceSnap, ":")]) ||
		strings.Contains(string(data), bobSnap[:strings.Index(bobSnap, ":")]) {
		t.Fatalf("alice's list: %d %s", resp.StatusCode, data)
	}
	if resp, data := call(t, "GET", srv.URL+"/v1/templates/"+url.PathEscape(bobSnap), "t", "", "", nil); resp.StatusCode != 404 {
		t.Errorf("alice reads bob's snapshot: %d %s", resp.StatusCode, data)
	}
	if resp, data := call(t, "DELETE", srv.URL+"/v1/templates/"+url.PathEscape(bobSnap), "t", "", "", nil); resp.StatusCode != 404 {
		t.Errorf("alice deletes bob's snapshot: %d %s", resp.StatusCode, data)
	}
	if resp, data := call(t, "DELETE", srv.URL+"/v1/templates/"+url.PathEscape(aliceSnap), "t", "", "", nil); resp.StatusCode != 204 {
		t.Errorf("alice deletes her own snapshot: %d %s", resp.StatusCode, data)
	}
	if _, ok := fs.infos[bobSnap]; !ok {
		t.Fatal("bob's snapshot is gone")
	}
	// The operator sees and manages everything.
	if resp, data := call(t, "GET", srv.URL+"/v1/templates/"+url.PathEscape(bobSnap), "op", "", "", nil); resp.StatusCode != 200 {
		t.Errorf("operator reads bob's snapshot: %d %s", resp.StatusCode, data)
	}
}
