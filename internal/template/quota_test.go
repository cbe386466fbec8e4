package template

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/layer"
	"github.com/agentbox/agentbox/internal/testutil"
)

// randomTar is a layer tar of one file name holding n random bytes.
func randomTar(t *testing.T, name string, n int) []byte {
	t.Helper()
	body := make([]byte, n)
	rand.Read(body)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(n), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// upperTree makes a directory the way a sandbox's overlay upper looks
// (every kind of entry layer.Diff writes) and returns its Diff.
func upperTree(t *testing.T) []byte {
	t.Helper()
	up := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := func(rel string) string { return filepath.Join(up, rel) }
	must(os.MkdirAll(p("srv/app"), 0o755))
	data := make([]byte, 300<<10)
	rand.Read(data)
	must(os.WriteFile(p("srv/app/data"), data, 0o640))
	must(os.Chown(p("srv/app/data"), 1001, 1001))
	must(os.Link(p("srv/app/data"), p("srv/app/hard")))
	must(os.Symlink("data", p("srv/app/link")))
	// Sparse: 16 MiB with 4 KiB of data in the middle.
	f, err := os.Create(p("srv/sparse"))
	must(err)
	_, err = f.WriteAt(data[:4096], 8<<20)
	must(err)
	must(f.Truncate(16 << 20))
	must(f.Close())
	must(os.WriteFile(p("srv/app/attr"), []byte("x"), 0o644))
	must(unix.Setxattr(p("srv/app/attr"), "user.note", []byte("kept"), 0))
	// A whiteout, an opaque directory, a sticky directory and a sticky file.
	must(unix.Mknod(p("gone"), unix.S_IFCHR, 0))
	must(os.Mkdir(p("opq"), 0o755))
	must(unix.Setxattr(p("opq"), "trusted.overlay.opaque", []byte("y"), 0))
	must(os.WriteFile(p("opq/in"), []byte("in"), 0o600))
	must(os.Mkdir(p("shared"), 0o755))
	must(os.Chmod(p("shared"), 0o1777))
	must(os.WriteFile(p("stickyfile"), []byte("s"), 0o644))
	must(os.Chmod(p("stickyfile"), 0o1644))
	var buf bytes.Buffer
	must(layer.Diff(context.Background(), up, &buf, layer.DiffOptions{}))
	return buf.Bytes()
}

// TestSecuritySnapshotOneCopy: a snapshot's layer is stored once (the
// unpacked tree sandboxes mount, no compressed blob beside it), and an
// export still has it: the blob written again from the tree is the very
// tar the snapshot stored (its diff id), for every kind of entry.
func TestSecuritySnapshotOneCopy(t *testing.T) {
	ctx := context.Background()
	s, dir := openStore(t, Options{})
	a, _ := twoImages(t, s)
	diff := upperTree(t)
	blobsBefore := entries(t, filepath.Join(dir, "blobs", "sha256"))
	info, err := s.CommitWith(ctx, PrivateName("alice", "snap"), a, bytes.NewReader(diff), a.Config, "snapshot of sb-1", CommitOptions{NoBlob: true})
	if err != nil {
		t.Fatal(err)
	}
	top := info.Layers[len(info.Layers)-1]
	if top.DiffID != digestOf(diff) {
		t.Fatalf("layer %s, the tar is %s", top.DiffID, digestOf(diff))
	}
	// One new blob only: the image config. Nothing of the layer's content.
	if added := len(entries(t, filepath.Join(dir, "blobs", "sha256"))) - len(blobsBefore); added != 1 {
		t.Errorf("the snapshot added %d blobs, want 1 (its config only)", added)
	}
	if !exists(s.layerRoot(hexOf(top.DiffID))) {
		t.Fatal("the snapshot's layer is not unpacked")
	}

	for _, format := range []string{"docker", "oci"} {
		var out bytes.Buffer
		if err := s.Export(ctx, PrivateName("alice", "snap"), format, &out); err != nil {
			t.Fatalf("export %s: %v", format, err)
		}
		if left := entries(t, s.tmpDir()); len(left) != 0 {
			t.Errorf("export %s left %v in tmp/", format, left)
		}
		if format != "docker" {
			continue
		}
		img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out.Bytes())), nil }, nil)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != len(info.Layers) {
			t.Fatalf("exported layers: %d %v", len(layers), err)
		}
		rc, err := layers[len(layers)-1].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, diff) {
			t.Errorf("the exported layer (%d bytes, %s) is not the snapshot's tar (%d bytes, %s)", len(got), digestOf(got), len(diff), digestOf(diff))
		}
		if cd, _ := img.ConfigName(); cd.String() != info.Digest {
			t.Errorf("exported config %s, the template is %s", cd, info.Digest)
		}
	}
	// GC leaves a layer without a blob alone, and a delete frees it.
	if _, err := s.GC(ctx); err != nil || !exists(s.layerRoot(hexOf(top.DiffID))) {
		t.Fatalf("GC took the snapshot's layer: %v", err)
	}
	if err := s.Delete(ctx, PrivateName("alice", "snap")); err != nil {
		t.Fatal(err)
	}
	if exists(s.layerDir(hexOf(top.DiffID))) {
		t.Error("the deleted snapshot's layer is still stored")
	}
}

