package volume

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestS3Driver: the s3 driver on a real S3 server (SeaweedFS on
// loopback): files written through one mount are read through another
// (close-to-open), with their bits; directories list and remove; a file
// renames; the size stops a writer with ENOSPC; Remove deletes the
// objects.
func TestS3Driver(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE mounts)")
	}
	srv := testutil.StartS3(t, "unit")
	st := S3Settings{S3VolumesEndpoint: srv.Endpoint, S3VolumesBucket: srv.Bucket, S3VolumesAccessKey: srv.AccessKey,
		S3VolumesSecretKey: srv.SecretKey, S3VolumesRegion: "us-east-1", S3VolumesPathStyle: true, S3VolumesPrefix: "vols/"}
	ctx := context.Background()
	d1, err := NewS3(st, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := NewS3(st, t.TempDir(), nil)
	t.Cleanup(func() { _ = d1.UnmountAll(); _ = d2.UnmountAll() })
	v := Volume{ID: newID(), Name: "t", Kind: KindS3, SizeBytes: 4 << 20}
	if err := d1.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	m1, err := d1.Path(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := d2.Path(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(m1, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m1, "a", "b", "f"), []byte("hello"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(m2, "a", "b", "f"))
	if err != nil || string(data) != "hello" {
		t.Fatalf("read through the second mount: %q %v", data, err)
	}
	// A rewrite and an append, by a shell, read through the other mount.
	if out, err := exec.Command("/bin/sh", "-c", "cd "+filepath.Join(m1, "a", "b")+" && echo second > f && echo more >> f && cat "+filepath.Join(m2, "a", "b", "f")).CombinedOutput(); err != nil || string(out) != "second\nmore\n" {
		t.Fatalf("rewrite and append: %q %v", out, err)
	}
	if err := os.WriteFile(filepath.Join(m1, "a", "b", "f"), []byte("hello"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(m2, "a", "b", "f"))
	if err != nil || fi.Mode().Perm() != 0o755 || fi.Size() != 5 {
		t.Fatalf("stat: %v %v", fi, err)
	}
	if err := os.Rename(filepath.Join(m2, "a", "b", "f"), filepath.Join(m2, "a", "g")); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(m1, "a"))
	if err != nil || len(ents) != 2 || ents[0].Name() != "b" || !ents[0].IsDir() || ents[1].Name() != "g" {
		t.Fatalf("readdir: %v %v", ents, err)
	}
	if err := os.Remove(filepath.Join(m1, "a", "b")); err != nil {
		t.Fatalf("rmdir of an empty directory: %v", err)
	}
	if err := os.Remove(filepath.Join(m1, "a")); err == nil {
		t.Fatal("rmdir of a directory with a file succeeded")
	}
	err = os.WriteFile(filepath.Join(m1, "big"), make([]byte, 5<<20), 0o644)
	if err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("a write past the size: %v", err)
	}
	_ = os.Remove(filepath.Join(m1, "big"))
	u, err := d1.Usage(ctx, v)
	if err != nil || u.UsedBytes != 5 {
		t.Fatalf("usage: %+v %v", u, err)
	}
	if err := d1.Remove(ctx, v); err != nil {
		t.Fatal(err)
	}
	if u, err := d2.Usage(ctx, v); err != nil || u.UsedBytes != 0 {
		t.Fatalf("usage after remove: %+v %v", u, err)
	}
}
