package httpapi

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/builder"
)

// fakeBuilder records its options and what the context held.
type fakeBuilder struct {
	opts    builder.Options
	context map[string]string
}

func (f *fakeBuilder) Build(ctx context.Context, o builder.Options) (builder.Result, error) {
	f.opts = o
	f.context = map[string]string{}
	filepath.Walk(o.ContextDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(o.ContextDir, p)
			f.context[rel] = string(b)
		}
		return nil
	})
	o.Events(builder.Event{Type: builder.EventStep, Step: 1, Steps: 1, Instruction: "FROM scratch"})
	return builder.Result{Digest: "sha256:abc", Tags: o.Tags, Info: template.Info{Name: "app", Tag: "1", Kind: "image"}}, nil
}

func buildBody(t *testing.T, options string, files map[string]string) (io.Reader, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	w, _ := mw.CreateFormField("options")
	w.Write([]byte(options))
	w, _ = mw.CreateFormFile("context", "context.tar")
	tw := tar.NewWriter(w)
	for name, data := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
		tw.Write([]byte(data))
	}
	tw.Close()
	mw.Close()
	return &body, mw.FormDataContentType()
}

func postBuild(t *testing.T, hs *httptest.Server, key string, body io.Reader, ctype string) (int, []buildEvent, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/templates/builds", body)
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []buildEvent
	if resp.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, string(b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev buildEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad event %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return resp.StatusCode, evs, ""
}

// The operator's build gets its options (secrets included), the unpacked
// context and a stream ending in done; anyone else is refused before
// anything is read; a hostile context is refused.
func TestBuildRoute(t *testing.T) {
	fb := &fakeBuilder{}
	s := New(Config{APIKeys: map[string]string{"opkey": "ops", "bobkey": "bob"}, TemplateAdmins: []string{"ops"}, MaxImportBytes: 1 << 20},
		manager.New(manager.Config{}, nil, store.NewMemory()))
	s.RegisterBuilds(BuildConfig{Builder: fb})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)

	opts := `{"tags":["app:1"],"build_args":{"V":"1"},"secrets":{"tok":"c2VjcmV0"}}`
	files := map[string]string{"Dockerfile": "FROM scratch\n", "src/a.txt": "a"}
	body, ct := buildBody(t, opts, files)
	if status, _, msg := postBuild(t, hs, "bobkey", body, ct); status != http.StatusForbidden {
		t.Fatalf("a tenant's build: %d %s", status, msg)
	}
	body, ct = buildBody(t, opts, files)
	status, evs, msg := postBuild(t, hs, "opkey", body, ct)
	if status != 200 || len(evs) != 2 || evs[1].Type != "done" || evs[1].Template == nil {
		t.Fatalf("build: %d %s %+v", status, msg, evs)
	}
	if string(fb.opts.Secrets["tok"]) != "secret" || fb.opts.BuildArgs["V"] != "1" || string(fb.opts.Dockerfile) != "FROM scratch\n" ||
		fb.context["src/a.txt"] != "a" || fb.opts.Tags[0] != "app:1" {
		t.Fatalf("builder got %+v, context %v", fb.opts, fb.context)
	}
	if _, err := os.Stat(fb.opts.ContextDir); !os.IsNotExist(err) {
		t.Errorf("the context dir outlived the build: %v", err)
	}

	for name, c := range map[string]struct {
		opts  string
		files map[string]string
	}{
		"escaping context": {opts, map[string]string{"Dockerfile": "FROM scratch\n", "../evil": "x"}},
		"no Dockerfile":    {opts, map[string]string{"a": "b"}},
		"cache tag":        {`{"tags":["build-cache/x"]}`, files},
		"unknown option":   {`{"tags":["a"],"privileged":true}`, files},
	} {
		body, ct := buildBody(t, c.opts, c.files)
		if status, _, msg := postBuild(t, hs, "opkey", body, ct); status != http.StatusBadRequest || !strings.Contains(msg, "invalid") {
			t.Errorf("%s: %d %s", name, status, msg)
		}
	}
}
