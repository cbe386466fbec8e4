package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// fakeStore keeps templates in memory; each committed layer is unpacked
// (trusted test input) into a directory so the builder's views work.
type fakeStore struct {
	t          *testing.T
	mu         sync.Mutex
	dir        string
	tmpls      map[string]sandbox.Template
	layers     map[string][]tarEntry // layer dir -> its tar entries
	remote     map[string]sandbox.Template
	commits    []string
	pulls      []string
	failCommit error // every Commit fails with it
}

type tarEntry struct {
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
	Link     string
	Data     string
}

func newFakeStore(t *testing.T) *fakeStore {
	return &fakeStore{t: t, dir: t.TempDir(), tmpls: map[string]sandbox.Template{}, layers: map[string][]tarEntry{}, remote: map[string]sandbox.Template{}}
}

func normRef(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref
	}
	return ref + ":latest"
}

func (s *fakeStore) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tmpls[normRef(ref)]
	if !ok {
		return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "template %s not found", ref)
	}
	return t, nil
}

func (s *fakeStore) Pull(ctx context.Context, ref, name string, opts template.PullOptions, progress func(template.Progress)) (template.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pulls = append(s.pulls, ref)
	t, ok := s.remote[normRef(ref)]
	if !ok {
		return template.Info{}, errors.New("manifest unknown")
	}
	if name == "" {
		name = ref
	}
	s.tmpls[normRef(name)] = t
	return template.Info{Name: name, Digest: t.Digest}, nil
}

func (s *fakeStore) Commit(ctx context.Context, name string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string) (template.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failCommit != nil {
		return template.Info{}, s.failCommit
	}
	t := sandbox.Template{Ref: name, Kind: sandbox.TemplateImage, Layers: append([]string(nil), base.Layers...), Config: cfg}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", base.Digest)
	if diff != nil {
		data, err := io.ReadAll(diff)
		if err != nil {
			return template.Info{}, err
		}
		h.Write(data)
		dir := filepath.Join(s.dir, fmt.Sprintf("layer%d", len(s.layers)))
		entries, err := unpackTest(data, dir)
		if err != nil {
			return template.Info{}, err
		}
		s.layers[dir] = entries
		t.Layers = append(t.Layers, dir)
	}
	c, _ := json.Marshal(cfg)
	h.Write(c)
	t.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	s.tmpls[normRef(name)] = t
	s.commits = append(s.commits, name)
	return template.Info{Name: name, Digest: t.Digest, Config: cfg}, nil
}

// unpackTest extracts a trusted test tar (ownership is not applied:
// tests run as root and the view reads owners only for parents).
func unpackTest(data []byte, dir string) ([]tarEntry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []tarEntry
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		body, _ := io.ReadAll(tr)
		out = append(out, tarEntry{Name: hdr.Name, Type: hdr.Typeflag, Mode: hdr.Mode, UID: hdr.Uid, GID: hdr.Gid, Link: hdr.Linkname, Data: string(body)})
		if strings.Contains(hdr.Name, "..") {
			return nil, fmt.Errorf("bad name %q", hdr.Name)
		}
		p := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			os.MkdirAll(p, 0o755)
			os.Chmod(p, os.FileMode(hdr.Mode).Perm())
			os.Lchown(p, hdr.Uid, hdr.Gid)
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, body, os.FileMode(hdr.Mode).Perm()); err != nil {
				return nil, err
			}
			os.Lchown(p, hdr.Uid, hdr.Gid)
		case tar.TypeSymlink:
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.Symlink(hdr.Linkname, p)
		case tar.TypeLink:
			os.Link(filepath.Join(dir, hdr.Linkname), p)
		}
	}
}

// entriesOf returns the tar entries of the last layer of a template.
func (s *fakeStore) lastLayer(t *testing.T, ref string) map[string]tarEntry {
	t.Helper()
	tm, err := s.Resolve(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Layers) == 0 {
		t.Fatalf("%s has no layers", ref)
	}
	out := map[string]tarEntry{}
	for _, e := range s.layers[tm.Layers[len(tm.Layers)-1]] {
		out[strings.TrimSuffix(e.Name, "/")] = e
	}
	return out
}

