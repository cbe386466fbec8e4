package template

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// testRegistry is go-containerregistry's in-process registry behind
// httptest, optionally with Docker's token auth: /token issues a bearer
// token for the right basic credentials only, and /v2/ wants that token.
type testRegistry struct {
	srv        *httptest.Server
	host       string
	user, pass string
	mu         sync.Mutex
	requests   []string // "METHOD path" of every /v2/ request
}

const testToken = "tok-7d1f"

func newRegistry(t *testing.T, auth bool) *testRegistry {
	t.Helper()
	tr := &testRegistry{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	mux := http.NewServeMux()
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != tr.user || p != tr.pass {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}`, http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"token": testToken, "expires_in": 300})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.requests = append(tr.requests, r.Method+" "+r.URL.Path)
		tr.mu.Unlock()
		if auth && r.Header.Get("Authorization") != "Bearer "+testToken {
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`)
			return
		}
		reg.ServeHTTP(w, r)
	})
	tr.srv = httptest.NewServer(mux)
	t.Cleanup(tr.srv.Close)
	tr.host = strings.TrimPrefix(tr.srv.URL, "http://")
	if auth {
		tr.user, tr.pass = "alice", "s3cret"
	}
	return tr
}

// blobGets returns the blob digests fetched since the last call.
func (tr *testRegistry) blobGets() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for _, r := range tr.requests {
		if strings.HasPrefix(r, "GET ") && strings.Contains(r, "/blobs/") {
			out = append(out, r[strings.LastIndex(r, "/")+1:])
		}
	}
	tr.requests = nil
	return out
}

func (tr *testRegistry) ref(t *testing.T, repo string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(tr.host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (tr *testRegistry) auth() remote.Option {
	if tr.user == "" {
		return remote.WithAuth(authn.Anonymous)
	}
	return remote.WithAuth(&authn.Basic{Username: tr.user, Password: tr.pass})
}

// push writes img (or an index) to repo:tag.
func (tr *testRegistry) push(t *testing.T, repo string, img v1.Image) v1.Hash {
	t.Helper()
	if err := remote.Write(tr.ref(t, repo), img, tr.auth()); err != nil {
		t.Fatalf("push %s: %v", repo, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pushRaw uploads blobs and a hand-made manifest, for hostile images.
func (tr *testRegistry) pushRaw(t *testing.T, repo string, blobs [][]byte, manifest []byte, mt types.MediaType) {
	t.Helper()
	r := tr.ref(t, repo)
	for _, b := range blobs {
		l := static.NewLayer(b, types.DockerLayer)
		if err := remote.WriteLayer(r.Context(), l, tr.auth()); err != nil {
			t.Fatalf("push blob: %v", err)
		}
	}
	if err := remote.Put(r, rawManifest{manifest, mt}, tr.auth()); err != nil {
		t.Fatalf("push manifest: %v", err)
	}
}

type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

// tarBytes builds a layer tar: name -> content ("dir/" names a
// directory, "->target" a symlink).
func tarBytes(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := files[n]
		h := &tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}
		switch {
		case strings.HasSuffix(n, "/"):
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(c, "->"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, c[2:], 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, c)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tarLayer(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()
	b := tarBytes(t, files)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is an image of the given layers with a run configuration.
func testImage(t *testing.T, arch string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config = v1.Config{
		Env: []string{"PATH=/usr/bin:/bin", "GREETING=hi"}, WorkingDir: "/srv", User: "1000:1000",
		Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"serve"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}}, Labels: map[string]string{"org.test": "yes"},
		StopSignal:  "SIGTERM",
		Healthcheck: &v1.HealthConfig{Test: []string{"CMD", "true"}, Interval: time.Second, Retries: 3},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func hostArch() string { return runtime.GOARCH }

// openStore opens a store in a fresh directory, as root (layers keep
// their owners and whiteouts are device nodes).
func openStore(t *testing.T, opts Options) (*Store, string) {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// readLayered reads rel from the highest layer of tmpl that has it.
func readLayered(t *testing.T, tmpl sandbox.Template, rel string) string {
	t.Helper()
	for i := len(tmpl.Layers) - 1; i >= 0; i-- {
		b, err := os.ReadFile(filepath.Join(tmpl.Layers[i], rel))
		if err == nil {
			return string(b)
		}
	}
	t.Fatalf("%s: in none of %d layers", rel, len(tmpl.Layers))
	return ""
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func wantClass(t *testing.T, err error, c sandbox.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("want a %s error, got none", c)
	}
	if got := sandbox.ClassOf(err); got != c {
		t.Fatalf("want class %s, got %s: %v", c, got, err)
	}
}

// progressLog collects progress reports.
type progressLog struct {
	mu  sync.Mutex
	all []Progress
}

func (p *progressLog) add(x Progress) { p.mu.Lock(); p.all = append(p.all, x); p.mu.Unlock() }

func (p *progressLog) count(status string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, x := range p.all {
		if x.Status == status {
			n++
		}
	}
	return n
}

// entries lists a directory's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