func digestOf(b []byte) string {
	h, _, _ := v1.SHA256(bytes.NewReader(b))
	return h.String()
}

// TestSecurityPrivateUsage: what a user's private templates are charged,
// so that shared layers neither charge a tenant for another's data (the
// operator's base image) nor let one escape its charge.
func TestSecurityPrivateUsage(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, Options{})
	a, _ := twoImages(t, s)
	commit := func(owner, name string, base sandbox.Template, tarball []byte) (Info, int64) {
		t.Helper()
		var charged int64
		info, err := s.CommitWith(ctx, PrivateName(owner, name), base, bytes.NewReader(tarball), base.Config, "snapshot",
			CommitOptions{NoBlob: true, Charge: func(n int64) error { charged += n; return nil }})
		if err != nil {
			t.Fatal(err)
		}
		return info, charged
	}
	if u := s.PrivateUsage("alice"); u.Bytes != 0 || len(u.Templates) != 0 {
		t.Fatalf("empty namespace: %+v", u)
	}
	x, y := randomTar(t, "x", 1<<20), randomTar(t, "y", 2<<20)
	ai, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	s1, cx := commit("alice", "s1", a, x)
	// Charged at least the tar's length.
	if cx < int64(len(x)) || s1.Size != ai.Size+1<<20 {
		t.Fatalf("charge %d for a tar of %d bytes (size %d)", cx, len(x), s1.Size)
	}
	u := s.PrivateUsage("alice")
	if u.Bytes != cx || !slices.Equal(u.Templates, []string{PrivateName("alice", "s1") + ":latest"}) {
		t.Fatalf("after s1: %+v, want %d bytes (the base image's layers are not hers)", u, cx)
	}
	// On top of her own snapshot: s1's layer counts once for both.
	base, err := s.Resolve(ctx, PrivateName("alice", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	_, cy := commit("alice", "s2", base, y)
	if got := s.PrivateUsage("alice").Bytes; got != cx+cy {
		t.Errorf("after s2 on s1: %d bytes, want %d", got, cx+cy)
	}
	// The same content again (another name): stored once, counted once.
	commit("alice", "s3", a, x)
	if got := s.PrivateUsage("alice"); got.Bytes != cx+cy || len(got.Templates) != 3 {
		t.Errorf("after s3 (= s1's layer): %+v, want %d bytes", got, cx+cy)
	}
	// Bob makes the same layer: each of them alone keeps it, each pays.
	commit("bob", "b1", a, x)
	if got := s.PrivateUsage("bob").Bytes; got != cx {
		t.Errorf("bob: %d bytes, want %d", got, cx)
	}
	if got := s.PrivateUsage("alice").Bytes; got != cx+cy {
		t.Errorf("alice after bob's snapshot: %d, want %d", got, cx+cy)
	}
	// Deleting frees: s1 and s3 gone, s2 still holds s1's layer (its base).
	for _, n := range []string{"s1", "s3"} {
		if err := s.Delete(ctx, PrivateName("alice", n)); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.PrivateUsage("alice").Bytes; got != cx+cy {
		t.Errorf("s2 keeps s1's layer: %d, want %d", got, cx+cy)
	}
	if err := s.Delete(ctx, PrivateName("alice", "s2")); err != nil {
		t.Fatal(err)
	}
	if got := s.PrivateUsage("alice"); got.Bytes != 0 || len(got.Templates) != 0 {
		t.Errorf("after deleting everything: %+v", got)
	}
	if got := s.PrivateUsage("bob").Bytes; got != cx {
		t.Errorf("bob after alice's deletes: %d, want %d", got, cx)
	}
}

// TestSecuritySnapshotChargeStops: a charge that refuses stops the layer
// while it streams (having read about as much as it allowed) and the
// commit stores nothing.
func TestSecuritySnapshotChargeStops(t *testing.T) {
	ctx := context.Background()
	s, dir := openStore(t, Options{})
	a, _ := twoImages(t, s)
	layersBefore := entries(t, filepath.Join(dir, "layers"))
	refusal := sandbox.Errorf(sandbox.ClassQuota, "over quota")
	var charged int64
	src := &countingReader{r: bytes.NewReader(randomTar(t, "big", 16<<20))}
	_, err := s.CommitWith(ctx, PrivateName("alice", "big"), a, src, a.Config, "snapshot", CommitOptions{NoBlob: true, Charge: func(n int64) error {
		if charged += n; charged > 2<<20 {
			return refusal
		}
		return nil
	}})
	if !errors.Is(err, refusal) {
		t.Fatalf("commit past its charge: %v, want the charge's refusal", err)
	}
	if src.n > 4<<20 {
		t.Errorf("read %d bytes of the layer after the charge refused at 2 MiB", src.n)
	}
	checkNothingStored(t, s, dir, layersBefore, PrivateName("alice", "big"))
}

// TestSecuritySnapshotDiskReserve: with less than the reserve free on the
// store's filesystem a commit is refused before it reads anything, and a
// layer that would take the free space below it stops midway; neither
// stores anything.
func TestSecuritySnapshotDiskReserve(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	// A filesystem of the test's own, whose free space only this test uses.
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	s, err := Open(ctx, dir, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base, err := s.Commit(ctx, "base", sandbox.Template{Kind: sandbox.TemplateImage}, bytes.NewReader(tarBytes(t, map[string]string{"etc/os": "test"})), sandbox.ImageConfig{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	bt, err := s.Resolve(ctx, base.Name)
	if err != nil {
		t.Fatal(err)
	}
	layersBefore := entries(t, filepath.Join(dir, "layers"))
	free, err := s.FreeBytes()
	if err != nil {
		t.Fatal(err)
	}

	src := &countingReader{r: bytes.NewReader(randomTar(t, "f", 1<<20))}
	_, err = s.CommitWith(ctx, "full", bt, src, bt.Config, "snapshot", CommitOptions{NoBlob: true, Reserve: free})
	wantClass(t, err, sandbox.ClassNoSpace)
	if src.n != 0 {
		t.Errorf("a commit refused for space read %d bytes of its layer", src.n)
	}

	// 12 MiB of room above the reserve; the layer is 32 MiB.
	src = &countingReader{r: bytes.NewReader(randomTar(t, "f", 32<<20))}
	_, err = s.CommitWith(ctx, "big", bt, src, bt.Config, "snapshot", CommitOptions{NoBlob: true, Reserve: free - 12<<20})
	wantClass(t, err, sandbox.ClassNoSpace)
	if src.n >= 32<<20 {
		t.Errorf("the commit read the whole layer (%d bytes) past the reserve", src.n)
	}
	checkNothingStored(t, s, dir, layersBefore, "big")
	if now, _ := s.FreeBytes(); now < free-1<<20 {
		t.Errorf("free space %d after the refused commit, %d before", now, free)
	}
	// Room enough: the same commit goes through.
	if _, err := s.CommitWith(ctx, "fits", bt, bytes.NewReader(randomTar(t, "f", 4<<20)), bt.Config, "snapshot", CommitOptions{NoBlob: true, Reserve: free - 12<<20}); err != nil {
		t.Fatalf("a layer within the free space: %v", err)
	}
}

// checkNothingStored: no template name, no new layer, nothing left in tmp/.
func checkNothingStored(t *testing.T, s *Store, dir string, layersBefore []string, name string) {
	t.Helper()
	if _, err := s.Get(context.Background(), name); !sandbox.IsNotFound(err) {
		t.Errorf("template %s after a refused commit: %v", name, err)
	}
	if got := entries(t, filepath.Join(dir, "layers")); !slices.Equal(got, layersBefore) {
		t.Errorf("layers %v after a refused commit, %v before", got, layersBefore)
	}
	if left := entries(t, s.tmpDir()); len(left) != 0 {
		t.Errorf("a refused commit left %v in tmp/", left)
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
