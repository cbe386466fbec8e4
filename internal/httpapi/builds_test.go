package httpapi

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
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
	resp, err := specClient(t, hs.Client().Transport).Do(req)
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

// errRunner fails every RUN step with err.
type errRunner struct{ err error }

func (r errRunner) Run(ctx context.Context, base sandbox.Template, step builder.RunStep, out io.Writer) (io.ReadCloser, error) {
	return nil, r.err
}

// noStore is a store the builds below never reach.
type noStore struct{}

func (noStore) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "no templates here")
}

func (noStore) Pull(ctx context.Context, ref, name string, opts template.PullOptions, progress func(template.Progress)) (template.Info, error) {
	return template.Info{}, sandbox.Errorf(sandbox.ClassNotFound, "no registry here")
}

func (noStore) Commit(ctx context.Context, name string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string) (template.Info, error) {
	return template.Info{}, errors.New("no commits here")
}

// TestBuildRouteErrorClasses: the stream's error keeps the class of why
// the build failed, with the Dockerfile's line: a failing RUN command is
// the Dockerfile's (invalid_argument, its message), a build sandbox over
// quota or the server failing is not.
func TestBuildRouteErrorClasses(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		code, msg string
	}{
		{"command fails", &builder.ExitError{Code: 2, Status: "exit status 2"}, "invalid_argument", "invalid Dockerfile: Dockerfile:2: RUN: the command /bin/sh -c make failed: returned a non-zero code: 2"},
		{"quota", fmt.Errorf("create build sandbox: %w", sandbox.Errorf(sandbox.ClassQuota, "not enough disk space on the server")), "quota_exceeded", "Dockerfile:2: not enough disk space on the server"},
		{"unavailable", sandbox.Errorf(sandbox.ClassUnavailable, "agent not reachable"), "unavailable", "Dockerfile:2: agent not reachable"},
		{"backend", fmt.Errorf("create build sandbox: %w", errors.New("loop device: no such device")), "internal", "internal error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := builder.New(noStore{}, errRunner{c.err}, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			s := New(Config{APIKeys: map[string]string{"opkey": "ops"}, TemplateAdmins: []string{"ops"}, MaxImportBytes: 1 << 20},
				manager.New(manager.Config{}, nil, store.NewMemory()))
			s.RegisterBuilds(BuildConfig{Builder: b})
			hs := httptest.NewServer(s.Handler())
			t.Cleanup(hs.Close)
			body, ct := buildBody(t, `{"tags":["app:1"]}`, map[string]string{"Dockerfile": "FROM scratch\nRUN make\n"})
			status, evs, msg := postBuild(t, hs, "opkey", body, ct)
			if status != 200 || len(evs) == 0 {
				t.Fatalf("build: %d %s", status, msg)
			}
			last := evs[len(evs)-1]
			if last.Type != builder.EventError || last.Error == nil || last.Error.Code != c.code || !strings.HasPrefix(last.Error.Message, c.msg) || last.Line != 2 {
				t.Fatalf("last event %+v (error %+v), want code %s, message starting %q, line 2", last, last.Error, c.code, c.msg)
			}
			if c.code == "internal" && strings.Contains(last.Message, "loop device") {
				t.Errorf("an internal error's details reached the caller: %q", last.Message)
			}
		})
	}
}
