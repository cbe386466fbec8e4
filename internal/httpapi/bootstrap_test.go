package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/bootstrap"
)

type fakeImporter struct {
	path, name string
	err        error
}

func (f *fakeImporter) Import(ctx context.Context, path, name string, progress func(template.Progress)) (template.Info, error) {
	f.path, f.name = path, name
	if f.err != nil {
		return template.Info{}, f.err
	}
	progress(template.Progress{Layer: "sha256:abc", Status: "unpacking", Current: 1, Total: 2})
	// A layer's "done" must not read as the end of the bootstrap.
	progress(template.Progress{Layer: "sha256:abc", Status: "done", Current: 2, Total: 2})
	n, tag, _ := strings.Cut(name, ":")
	return template.Info{Name: n, Tag: tag, Kind: "image"}, nil
}

// bootstrapServer serves the bootstrap route over a fake bootstrap that
// records its options and writes some mmdebstrap-like output.
func bootstrapServer(t *testing.T, keys map[string]string, imp *fakeImporter, fail error) (*httptest.Server, *bootstrap.Options) {
	t.Helper()
	s := New(Config{APIKeys: keys, TemplateAdmins: []string{DefaultUser, "ops"}}, manager.New(manager.Config{}, nil, store.NewMemory()))
	got := &bootstrap.Options{}
	s.RegisterBootstrap(BootstrapConfig{
		Store: imp, CacheDir: t.TempDir(),
		Bootstrap: func(ctx context.Context, o bootstrap.Options, out io.Writer) (string, error) {
			*got = o
			fmt.Fprint(out, "I: running apt-get update...\nI: downloading\rI: 50%\r\n"+strings.Repeat("x", 10000)+"\n")
			if fail != nil {
				return "", fail
			}
			return "/cache/debian-bookworm.tar", nil
		},
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs, got
}

func postBootstrap(t *testing.T, hs *httptest.Server, key, body string) (*http.Response, []BootstrapEvent) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/templates/bootstraps", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := specClient(t, hs.Client().Transport).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []BootstrapEvent
	if resp.Header.Get("Content-Type") == "application/x-ndjson" {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev BootstrapEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("bad event %q: %v", sc.Text(), err)
			}
			evs = append(evs, ev)
		}
	}
	return resp, evs
}

func TestBootstrapRouteStreamsAndImports(t *testing.T) {
	imp := &fakeImporter{}
	hs, got := bootstrapServer(t, nil, imp, nil)
	resp, evs := postBootstrap(t, hs, "", `{"image":"debian:bookworm","include":["git","curl"]}`)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 {
		t.Fatalf("status %d, events %v", resp.StatusCode, evs)
	}
	var logs []string
	for _, ev := range evs {
		if ev.Status == "log" {
			logs = append(logs, ev.Message)
		}
	}
	if !slices.Equal(logs[:3], []string{"I: running apt-get update...", "I: downloading", "I: 50%"}) || len(logs) != 4 || len(logs[3]) != maxLogLine {
		t.Errorf("log events %q", logs)
	}
	last := evs[len(evs)-1]
	if last.Status != "done" || last.Template == nil || last.Template.Name != "debian" || last.Template.Tag != "bookworm" {
		t.Errorf("last event %+v", last)
	}
	if !slices.ContainsFunc(evs, func(e BootstrapEvent) bool { return e.Status == "unpacking" && e.Total == 2 }) {
		t.Errorf("no import progress in %v", evs)
	}
	if imp.path != "/cache/debian-bookworm.tar" || imp.name != "debian:bookworm" {
		t.Errorf("imported %q as %q", imp.path, imp.name)
	}
	if got.Image != "debian:bookworm" || !slices.Equal(got.Include, []string{"git", "curl"}) || got.CacheDir == "" {
		t.Errorf("bootstrap options %+v", got)
	}
}

func TestBootstrapRouteFailuresEndTheStream(t *testing.T) {
	hs, _ := bootstrapServer(t, nil, &fakeImporter{}, errors.New("mmdebstrap: exit status 1"))
	_, evs := postBootstrap(t, hs, "", `{"image":"debian:12","name":"mydebian:v1"}`)
	if last := evs[len(evs)-1]; last.Status != "error" || !strings.Contains(last.Error, "exit status 1") {
		t.Errorf("last event %+v", last)
	}
	hs, _ = bootstrapServer(t, nil, &fakeImporter{err: errors.New("disk full")}, nil)
	_, evs = postBootstrap(t, hs, "", `{"image":"debian:12","name":"mydebian:v1"}`)
	if last := evs[len(evs)-1]; last.Status != "error" || last.Error != "disk full" {
		t.Errorf("last event %+v", last)
	}
}

func TestBootstrapRouteRefusals(t *testing.T) {
	keys := map[string]string{"k-ops": "ops", "k-alice": "alice"}
	hs, got := bootstrapServer(t, keys, &fakeImporter{}, nil)
	for _, c := range []struct {
		key, body string
		status    int
	}{
		{"k-alice", `{"image":"debian:bookworm"}`, http.StatusForbidden},
		{"", `{"image":"debian:bookworm"}`, http.StatusUnauthorized},
		{"k-ops", `{"image":"ubuntu:jammy"}`, http.StatusBadRequest},
		{"k-ops", `{"image":"debian:bookworm","include":["/etc/shadow"]}`, http.StatusBadRequest},
		{"k-ops", `{"image":"debian:bookworm","include":["?essential"]}`, http.StatusBadRequest},
		{"k-ops", `{"image":"debian:bookworm","cache_dir":"/"}`, http.StatusBadRequest},
		{"k-ops", `{}`, http.StatusBadRequest},
	} {
		resp, _ := postBootstrap(t, hs, c.key, c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d", c.key, c.body, resp.StatusCode, c.status)
		}
	}
	if got.Image != "" {
		t.Errorf("a refused request bootstrapped %+v", got)
	}
	if resp, evs := postBootstrap(t, hs, "k-ops", `{"image":"debian:bookworm"}`); resp.StatusCode != http.StatusOK || evs[len(evs)-1].Status != "done" {
		t.Errorf("operator: status %d, events %v", resp.StatusCode, evs)
	}

	// A server without a store or cache refuses before doing anything.
	s := New(Config{}, manager.New(manager.Config{}, nil, store.NewMemory()))
	s.RegisterBootstrap(BootstrapConfig{})
	bare := httptest.NewServer(s.Handler())
	defer bare.Close()
	if resp, _ := postBootstrap(t, bare, "", `{"image":"debian:bookworm"}`); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("unconfigured: status %d", resp.StatusCode)
	}
}

func TestBootstrapRouteIsDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	s := New(Config{}, manager.New(manager.Config{}, nil, store.NewMemory()))
	s.RegisterBootstrap(BootstrapConfig{})
	p := s.patterns[len(s.patterns)-1]
	method, path, _ := strings.Cut(p, " ")
	if _, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
		t.Errorf("route %s is not in api/openapi.yaml", p)
	}
}
