package template

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Seed's copy (made with GNU tar as scripts/image.sh makes it) is a store
// holding the named templates alone, whole: their files, whiteouts and
// configs, exportable (the layer blobs it left out written again), with
// no blob of a layer and nothing of the templates not named.
func TestSeed(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("needs GNU tar")
	}
	ctx := context.Background()
	s, dir := openStore(t, Options{})
	a, _ := twoImages(t, s)
	if _, err := s.Commit(ctx, "snap:1", a, bytes.NewReader(tarBytes(t, map[string]string{"a": "changed", ".wh.base": ""})), sandbox.ImageConfig{Cmd: []string{"run"}}, "build"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Seed(ctx, "snap:1", "nothere"); err == nil {
		t.Fatal("a seed of a template not stored: no error")
	}
	records, paths, err := s.Seed(ctx, "snap:1", "b", "b:latest")
	if err != nil {
		t.Fatal(err)
	}
	// The shared base layer once, a's (snap:1 is on it), snap's and b's,
	// and the two configs; a's record does not go. Of the 3 pulled
	// layers' blobs, those whose trees give their tars again stay behind.
	var layers, blobs int
	for _, p := range paths {
		if filepath.Dir(p) == "layers" {
			layers++
		} else {
			blobs++
		}
	}
	if layers != 4 || blobs < 2 || blobs >= 5 {
		t.Errorf("paths %v: %d layers, %d blobs, want 4 layers, 2 configs and fewer than the 3 pulled layers' blobs", paths, layers, blobs)
	}

	seed := t.TempDir()
	if err := os.WriteFile(filepath.Join(seed, "templates.json"), records, 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--xattrs", "--xattrs-include=*", "-C", dir, "-cf", "-"}, paths...)
	pack := exec.Command("tar", args...)
	unpack := exec.Command("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-C", seed, "-xpf", "-")
	pipe, err := pack.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	unpack.Stdin = pipe
	if err := pack.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := unpack.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	if err := pack.Wait(); err != nil {
		t.Fatal(err)
	}

	c, err := Open(ctx, seed, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	snap, err := c.Resolve(ctx, "snap:1")
	if err != nil {
		t.Fatal(err)
	}
	if readLayered(t, snap, "a") != "changed" || snap.Config.Cmd[0] != "run" {
		t.Errorf("seeded snap:1 %+v", snap)
	}
	if fi, err := os.Lstat(filepath.Join(snap.Layers[2], "base")); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("seeded whiteout: %v %v", fi, err)
	}
	if b, err := c.Resolve(ctx, "b"); err != nil || readLayered(t, b, "b") != "b" {
		t.Errorf("seeded b: %+v %v", b, err)
	}
	if _, err := c.Resolve(ctx, "a"); err == nil {
		t.Error("a, not named, is in the seed")
	}
	seeded, _ := os.ReadDir(filepath.Join(seed, "blobs", "sha256"))
	if len(seeded) != blobs {
		t.Errorf("seed blobs %d, want %d", len(seeded), blobs)
	}
	// What exports from the store exports from the seed (snap:1's layer,
	// committed from a tar not written by layer.Diff, exports from neither).
	for _, n := range []string{"b", "snap:1"} {
		want := s.Export(ctx, n, "oci", io.Discard)
		if got := c.Export(ctx, n, "oci", io.Discard); (got == nil) != (want == nil) {
			t.Errorf("export of %s: from the seed %v, from the store %v", n, got, want)
		}
	}
}
