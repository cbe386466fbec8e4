package template

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// twoImages pulls a and b, which share their base layer.
func twoImages(t *testing.T, s *Store) (a, b sandbox.Template) {
	t.Helper()
	ctx := context.Background()
	tr := newRegistry(t, false)
	base := tarLayer(t, map[string]string{"base": "shared"})
	tr.push(t, "a:1", testImage(t, hostArch(), base, tarLayer(t, map[string]string{"a": "a"})))
	tr.push(t, "b:1", testImage(t, hostArch(), base, tarLayer(t, map[string]string{"b": "b"})))
	for _, n := range []string{"a", "b"} {
		if _, err := s.Pull(ctx, tr.host+"/"+n+":1", n, PullOptions{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	a, _ = s.Resolve(ctx, "a")
	b, _ = s.Resolve(ctx, "b")
	return a, b
}

func TestDeleteInUseRefused(t *testing.T) {
	ctx := context.Background()
	var used atomic.Value
	used.Store("")
	s, _ := openStore(t, Options{InUse: func(d string) int {
		if d == used.Load().(string) {
			return 1
		}
		return 0
	}})
	a, _ := twoImages(t, s)
	used.Store(a.Digest)
	wantClass(t, s.Delete(ctx, "a"), sandbox.ClassConflict)
	if _, err := s.Resolve(ctx, "a"); err != nil {
		t.Fatalf("refused delete lost the template: %v", err)
	}
	if info, _ := s.Get(ctx, "a"); info.InUse != 1 {
		t.Errorf("in_use = %d", info.InUse)
	}
	wantClass(t, s.Delete(ctx, "host"), sandbox.ClassConflict)
	wantClass(t, s.Delete(ctx, "nope"), sandbox.ClassNotFound)
	used.Store("")
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Resolve(ctx, "a")
	wantClass(t, err, sandbox.ClassNotFound)
}

// GC (run by Delete) frees the layers only the deleted template used and
// keeps the shared base.
func TestGCFreesUnreferencedOnly(t *testing.T) {
	ctx := context.Background()
	s, dir := openStore(t, Options{})
	a, b := twoImages(t, s)
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if exists(a.Layers[1]) {
		t.Error("a's own layer survived")
	}
	for _, l := range b.Layers {
		if !exists(l) {
			t.Errorf("b's layer %s removed", l)
		}
	}
	if got := readLayered(t, b, "base"); got != "shared" {
		t.Errorf("base = %q", got)
	}
	// Blobs: b's config and two layers (plus its manifest) remain.
	if n := len(entries(t, filepath.Join(dir, "blobs", "sha256"))); n != 4 {
		t.Errorf("%d blobs left, want 4", n)
	}
	if freed, err := s.GC(ctx); err != nil || freed != 0 {
		t.Errorf("second GC freed %d: %v", freed, err)
	}
}

// A layer an operation has pinned (being pulled, not recorded yet)
// survives GC; unpinned, it goes.
func TestGCLeavesPinnedLayers(t *testing.T) {
	ctx := context.Background()
	s, dir := openStore(t, Options{})
	hexd := strings.Repeat("c", 64)
	os.MkdirAll(filepath.Join(dir, "layers", hexd, "root"), 0o755)
	os.WriteFile(filepath.Join(dir, "blobs", "sha256", hexd), []byte("x"), 0o600)
	o := s.newOp()
	o.pin(layerKey(hexd), blobKey(hexd))
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(dir, "layers", hexd)) || !exists(filepath.Join(dir, "blobs", "sha256", hexd)) {
		t.Fatal("GC removed a pinned layer")
	}
	o.done()
	if freed, err := s.GC(ctx); err != nil || freed != 1 {
		t.Fatalf("freed %d: %v", freed, err)
	}
	if exists(filepath.Join(dir, "layers", hexd)) {
		t.Fatal("unpinned layer survived")
	}
}

// A name re-pointed while sandboxes use its old image keeps the old
// layers until no sandbox uses them.
func TestRetiredImageKeptWhileInUse(t *testing.T) {
	ctx := context.Background()
	var used atomic.Value
	used.Store("")
	s, _ := openStore(t, Options{InUse: func(d string) int {
		if d == used.Load().(string) {
			return 1
		}
		return 0
	}})
	tr := newRegistry(t, false)
	tr.push(t, "x:1", testImage(t, hostArch(), tarLayer(t, map[string]string{"v": "old"})))
	if _, err := s.Pull(ctx, tr.host+"/x:1", "x", PullOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	old, _ := s.Resolve(ctx, "x")
	used.Store(old.Digest)
	tr.push(t, "x:1", testImage(t, hostArch(), tarLayer(t, map[string]string{"v": "new"})))
	if _, err := s.Pull(ctx, tr.host+"/x:1", "x", PullOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	s.GC(ctx)
	if !exists(old.Layers[0]) {
		t.Fatal("GC removed the layer of an image a sandbox uses")
	}
	// The retired record survives a restart too.
	s.Close()
	s2, err := Open(ctx, s.dir, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	if !exists(old.Layers[0]) {
		t.Fatal("Open removed the layer of an image a sandbox uses")
	}
	used.Store("")
	if _, err := s2.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(old.Layers[0]) {
		t.Fatal("retired layer survived once unused")
	}
	cur, _ := s2.Resolve(ctx, "x")
	if readLayered(t, cur, "v") != "new" {
		t.Error("current image damaged")
	}
}

// Open clears tmp/ and layers no record references (a crash's leftovers),
// and reloads the records.
func TestOpenCleansLeftovers(t *testing.T) {
	ctx := context.Background()
	s, dir := openStore(t, Options{})
	a, _ := twoImages(t, s)
	os.WriteFile(filepath.Join(dir, "tmp", "half"), []byte("x"), 0o600)
	stray := filepath.Join(dir, "layers", strings.Repeat("d", 64))
	os.MkdirAll(filepath.Join(stray, "root"), 0o755)
	// One process at a time: a second Open waits for the first's Close.
	if _, err := Open(ctx, dir, s.opts); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second Open of an open store: %v", err)
	}
	if !exists(stray) {
		t.Fatal("a refused Open cleaned the store")
	}
	s.Close()
	s2, err := Open(ctx, dir, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	if exists(stray) || len(entries(t, filepath.Join(dir, "tmp"))) != 0 {
		t.Error("leftovers survived Open")
	}
	a2, err := s2.Resolve(ctx, "a")
	if err != nil || a2.Layers[1] != a.Layers[1] || a2.Digest != a.Digest {
		t.Fatalf("reloaded %+v: %v", a2, err)
	}
	// A corrupt records file fails Open loudly and is left for the operator.
	s2.Close()
	os.WriteFile(filepath.Join(dir, "templates.json"), []byte("{"), 0o600)
	if _, err := Open(ctx, dir, s.opts); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt records: %v", err)
	}
	if !exists(a.Layers[0]) {
		t.Error("a failed Open removed layers")
	}
}

func TestNames(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	for _, bad := range []string{"../x", "UPPER", "a/../b", "/abs", "a//b", "a:", "a:-x", "a@sha256:00", "a b", "", "x:" + strings.Repeat("t", 129), strings.Repeat("a", 256), "Reg.io/x"} {
		if _, err := parseRef(bad); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("parseRef(%q) = %v", bad, err)
		}
		_, err := s.Resolve(ctx, bad)
		wantClass(t, err, sandbox.ClassInvalid)
	}
	for in, want := range map[string]string{"base": "base:latest", "python:3.12": "python:3.12", "localhost:5000/a/b:v_1.0": "localhost:5000/a/b:v_1.0", "ghcr.io/org/x-y__z": "ghcr.io/org/x-y__z:latest"} {
		r, err := parseRef(in)
		if err != nil || r.key() != want {
			t.Errorf("parseRef(%q) = %v %v, want %s", in, r.key(), err, want)
		}
	}
	_, err := s.Pull(ctx, "../x", "", PullOptions{}, nil)
	wantClass(t, err, sandbox.ClassInvalid)
	_, err = s.Pull(ctx, "UPPER", "", PullOptions{}, nil)
	wantClass(t, err, sandbox.ClassInvalid)
	_, err = s.Pull(ctx, "127.0.0.1:1/x", "../x", PullOptions{}, nil)
	wantClass(t, err, sandbox.ClassInvalid)
	_, err = s.Import(ctx, t.TempDir(), "UPPER", nil)
	wantClass(t, err, sandbox.ClassInvalid)
	wantClass(t, s.RegisterDir("../x", "/srv"), sandbox.ClassInvalid)
	_, err = s.Commit(ctx, "a/../b", sandbox.Template{Kind: sandbox.TemplateImage}, nil, sandbox.ImageConfig{}, "build")
	wantClass(t, err, sandbox.ClassInvalid)
}

// host is built in; operator directories and stored names never collide.
func TestHostAndDirTemplates(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	h, err := s.Resolve(ctx, "host")
	if err != nil || h.Kind != sandbox.TemplateHost {
		t.Fatalf("host: %+v %v", h, err)
	}
	if err := s.RegisterDir("py", "/srv/rootfs/py"); err != nil {
		t.Fatal(err)
	}
	d, err := s.Resolve(ctx, "py")
	if err != nil || d.Kind != sandbox.TemplateDir || d.Dir != "/srv/rootfs/py" {
		t.Fatalf("dir: %+v %v", d, err)
	}
	list, _ := s.List(ctx)
	if len(list) != 2 || list[0].Name != "host" || list[1].Name != "py" || strings.Contains(fmt.Sprint(list), "/srv") {
		t.Errorf("list %+v", list)
	}
	_, err = s.Commit(ctx, "py", sandbox.Template{Kind: sandbox.TemplateImage}, strings.NewReader(string(tarBytes(t, map[string]string{"f": "1"}))), sandbox.ImageConfig{}, "build")
	wantClass(t, err, sandbox.ClassConflict)
	_, err = s.Commit(ctx, "host:2", sandbox.Template{Kind: sandbox.TemplateImage}, nil, sandbox.ImageConfig{}, "build")
	wantClass(t, err, sandbox.ClassConflict)
	if _, err := s.Commit(ctx, "stored", sandbox.Template{Kind: sandbox.TemplateImage}, nil, sandbox.ImageConfig{}, "build"); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.RegisterDir("stored", "/srv/x"), sandbox.ClassConflict)
	wantClass(t, s.RegisterDir("host", "/srv/x"), sandbox.ClassConflict)
	wantClass(t, s.RegisterDir("rel", "srv/x"), sandbox.ClassInvalid)
	wantClass(t, s.Delete(ctx, "py"), sandbox.ClassConflict)
}

// Commit stacks a diff on a base, sharing the base's layers; host and
// directory bases are refused with a hint.
func TestCommit(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	a, _ := twoImages(t, s)
	cfg := sandbox.ImageConfig{Env: []string{"A=1"}, Cmd: []string{"run"}, Ports: []string{"80/tcp"}}
	info, err := s.Commit(ctx, "snap:1", a, bytes.NewReader(tarBytes(t, map[string]string{"a": "changed", ".wh.base": ""})), cfg, "snapshot of sb-1")
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := s.Resolve(ctx, "snap:1")
	if len(snap.Layers) != 3 || snap.Layers[0] != a.Layers[0] || snap.Layers[1] != a.Layers[1] {
		t.Fatalf("layers %v (base %v)", snap.Layers, a.Layers)
	}
	if readLayered(t, snap, "a") != "changed" || snap.Config.Cmd[0] != "run" || info.Source != "snapshot of sb-1" {
		t.Errorf("snap %+v", snap)
	}
	fi, err := os.Lstat(filepath.Join(snap.Layers[2], "base"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("whiteout not in overlayfs form: %v %v", fi, err)
	}
	// The config blob says what the record says.
	raw, err := s.readBlob(snap.Digest, maxConfigBytes)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil || len(cf.RootFS.DiffIDs) != 3 || cf.Config.Cmd[0] != "run" || len(cf.History) == 0 {
		t.Errorf("config %+v %v", cf, err)
	}
	// Config only, no layer.
	if _, err := s.Commit(ctx, "snap:2", snap, nil, sandbox.ImageConfig{User: "nobody"}, "build"); err != nil {
		t.Fatal(err)
	}
	s2, _ := s.Resolve(ctx, "snap:2")
	if len(s2.Layers) != 3 || s2.Config.User != "nobody" || s2.Digest == snap.Digest {
		t.Errorf("config-only commit %+v", s2)
	}
	// Naming the same layers and config again (an unchanged rebuild)
	// keeps the digest; another config makes a new one.
	again, err := s.Commit(ctx, "snap:2", snap, nil, sandbox.ImageConfig{User: "nobody"}, "build")
	if err != nil || again.Digest != s2.Digest {
		t.Errorf("unchanged re-commit: digest %s, was %s (%v)", again.Digest, s2.Digest, err)
	}
	other, err := s.Commit(ctx, "snap:2", snap, nil, sandbox.ImageConfig{User: "root"}, "build")
	if err != nil || other.Digest == s2.Digest {
		t.Errorf("changed config kept the digest: %s (%v)", other.Digest, err)
	}
	_, err = s.Commit(ctx, "x", sandbox.HostTemplate(), nil, cfg, "build")
	wantClass(t, err, sandbox.ClassInvalid)
	_, err = s.Commit(ctx, "x", sandbox.Template{Kind: sandbox.TemplateDir, Ref: "py", Dir: "/srv"}, nil, cfg, "build")
	wantClass(t, err, sandbox.ClassInvalid)
	_, err = s.Commit(ctx, "x", sandbox.Template{Kind: sandbox.TemplateImage, Digest: "sha256:" + strings.Repeat("0", 64), Layers: []string{"/x"}}, nil, cfg, "build")
	wantClass(t, err, sandbox.ClassNotFound)
	// A hostile diff fails and stores nothing.
	_, err = s.Commit(ctx, "evil", a, bytes.NewReader(tarBytes(t, map[string]string{"../escape": "x"})), cfg, "build")
	wantClass(t, err, sandbox.ClassInvalid)
	if _, err := s.Get(ctx, "evil"); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("hostile commit stored: %v", err)
	}
}

// Hostile registries: too many layers, a huge config, a config that lies
// about a layer's diff id. Each fails clearly and stores nothing.
func TestPullHostile(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, false)
	layerTar := tarBytes(t, map[string]string{"f": "1"})
	cfgFor := func(diff string) []byte {
		b, _ := json.Marshal(map[string]any{"os": "linux", "architecture": hostArch(), "rootfs": map[string]any{"type": "layers", "diff_ids": []string{diff}}})
		return b
	}
	manifest := func(cfg []byte, cfgSize int64, layers []v1.Descriptor) []byte {
		b, _ := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
			Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: sha256Hash(cfg), Size: cfgSize}, Layers: layers})
		return b
	}
	layerDesc := v1.Descriptor{MediaType: types.OCIUncompressedLayer, Digest: sha256Hash(layerTar), Size: int64(len(layerTar))}

	many := make([]v1.Descriptor, 10000)
	for i := range many {
		many[i] = v1.Descriptor{MediaType: types.OCILayer, Size: 1, Digest: sha256Hash([]byte(fmt.Sprint(i)))}
	}
	okCfg := cfgFor(sha256Hash(layerTar).String())
	tr.pushRaw(t, "many:1", [][]byte{okCfg}, manifest(okCfg, int64(len(okCfg)), many), types.OCIManifestSchema1)
	tr.pushRaw(t, "hugecfg:1", [][]byte{okCfg, layerTar}, manifest(okCfg, 1<<40, []v1.Descriptor{layerDesc}), types.OCIManifestSchema1)
	badCfg := cfgFor("sha256:" + strings.Repeat("e", 64))
	tr.pushRaw(t, "baddiff:1", [][]byte{badCfg, layerTar}, manifest(badCfg, int64(len(badCfg)), []v1.Descriptor{layerDesc}), types.OCIManifestSchema1)
	lieCfg := append([]byte(nil), okCfg...)
	tr.pushRaw(t, "liecfg:1", [][]byte{lieCfg, layerTar}, manifest(lieCfg, int64(len(lieCfg)-5), []v1.Descriptor{layerDesc}), types.OCIManifestSchema1)

	s, dir := openStore(t, Options{})
	for _, c := range []struct {
		repo  string
		class sandbox.Class
		says  string
	}{
		{"many:1", sandbox.ClassTooLarge, "10000 layers"},
		{"hugecfg:1", sandbox.ClassTooLarge, "config"},
		{"baddiff:1", sandbox.ClassInvalid, "diff id mismatch"},
		{"liecfg:1", "", ""},
	} {
		_, err := s.Pull(ctx, tr.host+"/"+c.repo, "t", PullOptions{}, nil)
		if err == nil {
			t.Fatalf("%s: stored", c.repo)
		}
		t.Logf("%s: %v", c.repo, err)
		if c.class != "" {
			wantClass(t, err, c.class)
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: unclear error %v", c.repo, err)
		}
	}
	if l, _ := s.List(ctx); len(l) != 1 {
		t.Errorf("stored: %+v", l)
	}
	if n := entries(t, filepath.Join(dir, "layers")); len(n) != 0 {
		t.Errorf("layers left: %v", n)
	}
	if n := entries(t, filepath.Join(dir, "tmp")); len(n) != 0 {
		t.Errorf("tmp left: %v", n)
	}
	s.GC(ctx)
	if n := entries(t, filepath.Join(dir, "blobs", "sha256")); len(n) != 0 {
		t.Errorf("blobs left after GC: %v", n)
	}
}

