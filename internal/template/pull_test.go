package template

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func inlineAuth(tr *testRegistry, user, pass string) RegistryAuth {
	b, _ := json.Marshal(map[string]map[string]string{tr.host: {"username": user, "password": pass}})
	return RegistryAuth{Inline: string(b), DockerConfig: filepath.Join(os.TempDir(), "agentbox-no-docker-config.json")}
}

// A pull through token auth stores the image: layers in order, the run
// configuration mapped, the manifest digest pinned in the source.
func TestPullTokenAuth(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, true)
	img := testImage(t, hostArch(), tarLayer(t, map[string]string{"etc/": "", "etc/motd": "base"}), tarLayer(t, map[string]string{"etc/motd": "top", "app/run": "x"}))
	md := tr.push(t, "team/app:v1", img)
	s, _ := openStore(t, Options{Auth: inlineAuth(tr, "alice", "s3cret")})
	var pl progressLog
	info, err := s.Pull(ctx, tr.host+"/team/app:v1", "", PullOptions{}, pl.add)
	if err != nil {
		t.Fatal(err)
	}
	if want := tr.host + "/team/app@" + md.String(); info.Source != want {
		t.Errorf("source %q, want the pinned %q", info.Source, want)
	}
	cd, _ := img.ConfigName()
	if info.Name != tr.host+"/team/app" || info.Tag != "v1" || info.Digest != cd.String() || info.Kind != sandbox.TemplateImage {
		t.Errorf("info %+v", info)
	}
	if len(info.Layers) != 2 || info.Size != int64(len("base")+len("top")+1) {
		t.Errorf("layers %+v size %d", info.Layers, info.Size)
	}
	tmpl, err := s.Resolve(ctx, tr.host+"/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if got := readLayered(t, tmpl, "etc/motd"); got != "top" {
		t.Errorf("etc/motd = %q, want the top layer's", got)
	}
	c := tmpl.Config
	if c.WorkingDir != "/srv" || c.User != "1000:1000" || c.Cmd[0] != "serve" || c.Entrypoint[0] != "/bin/sh" ||
		c.Ports[0] != "8080/tcp" || c.Labels["org.test"] != "yes" || c.StopSignal != "SIGTERM" ||
		c.Healthcheck == nil || c.Healthcheck.Retries != 3 || c.Healthcheck.Interval != time.Second || len(c.Env) != 2 {
		t.Errorf("config %+v", c)
	}
	if pl.count("downloading") == 0 || pl.count("unpacking") != 2 || pl.count("done") != 2 {
		t.Errorf("progress %+v", pl.all)
	}
}

// Wrong or missing credentials fail clearly and store nothing.
func TestPullTokenAuthWrongCredentials(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, true)
	tr.push(t, "team/app:v1", testImage(t, hostArch(), tarLayer(t, map[string]string{"f": "1"})))
	for _, auth := range []RegistryAuth{inlineAuth(tr, "alice", "wrong"), {DockerConfig: filepath.Join(t.TempDir(), "none.json")}} {
		s, dir := openStore(t, Options{Auth: auth})
		if auth.Inline == "" {
			os.WriteFile(auth.DockerConfig, []byte(`{"auths":{}}`), 0o600)
		}
		_, err := s.Pull(ctx, tr.host+"/team/app:v1", "", PullOptions{}, nil)
		wantClass(t, err, sandbox.ClassForbidden)
		if !strings.Contains(err.Error(), "refused access") {
			t.Errorf("unclear error: %v", err)
		}
		if l, _ := s.List(ctx); len(l) != 1 {
			t.Errorf("stored something: %+v", l)
		}
		if n := entries(t, filepath.Join(dir, "layers")); len(n) != 0 {
			t.Errorf("layers left: %v", n)
		}
	}
}