// addImage stores a template made of one layer built from files
// (path -> content; "->target" makes a symlink, trailing / a directory).
func (s *fakeStore) addImage(t *testing.T, name string, remote bool, cfg sandbox.ImageConfig, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range sortedKeys(files) {
		v := files[p]
		hdr := &tar.Header{Name: p, Mode: 0o644}
		switch {
		case strings.HasSuffix(p, "/"):
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		case strings.HasPrefix(v, "->"):
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, v[2:]
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(v))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			io.WriteString(tw, v)
		}
	}
	tw.Close()
	if _, err := s.Commit(context.Background(), name, sandbox.Template{}, &buf, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	if remote {
		s.mu.Lock()
		s.remote[normRef(name)] = s.tmpls[normRef(name)]
		delete(s.tmpls, normRef(name))
		s.mu.Unlock()
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Parents sort before children.
	sortStrings(keys)
	return keys
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// fakeRunner records the steps it is given and returns a layer with one
// file /ran/<n> holding the command line.
type fakeRunner struct {
	mu    sync.Mutex
	steps []RunStep
	fail  string // a command line containing this exits 1
	err   error  // a command line containing fail gets this error instead (the server failing it)
	files map[string]string
}

func (r *fakeRunner) Run(ctx context.Context, base sandbox.Template, step RunStep, out io.Writer) (io.ReadCloser, error) {
	r.mu.Lock()
	n := len(r.steps)
	rec := step
	rec.Started = nil
	r.steps = append(r.steps, rec)
	r.mu.Unlock()
	if step.Started != nil {
		step.Started(fmt.Sprintf("sbx%04d", n))
	}
	cmd := strings.Join(step.Args, " ")
	fmt.Fprintf(out, "out: %s\n", cmd)
	if r.fail != "" && strings.Contains(cmd, r.fail) {
		if r.err != nil {
			return nil, r.err
		}
		return nil, &ExitError{Code: 1, Status: "exit status 1"}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := map[string]string{"ran/": "", path.Join("ran", fmt.Sprint(n)): cmd}
	for k, v := range r.files {
		files[k] = v
	}
	for _, p := range sortedKeys(files) {
		hdr := &tar.Header{Name: p, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(files[p]))}
		if strings.HasSuffix(p, "/") {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		}
		tw.WriteHeader(hdr)
		io.WriteString(tw, files[p])
	}
	tw.Close()
	return io.NopCloser(&buf), nil
}

func (r *fakeRunner) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.steps)
}

// harness is a builder over fakes with a debian-like base image.
type harness struct {
	t      *testing.T
	store  *fakeStore
	runner *fakeRunner
	b      *Builder
	ctxDir string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, store: newFakeStore(t), runner: &fakeRunner{}, ctxDir: t.TempDir()}
	h.store.addImage(t, "debian:bookworm", false, sandbox.ImageConfig{
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"bash"},
	}, map[string]string{
		"bin":        "->usr/bin",
		"etc/":       "",
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\napp:x:1001:1002:App:/home/app:/bin/sh\n",
		"etc/group":  "root:x:0:\nstaff:x:50:\napp:x:1002:\n",
		"usr/":       "",
		"usr/bin/":   "",
		"usr/bin/sh": "#!",
	})
	b, err := New(h.store, h.runner, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	return h
}

func (h *harness) write(files map[string]string) {
	h.t.Helper()
	for p, v := range files {
		full := filepath.Join(h.ctxDir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if strings.HasPrefix(v, "->") {
			os.Remove(full)
			if err := os.Symlink(v[2:], full); err != nil {
				h.t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
}

// build runs a build of df tagged "out" and returns the result, the text
// output and the events.
func (h *harness) build(df string, mod func(*Options)) (Result, string, []Event, error) {
	h.t.Helper()
	var out bytes.Buffer
	var events []Event
	opts := Options{Dockerfile: []byte(df), ContextDir: h.ctxDir, Tags: []string{"out:latest"}, Output: &out,
		Events: func(e Event) { events = append(events, e) }}
	if mod != nil {
		mod(&opts)
	}
	res, err := h.b.Build(context.Background(), opts)
	return res, out.String(), events, err
}

func (h *harness) mustBuild(df string, mod func(*Options)) (Result, string, []Event) {
	h.t.Helper()
	res, out, ev, err := h.build(df, mod)
	if err != nil {
		h.t.Fatalf("build: %v\n%s", err, out)
	}
	return res, out, ev
}

func (h *harness) config() sandbox.ImageConfig {
	h.t.Helper()
	t, err := h.store.Resolve(context.Background(), "out:latest")
	if err != nil {
		h.t.Fatal(err)
	}
	return t.Config
}

func chmod(p string, m os.FileMode) error { return os.Chmod(p, m) }

func readAll(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
