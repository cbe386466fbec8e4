package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
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
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image the template tests run: a small usr-merged root filesystem of
// host binaries (a shell and coreutils with their libraries) with accounts
// of its own and files owned by ids other than root, so that a sandbox can
// show the image's ids, user, env and working dir.

// imageBins are the programs of the test image (the agent comes from the
// daemon, bind-mounted).
var imageBins = []string{"sh", "dash", "ls", "cat", "id", "env", "rm", "mkdir", "sleep", "stat", "touch", "true"}

// imageFiles are the image's own files: path -> content, owner.
var imageFiles = []struct {
	path, body string
	uid, gid   int
}{
	{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1001:1001:app:/home/app:/bin/sh\n", 0, 0},
	{"etc/group", "root:x:0:\napp:x:1001:\nsvc:x:43:\n", 0, 0},
	{"etc/image-marker", "from the image\n", 0, 0},
	{"srv/app/readme", "image readme\n", 1001, 1001},
	{"srv/app/keep", "kept\n", 1001, 1001},
	{"opt/owned", "owned by 42:43\n", 42, 43},
}

// imageDirs are the image's directories: path -> mode, owner.
var imageDirs = []struct {
	path     string
	mode     int64
	uid, gid int
}{
	{"etc", 0o755, 0, 0}, {"usr", 0o755, 0, 0}, {"usr/bin", 0o755, 0, 0}, {"proc", 0o555, 0, 0}, {"sys", 0o555, 0, 0},
	{"dev", 0o755, 0, 0}, {"tmp", 0o1777, 0, 0}, {"run", 0o755, 0, 0}, {"var", 0o755, 0, 0}, {"var/tmp", 0o1777, 0, 0},
	{"root", 0o700, 0, 0}, {"home", 0o755, 0, 0}, {"home/app", 0o755, 1001, 1001}, {"srv", 0o755, 0, 0},
	{"srv/app", 0o755, 1001, 1001}, {"opt", 0o755, 0, 0},
}

// imageEnvVar is the variable the image's config sets.
const imageEnvVar = "IMG_VAR"

var (
	rootfsOnce sync.Once
	rootfsTar  []byte
	rootfsErr  error
)

// imageRootfsTar returns the test image's root filesystem as a tar (built
// once per test binary).
func imageRootfsTar(t testing.TB) []byte {
	t.Helper()
	rootfsOnce.Do(func() { rootfsTar, rootfsErr = buildRootfsTar() })
	if rootfsErr != nil {
		t.Skipf("cannot build the test image from host binaries: %v", rootfsErr)
	}
	return rootfsTar
}

func buildRootfsTar() ([]byte, error) {
	// Host files under /usr (resolved, usr-merged): programs and the
	// libraries ldd names, the dynamic loader included.
	hostFiles := map[string]bool{}
	links := map[string]string{} // /usr/bin/sh -> dash
	for _, bin := range imageBins {
		p := filepath.Join("/usr/bin", bin)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		hostFiles[real] = true
		if real != p {
			links[p] = real
		}
		out, _ := exec.Command("ldd", real).Output()
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				r, err := filepath.EvalSymlinks(f)
				if err != nil {
					return nil, err
				}
				hostFiles[r] = true
				if r != f {
					links[f] = r
				}
			}
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	seen := map[string]bool{}
	dir := func(p string, mode int64, uid, gid int) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: uid, Gid: gid, ModTime: mtime})
	}
	// usrPath maps a host path to its place in the usr-merged image.
	usrPath := func(p string) string {
		return filepath.Join("usr", strings.TrimPrefix(strings.TrimPrefix(p, "/usr"), "/"))
	}
	parents := func(p string) error {
		var chain []string
		for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			if err := dir(chain[i], 0o755, 0, 0); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range imageDirs {
		if err := dir(d.path, d.mode, d.uid, d.gid); err != nil {
			return nil, err
		}
	}
	for _, l := range []struct{ name, target string }{{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}, {"sbin", "usr/sbin"}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l.name, Linkname: l.target, Mode: 0o777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(hostFiles))
	for f := range hostFiles {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		p := usrPath(f)
		if err := parents(p); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
		seen[p] = true
	}
	linkNames := make([]string, 0, len(links))
	for l := range links {
		linkNames = append(linkNames, l)
	}
	sort.Strings(linkNames)
	for _, l := range linkNames {
		p := usrPath(l)
		if seen[p] {
			continue
		}
		if err := parents(p); err != nil {
			return nil, err
		}
		seen[p] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: "/" + usrPath(links[l]), Mode: 0o777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	for _, f := range imageFiles {
		if err := parents(f.path); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: 0o644, Size: int64(len(f.body)),
			Uid: f.uid, Gid: f.gid, ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// testImageConfig is the run configuration of the test image.
func testImageConfig(marker string) v1.Config {
	return v1.Config{
		Env:        []string{"PATH=/usr/bin:/bin", imageEnvVar + "=" + marker},
		WorkingDir: "/srv/app",
		User:       "app",
		Cmd:        []string{"/bin/sh"},
	}
}

// runnableImage is the test image with one more small layer naming it
// (marker, so that every image of a test has its own top layer and digest).
func runnableImage(t testing.TB, marker string) v1.Image {
	t.Helper()
	base := imageRootfsTar(t)
	baseLayer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(base)), nil })
	if err != nil {
		t.Fatal(err)
	}
	var top bytes.Buffer
	tw := tar.NewWriter(&top)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755, ModTime: time.Unix(1700000000, 0)})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/image-name", Mode: 0o644, Size: int64(len(marker) + 1), ModTime: time.Unix(1700000000, 0)})
	io.WriteString(tw, marker+"\n")
	tw.Close()
	topBytes := top.Bytes()
	topLayer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(topBytes)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, baseLayer, topLayer)
	if err != nil {
		t.Fatal(err)
	}
	return withTestConfig(t, img, marker)
}