// Credentials from a docker config.json ("auth" is base64 user:password).
func TestPullDockerConfigAuth(t *testing.T) {
	tr := newRegistry(t, true)
	tr.push(t, "x:1", testImage(t, hostArch(), tarLayer(t, map[string]string{"f": "1"})))
	cfg := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"auths":{"http://%s":{"auth":"YWxpY2U6czNjcmV0"}}}`, tr.host)), 0o600)
	s, _ := openStore(t, Options{Auth: RegistryAuth{DockerConfig: cfg}})
	if _, err := s.Pull(context.Background(), tr.host+"/x:1", "x", PullOptions{}, nil); err != nil {
		t.Fatal(err)
	}
}

// A mirror serves the pull and the origin is never asked; a dead mirror is
// skipped for the next one.
func TestPullMirror(t *testing.T) {
	ctx := context.Background()
	origin, mirror := newRegistry(t, false), newRegistry(t, false)
	img := testImage(t, hostArch(), tarLayer(t, map[string]string{"f": "mirror"}))
	mirror.push(t, "lib/app:1", img)
	origin.blobGets()
	s, _ := openStore(t, Options{Mirrors: map[string][]string{origin.host: {"127.0.0.1:1", "http://" + mirror.host}}})
	info, err := s.Pull(ctx, origin.host+"/lib/app:1", "app", PullOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	origin.mu.Lock()
	asked := len(origin.requests)
	origin.mu.Unlock()
	if asked != 0 {
		t.Errorf("the origin was asked %d times", asked)
	}
	if !strings.HasPrefix(info.Source, origin.host+"/lib/app@sha256:") {
		t.Errorf("source %q does not name the origin", info.Source)
	}
	// A mirror without the image: the origin answers.
	origin.push(t, "lib/other:1", testImage(t, hostArch(), tarLayer(t, map[string]string{"f": "origin"})))
	if _, err := s.Pull(ctx, origin.host+"/lib/other:1", "other", PullOptions{}, nil); err != nil {
		t.Fatalf("fallback to the origin: %v", err)
	}
	tmpl, _ := s.Resolve(ctx, "other")
	if got := readLayered(t, tmpl, "f"); got != "origin" {
		t.Errorf("f = %q", got)
	}
}

// A multi-arch index: the host's platform by default, another on request;
// an image for another architecture is refused unless asked for.
func TestPullPlatform(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, false)
	other := "arm64"
	if hostArch() == "arm64" {
		other = "amd64"
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: testImage(t, other, tarLayer(t, map[string]string{"arch": other})), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: testImage(t, hostArch(), tarLayer(t, map[string]string{"arch": hostArch()})), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: hostArch()}}},
	)
	if err := remote.WriteIndex(tr.ref(t, "multi:1"), idx, tr.auth()); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, Options{})
	for _, c := range []struct{ platform, want string }{{"", hostArch()}, {"linux/" + other, other}} {
		n := "m-" + c.want
		if _, err := s.Pull(ctx, tr.host+"/multi:1", n, PullOptions{Platform: c.platform}, nil); err != nil {
			t.Fatal(err)
		}
		tmpl, _ := s.Resolve(ctx, n)
		if got := readLayered(t, tmpl, "arch"); got != c.want {
			t.Errorf("platform %q: got the %s image", c.platform, got)
		}
	}
	_, err := s.Pull(ctx, tr.host+"/multi:1", "m", PullOptions{Platform: "linux/s390x"}, nil)
	wantClass(t, err, sandbox.ClassNotFound)
	_, err = s.Pull(ctx, tr.host+"/multi:1", "m", PullOptions{Platform: "windows/amd64"}, nil)
	wantClass(t, err, sandbox.ClassInvalid)

	tr.push(t, "single:1", testImage(t, other, tarLayer(t, map[string]string{"arch": other})))
	_, err = s.Pull(ctx, tr.host+"/single:1", "single", PullOptions{}, nil)
	wantClass(t, err, sandbox.ClassInvalid)
	if _, err := s.Pull(ctx, tr.host+"/single:1", "single", PullOptions{Platform: "linux/" + other}, nil); err != nil {
		t.Errorf("explicit platform: %v", err)
	}
}

// The record keeps the digest it pulled when the tag moves; a pull by
// digest gets exactly that image, under a digest tag.
func TestPullDigestPinning(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, false)
	first := testImage(t, hostArch(), tarLayer(t, map[string]string{"v": "1"}))
	d1 := tr.push(t, "app:latest", first)
	s, _ := openStore(t, Options{})
	info1, err := s.Pull(ctx, tr.host+"/app", "app", PullOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.push(t, "app:latest", testImage(t, hostArch(), tarLayer(t, map[string]string{"v": "2"})))
	got, _ := s.Get(ctx, "app")
	if got.Digest != info1.Digest || !strings.HasSuffix(got.Source, "@"+d1.String()) {
		t.Errorf("record moved with the tag: %+v", got)
	}
	info, err := s.Pull(ctx, tr.host+"/app@"+d1.String(), "", PullOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Digest != info1.Digest || info.Tag != "sha256-"+d1.Hex[:12] || info.Name != tr.host+"/app" {
		t.Errorf("pull by digest: %+v", info)
	}
	missing := "sha256:" + strings.Repeat("ab", 32)
	_, err = s.Pull(ctx, tr.host+"/app@"+missing, "nope", PullOptions{}, nil)
	wantClass(t, err, sandbox.ClassNotFound)
}

// A second pull of the same image downloads and unpacks no layer again,
// and two images sharing a base share its layer directory.
func TestPullReusesLayers(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, false)
	base := tarLayer(t, map[string]string{"usr/": "", "usr/base": "shared"})
	a := testImage(t, hostArch(), base, tarLayer(t, map[string]string{"a": "a"}))
	b := testImage(t, hostArch(), base, tarLayer(t, map[string]string{"b": "b"}))
	tr.push(t, "a:1", a)
	tr.push(t, "b:1", b)
	s, _ := openStore(t, Options{})
	if _, err := s.Pull(ctx, tr.host+"/a:1", "a", PullOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	ta, _ := s.Resolve(ctx, "a")
	before := inode(t, filepath.Join(ta.Layers[0], "usr/base"))
	tr.blobGets()
	var pl progressLog
	if _, err := s.Pull(ctx, tr.host+"/a:1", "a2", PullOptions{}, pl.add); err != nil {
		t.Fatal(err)
	}
	layerDigests := map[string]bool{}
	ls, _ := a.Layers()
	for _, l := range ls {
		d, _ := l.Digest()
		layerDigests[d.String()] = true
	}
	for _, g := range tr.blobGets() {
		if layerDigests[g] {
			t.Errorf("second pull downloaded layer %s", g)
		}
	}
	if pl.count("cached") != 2 || pl.count("unpacking") != 0 {
		t.Errorf("second pull progress %+v", pl.all)
	}
	if _, err := s.Pull(ctx, tr.host+"/b:1", "b", PullOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	tb, _ := s.Resolve(ctx, "b")
	if ta.Layers[0] != tb.Layers[0] || inode(t, filepath.Join(tb.Layers[0], "usr/base")) != before {
		t.Errorf("base layer not shared: %v vs %v", ta.Layers, tb.Layers)
	}
	if ta.Layers[1] == tb.Layers[1] {
		t.Error("different top layers share a directory")
	}
}

// Concurrent pulls of one image unpack each layer once.
func TestPullConcurrentUnpackOnce(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, false)
	tr.push(t, "c:1", testImage(t, hostArch(), tarLayer(t, map[string]string{"one": "1"}), tarLayer(t, map[string]string{"two": "2"})))
	s, _ := openStore(t, Options{})
	var pl progressLog
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Pull(ctx, tr.host+"/c:1", fmt.Sprintf("c%d", i), PullOptions{}, pl.add)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := pl.count("unpacking"); n != 2 {
		t.Errorf("%d unpacks for 2 layers", n)
	}
}

// AGENTBOX_REGISTRY_AUTH's {"token"} is sent as the bearer token itself;
// a malformed value fails Open clearly.
func TestPullInlineToken(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, true)
	tr.push(t, "tok:1", testImage(t, hostArch(), tarLayer(t, map[string]string{"f": "1"})))
	s, _ := openStore(t, Options{Auth: RegistryAuth{Inline: fmt.Sprintf(`{"http://%s/": {"token": %q}}`, tr.host, testToken)}})
	if _, err := s.Pull(ctx, tr.host+"/tok:1", "tok", PullOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`[1]`, `{"r": {"username": "u"}}`, `{"r": {"token": "t", "auth": "a"}}`} {
		_, err := Open(ctx, t.TempDir(), Options{Auth: RegistryAuth{Inline: bad}})
		wantClass(t, err, sandbox.ClassInvalid)
		if !strings.Contains(err.Error(), "AGENTBOX_REGISTRY_AUTH") {
			t.Errorf("%s: unclear error %v", bad, err)
		}
	}
}