// A layer over the store's limits is refused.
func TestLayerLimits(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{MaxLayerBytes: 10, MaxLayerEntries: 100})
	_, err := s.Commit(ctx, "big", sandbox.Template{Kind: sandbox.TemplateImage}, bytes.NewReader(tarBytes(t, map[string]string{"f": strings.Repeat("x", 100)})), sandbox.ImageConfig{}, "build")
	wantClass(t, err, sandbox.ClassTooLarge)
	// Trailing garbage after the tar's end is bounded.
	tb := append(tarBytes(t, map[string]string{"f": "1"}), make([]byte, 2<<20)...)
	_, err = s.Commit(ctx, "tail", sandbox.Template{Kind: sandbox.TemplateImage}, io.MultiReader(bytes.NewReader(tb)), sandbox.ImageConfig{}, "build")
	wantClass(t, err, sandbox.ClassInvalid)
}

// A layer an image repeats is given to overlayfs once, at its highest place.
func TestResolveRepeatedLayer(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	scratch := sandbox.Template{Kind: sandbox.TemplateImage}
	empty := tarBytes(t, map[string]string{})
	if _, err := s.Commit(ctx, "e1", scratch, bytes.NewReader(empty), sandbox.ImageConfig{}, "build"); err != nil {
		t.Fatal(err)
	}
	e1, _ := s.Resolve(ctx, "e1")
	if _, err := s.Commit(ctx, "e2", e1, bytes.NewReader(tarBytes(t, map[string]string{"f": "1"})), sandbox.ImageConfig{}, "build"); err != nil {
		t.Fatal(err)
	}
	e2, _ := s.Resolve(ctx, "e2")
	info, err := s.Commit(ctx, "e3", e2, bytes.NewReader(empty), sandbox.ImageConfig{}, "build")
	if err != nil {
		t.Fatal(err)
	}
	e3, _ := s.Resolve(ctx, "e3")
	if len(info.Layers) != 3 || len(e3.Layers) != 2 || e3.Layers[0] != e2.Layers[1] || e3.Layers[1] != e1.Layers[0] {
		t.Errorf("layers %v (record %d)", e3.Layers, len(info.Layers))
	}
}

