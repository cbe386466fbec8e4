package template

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// dockerEngine skips when no Docker engine answers (the test set-up starts
// one with scripts/start-docker.sh).
func dockerEngine(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker CLI: the docker save import needs the real engine (scripts/start-docker.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (start one with scripts/start-docker.sh): %v: %.200s", err, out)
	}
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// A `docker save` tarball made by the real Docker engine imports with its
// tag, files and config; the template exported again loads into Docker.
func TestImportDockerSave(t *testing.T) {
	dockerEngine(t)
	ctx := context.Background()
	dir := t.TempDir()
	tag := fmt.Sprintf("agentbox-storetest:%d", os.Getpid())
	rootfs := filepath.Join(dir, "rootfs.tar")
	os.WriteFile(rootfs, tarBytes(t, map[string]string{"hello.txt": "from docker", "etc/": "", "etc/os-release": "ID=test"}), 0o644)
	docker(t, "import", "--change", "ENV GREETING=hello", "--change", `CMD ["/hello"]`, "--change", "WORKDIR /work", rootfs, tag)
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	saved := filepath.Join(dir, "saved.tar")
	docker(t, "save", "-o", saved, tag)

	s, _ := openStore(t, Options{})
	info, err := s.Import(ctx, saved, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Split(tag, ":"); info.Name != want[0] || info.Tag != want[1] || !strings.HasPrefix(info.Source, "docker-archive:") {
		t.Errorf("info %+v", info)
	}
	id := docker(t, "image", "inspect", "-f", "{{.Id}}", tag)
	if info.Digest != id {
		t.Errorf("digest %s, docker's image id %s", info.Digest, id)
	}
	tmpl, err := s.Resolve(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if readLayered(t, tmpl, "hello.txt") != "from docker" || tmpl.Config.WorkingDir != "/work" || tmpl.Config.Cmd[0] != "/hello" || !strings.Contains(strings.Join(tmpl.Config.Env, " "), "GREETING=hello") {
		t.Errorf("template %+v", tmpl)
	}

	// Export in docker format; `docker load` takes it back.
	var buf bytes.Buffer
	if err := s.Export(ctx, tag, "docker", &buf); err != nil {
		t.Fatal(err)
	}
	docker(t, "rmi", "-f", tag)
	exported := filepath.Join(dir, "exported.tar")
	os.WriteFile(exported, buf.Bytes(), 0o644)
	out := docker(t, "load", "-i", exported)
	if !strings.Contains(out, tag) {
		t.Errorf("docker load: %s", out)
	}
	if id2 := docker(t, "image", "inspect", "-f", "{{.Id}}", tag); id2 != id {
		t.Errorf("reloaded image id %s, want %s", id2, id)
	}
}

// An OCI layout written by go-containerregistry imports.
func TestImportOCILayout(t *testing.T) {
	ctx := context.Background()
	img := testImage(t, hostArch(), tarLayer(t, map[string]string{"oci": "layout"}))
	dir := filepath.Join(t.TempDir(), "layout")
	if _, err := layout.Write(dir, mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img})); err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, Options{})
	_, err := s.Import(ctx, dir, "", nil)
	wantClass(t, err, sandbox.ClassInvalid) // no name in the layout, none given
	info, err := s.Import(ctx, dir, "oci:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	cd, _ := img.ConfigName()
	if info.Digest != cd.String() || info.Source != "oci-layout:layout" {
		t.Errorf("info %+v", info)
	}
	tmpl, _ := s.Resolve(ctx, "oci:1")
	if readLayered(t, tmpl, "oci") != "layout" {
		t.Error("content")
	}
	// A tampered blob is refused.
	ls, _ := img.Layers()
	d, _ := ls[0].Digest()
	os.WriteFile(filepath.Join(dir, "blobs", "sha256", d.Hex), []byte("tampered"), 0o644)
	s2, _ := openStore(t, Options{})
	_, err = s2.Import(ctx, dir, "oci:2", nil)
	wantClass(t, err, sandbox.ClassInvalid)
}

// A root filesystem directory becomes one layer: owners, modes, symlinks
// (never followed, even pointing out), hard links; fifos are left out.
func TestImportRootfsDir(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("host secret"), 0o600)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "usr/bin/tool"), []byte("#!/bin/sh\n"), 0o755)
	os.Chown(filepath.Join(dir, "usr/bin/tool"), 1000, 1001)
	os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool2"))
	os.Symlink(outside, filepath.Join(dir, "abs-link"))
	os.Symlink("../../../../secret", filepath.Join(dir, "usr/rel-link"))
	syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	info, err := s.Import(ctx, dir, "fromdir", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Layers) != 1 || !strings.HasPrefix(info.Source, "rootfs-dir:") {
		t.Errorf("info %+v", info)
	}
	tmpl, _ := s.Resolve(ctx, "fromdir")
	root := tmpl.Layers[0]
	fi, err := os.Lstat(filepath.Join(root, "usr/bin/tool"))
	if err != nil || fi.Mode().Perm() != 0o755 || fi.Sys().(*syscall.Stat_t).Uid != 1000 || fi.Sys().(*syscall.Stat_t).Gid != 1001 {
		t.Errorf("tool: %v %v", fi, err)
	}
	if inode(t, filepath.Join(root, "usr/bin/tool")) != inode(t, filepath.Join(root, "usr/bin/tool2")) {
		t.Error("hard link not kept")
	}
	if l, err := os.Readlink(filepath.Join(root, "abs-link")); err != nil || l != outside {
		t.Errorf("abs-link: %q %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "fifo")); err == nil {
		t.Error("fifo imported")
	}
	_, err = s.Import(ctx, dir, "", nil)
	wantClass(t, err, sandbox.ClassInvalid)
}