// uniqueImage is the test image as one layer of its own (the root
// filesystem plus a file naming marker): no layer shared with any other.
func uniqueImage(t testing.TB, marker string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tr := tar.NewReader(bytes.NewReader(imageRootfsTar(t)))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/image-name", Mode: 0o644, Size: int64(len(marker) + 1), ModTime: time.Unix(1700000000, 0)})
	io.WriteString(tw, marker+"\n")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	return withTestConfig(t, img, marker)
}

// withTestConfig gives img the test image's platform and run configuration.
func withTestConfig(t testing.TB, img v1.Image, marker string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", hostArch()
	cf.Config = testImageConfig(marker)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// hostArch is the GOARCH-style name of this machine's architecture, as
// images name it.
func hostArch() string {
	out, _ := exec.Command("uname", "-m").Output()
	switch strings.TrimSpace(string(out)) {
	case "aarch64":
		return "arm64"
	default:
		return "amd64"
	}
}

// tokenRegistry is go-containerregistry's registry on loopback behind
// Docker's token auth: /token hands a bearer token for the right basic
// credentials only, and /v2/ wants that token.
type tokenRegistry struct {
	host       string
	user, pass string
	token      string
	mu         sync.Mutex
	blobGets   int
	tokens     int
}

func newTokenRegistry(t testing.TB) *tokenRegistry {
	t.Helper()
	tr := &tokenRegistry{user: "e2e-user", pass: "e2e-s3cret", token: "e2e-token-51c2"}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	mux := http.NewServeMux()
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != tr.user || p != tr.pass {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}`, http.StatusUnauthorized)
			return
		}
		tr.mu.Lock()
		tr.tokens++
		tr.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"token": tr.token, "expires_in": 300})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+tr.token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="e2e"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`)
			return
		}
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			tr.mu.Lock()
			tr.blobGets++
			tr.mu.Unlock()
		}
		reg.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tr.host = strings.TrimPrefix(srv.URL, "http://")
	return tr
}

// authSetting is AGENTBOX_REGISTRY_AUTH for this registry.
func (tr *tokenRegistry) authSetting() string {
	b, _ := json.Marshal(map[string]map[string]string{tr.host: {"username": tr.user, "password": tr.pass}})
	return "AGENTBOX_REGISTRY_AUTH=" + string(b)
}

// push writes img to repo:tag and returns its manifest digest.
func (tr *tokenRegistry) push(t testing.TB, repo string, img v1.Image) v1.Hash {
	t.Helper()
	ref, err := name.ParseReference(tr.host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: tr.user, Password: tr.pass})); err != nil {
		t.Fatalf("push %s: %v", repo, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tokensIssued is how many tokens /token handed out.
func (tr *tokenRegistry) tokensIssued() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.tokens
}

// takeBlobGets returns the blob downloads since the last call.
func (tr *tokenRegistry) takeBlobGets() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := tr.blobGets
	tr.blobGets = 0
	return n
}

// treeState lists every entry under dir (path, mode, owner, size, content
// hash of small files): what "unchanged" means for a layer directory.
func treeState(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := info.Sys()
		desc := info.Mode().String() + " " + statOwner(st) + " " + itoa(info.Size())
		if info.Mode().IsRegular() && info.Size() < 1<<16 {
			data, _ := os.ReadFile(p)
			desc += " " + string(data)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// diffTrees describes how two treeState results differ (empty: equal).
func diffTrees(before, after map[string]string) []string {
	var d []string
	for k, v := range after {
		if b, ok := before[k]; !ok {
			d = append(d, "added "+k)
		} else if b != v {
			d = append(d, "changed "+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		}
	}
	sort.Strings(d)
	return d
}

// duBytes is the disk space the files under dir use (du -s --bytes of
// allocated blocks, counting each hard-linked file once).
func duBytes(t testing.TB, dir string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-s", "-B1", "-x", dir).Output()
	if err != nil {
		t.Fatalf("du %s: %v", dir, err)
	}
	var n int64
	for _, c := range strings.Fields(string(out))[0] {
		n = n*10 + int64(c-'0')
	}
	return n
}

func statOwner(st any) string {
	if s, ok := st.(*syscall.Stat_t); ok {
		return strconv.Itoa(int(s.Uid)) + ":" + strconv.Itoa(int(s.Gid))
	}
	return "?"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