// GC running while pulls store layers never removes what they store.
func TestGCConcurrentWithPulls(t *testing.T) {
	ctx := context.Background()
	tr := newRegistry(t, false)
	const n = 4
	for i := range n {
		tr.push(t, fmt.Sprintf("p%d:1", i), testImage(t, hostArch(), tarLayer(t, map[string]string{"shared": "s"}), tarLayer(t, map[string]string{"own": fmt.Sprint(i)})))
	}
	s, _ := openStore(t, Options{})
	done := make(chan error, n)
	for i := range n {
		go func() {
			_, err := s.Pull(ctx, fmt.Sprintf("%s/p%d:1", tr.host, i), fmt.Sprintf("p%d", i), PullOptions{}, nil)
			done <- err
		}()
	}
	gcErr := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		defer close(gcErr)
		for range 500 { // bounded; stops as soon as the pulls are done
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.GC(ctx); err != nil {
				gcErr <- err
				return
			}
		}
	}()
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-gcErr; err != nil {
		t.Fatal(err)
	}
	s.GC(ctx)
	for i := range n {
		tmpl, err := s.Resolve(ctx, fmt.Sprintf("p%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if readLayered(t, tmpl, "own") != fmt.Sprint(i) || readLayered(t, tmpl, "shared") != "s" {
			t.Errorf("p%d damaged", i)
		}
	}
}

// The builder's step cache (build-cache/<key>) is stored as templates but
// is no template: List leaves it out (issue 29: `template ls` and the
// console showed every cache entry), Get still finds it.
func TestListHidesBuildCache(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	for _, name := range []string{"build-cache/0123456789abcdef0123456789abcdef", "mine"} {
		if _, err := s.Commit(ctx, name, sandbox.Template{Kind: sandbox.TemplateImage}, nil, sandbox.ImageConfig{}, "build"); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, info := range list {
		names = append(names, info.Name)
	}
	if fmt.Sprint(names) != "[host mine]" {
		t.Errorf("List: %v, want [host mine]", names)
	}
	if _, err := s.Get(ctx, "build-cache/0123456789abcdef0123456789abcdef"); err != nil {
		t.Errorf("Get of a cache entry: %v", err)
	}
}