// Root filesystem tarballs, plain, gzip and zstd, become one layer each.
func TestImportRootfsTarball(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	raw := tarBytes(t, map[string]string{"bin/": "", "bin/sh": "shell", "etc/": "", "etc/hostname": "box"})
	var gz, zs bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(raw)
	gw.Close()
	zw, _ := zstd.NewWriter(&zs)
	zw.Write(raw)
	zw.Close()
	dir := t.TempDir()
	var digests []string
	for n, b := range map[string][]byte{"plain.tar": raw, "rootfs.tar.gz": gz.Bytes(), "rootfs.tar.zst": zs.Bytes()} {
		p := filepath.Join(dir, n)
		os.WriteFile(p, b, 0o644)
		tn := "tar-" + strings.ReplaceAll(n, ".", "-")
		info, err := s.Import(ctx, p, tn, nil)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		tmpl, _ := s.Resolve(ctx, tn)
		if readLayered(t, tmpl, "etc/hostname") != "box" || len(tmpl.Layers) != 1 {
			t.Errorf("%s: %+v", n, tmpl)
		}
		digests = append(digests, info.Layers[0].DiffID)
	}
	if digests[0] != digests[1] || digests[1] != digests[2] {
		t.Errorf("one content, several diff ids: %v", digests)
	}
	if n := len(entries(t, filepath.Join(s.dir, "layers"))); n != 1 {
		t.Errorf("%d layer dirs for one content", n)
	}
	// Importing the same content under the same name again (make
	// templates bootstraps every time) keeps the digest, so builds FROM it
	// keep their cache keys; other content under the name changes it.
	p := filepath.Join(dir, "plain.tar")
	first, _ := s.Get(ctx, "tar-plain-tar")
	again, err := s.Import(ctx, p, "tar-plain-tar", nil)
	if err != nil || again.Digest != first.Digest || !again.Created.Equal(first.Created) {
		t.Errorf("re-import of the same tarball: %s at %s, was %s at %s (%v)", again.Digest, again.Created, first.Digest, first.Created, err)
	}
	os.WriteFile(p, tarBytes(t, map[string]string{"etc/": "", "etc/hostname": "other"}), 0o644)
	if changed, err := s.Import(ctx, p, "tar-plain-tar", nil); err != nil || changed.Digest == first.Digest {
		t.Errorf("re-import of other content kept the digest %s (%v)", changed.Digest, err)
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a tar at all, clearly"), 0o644)
	_, err = s.Import(ctx, junk, "junk", nil)
	wantClass(t, err, sandbox.ClassInvalid)
	_, err = s.Import(ctx, filepath.Join(dir, "missing"), "m", nil)
	wantClass(t, err, sandbox.ClassNotFound)
}

// Export then import, in both formats, gives back the same image.
func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	a, _ := twoImages(t, s)
	snapInfo, err := s.Commit(ctx, "snap", a, bytes.NewReader(tarBytes(t, map[string]string{"new": "file"})), sandbox.ImageConfig{Cmd: []string{"x"}}, "snapshot")
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"docker", "oci"} {
		var buf bytes.Buffer
		if err := s.Export(ctx, "snap", format, &buf); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		p := filepath.Join(t.TempDir(), "snap-"+format+".tar")
		os.WriteFile(p, buf.Bytes(), 0o644)
		s2, _ := openStore(t, Options{})
		info, err := s2.Import(ctx, p, "", nil)
		if err != nil {
			t.Fatalf("%s: import: %v", format, err)
		}
		if info.Name != "snap" || info.Digest != snapInfo.Digest || len(info.Layers) != 3 {
			t.Errorf("%s: %+v, want digest %s", format, info, snapInfo.Digest)
		}
		tmpl, _ := s2.Resolve(ctx, "snap")
		if readLayered(t, tmpl, "new") != "file" || readLayered(t, tmpl, "base") != "shared" || tmpl.Config.Cmd[0] != "x" {
			t.Errorf("%s: content", format)
		}
	}
	err = s.Export(ctx, "snap", "zip", &bytes.Buffer{})
	wantClass(t, err, sandbox.ClassInvalid)
	err = s.Export(ctx, "host", "oci", &bytes.Buffer{})
	wantClass(t, err, sandbox.ClassInvalid)
}
