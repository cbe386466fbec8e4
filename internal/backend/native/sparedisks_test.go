package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// usedDisk makes a fully allocated image of size bytes whose every byte is
// random: a disk some sandbox filled.
func usedDisk(t *testing.T, path string, size int64) {
	t.Helper()
	buf := make([]byte, size)
	if _, err := rand.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Fatal(err)
	}
}

// needZeroRange skips when dir's filesystem cannot zero a range in place.
func needZeroRange(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "probe")
	usedDisk(t, p, 1<<16)
	defer os.Remove(p)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 0, 1<<16); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("the filesystem of %s has no FALLOC_FL_ZERO_RANGE: no spare disks there", dir)
	}
}

// TestSpareDisks: a used disk kept as a spare reads as zeroes with every
// block still allocated, a create that takes it gets the template's
// content byte for byte, and the spares are bounded in count and bytes.
func TestSpareDisks(t *testing.T) {
	dir := t.TempDir()
	needZeroRange(t, dir)
	const size = 4 << 20
	// A template with data at both ends and a hole between.
	tmpl := filepath.Join(dir, "template.img")
	f, err := os.Create(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	head, tail := bytes.Repeat([]byte("superblock"), 1000), bytes.Repeat([]byte("journal"), 600)
	if _, err := f.WriteAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(tail, size-int64(len(tail))); err != nil {
		t.Fatal(err)
	}
	f.Close()

	old := filepath.Join(dir, "spares")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	usedDisk(t, filepath.Join(old, "left-by-an-earlier-process.img"), size)
	s, err := newSpareDisks(old)
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(old); len(left) != 0 {
		t.Fatalf("an earlier process's spares were kept: %v", left)
	}

	used := filepath.Join(dir, "sandbox.img")
	usedDisk(t, used, size)
	if !s.put(used, size) {
		t.Fatal("a fully allocated used disk was not kept")
	}
	if _, err := os.Stat(used); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the kept disk is still in place: %v", err)
	}
	if s.held() != size {
		t.Fatalf("spares hold %d bytes, want %d", s.held(), size)
	}
	dst := filepath.Join(dir, "next.img")
	if !s.take(size, dst) {
		t.Fatal("no spare to take")
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, size)) {
		t.Fatal("a spare disk still has some of its earlier sandbox's data")
	}
	var st unix.Stat_t
	if err := unix.Stat(dst, &st); err != nil || st.Blocks*512 < size {
		t.Fatalf("a spare disk lost blocks: %d of %d bytes allocated (%v)", st.Blocks*512, size, err)
	}
	if err := copyTemplateInto(tmpl, dst); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(tmpl)
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, want) {
		t.Fatal("a disk made from a spare differs from the template")
	}
	if s.take(size, filepath.Join(dir, "none.img")) || s.held() != 0 {
		t.Fatalf("a spare was taken twice (holding %d)", s.held())
	}
	if s.take(size, dst) {
		t.Fatal("take replaced an existing file")
	}

	// Bounded: maxSpareDisks at most, then the caller removes the disk.
	for i := range maxSpareDisks + 1 {
		p := filepath.Join(dir, "d.img")
		usedDisk(t, p, size)
		kept := s.put(p, size)
		if kept != (i < maxSpareDisks) {
			t.Fatalf("disk %d: kept %v with %d spares", i, kept, i)
		}
		if !kept {
			os.Remove(p)
		}
	}
	// And in bytes: nothing past the limit.
	s.limit = s.held()
	if s.take(size, filepath.Join(dir, "t.img")); s.held() != s.limit-size {
		t.Fatal("take did not give back a spare's bytes")
	}
	s.limit = s.held()
	p := filepath.Join(dir, "over.img")
	usedDisk(t, p, size)
	if s.put(p, size) {
		t.Fatal("a spare past the byte limit was kept")
	}
	// Sparse or differently sized disks save nothing: not kept.
	sparse := filepath.Join(dir, "sparse.img")
	if err := os.WriteFile(sparse, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, size); err != nil {
		t.Fatal(err)
	}
	s.limit = 1 << 40
	if s.put(sparse, size) || s.put(p, 2*size) {
		t.Fatal("a sparse or wrongly sized disk was kept")
	}
	// Close's clear: no spare outlives the backend.
	s.clear()
	if left, _ := os.ReadDir(old); len(left) != 0 || s.held() != 0 {
		t.Fatalf("spares left after clear: %v (%d bytes)", left, s.held())
	}
}

// TestSpareDiskCarriesNothingOver: a sandbox whose disk is a destroyed
// sandbox's, kept as a spare, sees none of its files, and not a byte of
// what it wrote is left anywhere in the image, raw: the disk is reused
// (same inode) only as zeroes plus a fresh template.
func TestSpareDiskCarriesNothingOver(t *testing.T) {
	dir := testutil.ShortTempDir(t)
	be := newTestBackend(t, dir)
	if be.spares == nil {
		t.Skip("no spare disks on this backend (rootless or overcommitted)")
	}
	needZeroRange(t, be.diskRoot)
	ctx := context.Background()
	spec := func() sandbox.Spec {
		return sandbox.Spec{ID: sandbox.NewID(), Template: sandbox.HostTemplate(), Resources: sandbox.Resources{
			MemoryBytes: 256 << 20, CPUs: 1, PIDs: 64, DiskBytes: 256 << 20}}
	}
	run := func(info sandbox.Info, script string) backendtest.Result {
		t.Helper()
		c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
		res, err := backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	const marker = "tenant-one-secret-7f3a9c"
	first, err := be.Create(ctx, spec())
	if err != nil {
		t.Fatal(err)
	}
	// 8 MiB of the marker, on disk (synced), then deleted: its blocks stay
	// on the image as a freed file's do.
	if res := run(first, "yes "+marker+" | head -c 8388608 > /workspace/secret && sync && rm /workspace/secret && sync"); res.Exit.ExitCode != 0 {
		t.Fatalf("first sandbox: %+v", res)
	}
	firstImage := newBoxPaths(be.sbRoot, be.diskRoot, first.ID).image
	var st unix.Stat_t
	if err := unix.Stat(firstImage, &st); err != nil {
		t.Fatal(err)
	}
	ino := st.Ino
	// The check below could not fail were the marker not there to find.
	if raw, err := os.ReadFile(firstImage); err != nil || !bytes.Contains(raw, []byte(marker)) {
		t.Fatalf("the first sandbox's deleted file is not in its raw image (%v): the test proves nothing", err)
	}
	if err := be.Destroy(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if be.spares.held() == 0 {
		t.Fatal("the destroyed sandbox's disk was not kept as a spare")
	}

	second, err := be.Create(ctx, spec())
	if err != nil {
		t.Fatal(err)
	}
	defer be.Destroy(ctx, second.ID)
	image := newBoxPaths(be.sbRoot, be.diskRoot, second.ID).image
	if err := unix.Stat(image, &st); err != nil || st.Ino != ino {
		t.Fatalf("the second sandbox's disk is not the spare (inode %d, want %d): %v", st.Ino, ino, err)
	}
	if res := run(second, "ls -A /workspace; df -k /workspace | tail -1"); res.Exit.ExitCode != 0 || strings.Contains(res.Stdout, "secret") {
		t.Fatalf("second sandbox sees the first's files: %+v", res)
	}
	raw, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(marker)) {
		t.Fatal("the first sandbox's data is still in the reused disk image")
	}
}

// BenchmarkSpareDisks: a create and destroy of a sandbox with a 1 GiB
// disk, one after another, with the destroyed disks kept as spares and
// without (each disk allocated at create, freed, discarded where the
// filesystem is mounted with discard, at destroy). It reports the two
// disk steps' wall time per cycle.
func BenchmarkSpareDisks(b *testing.B) {
	for _, spares := range []bool{false, true} {
		name := "spares=off"
		if spares {
			name = "spares=on"
		}
		b.Run(name, func(b *testing.B) {
			be := newTestBackend(b, testutil.ShortTempDir(b))
			if !spares {
				be.spares = nil
			}
			var copyNs, removeNs atomic.Int64
			SetPhaseHook(func(s PhaseSample) {
				switch s.Phase {
				case "disk: sparse copy of the ext4 template":
					copyNs.Add(s.Wall.Nanoseconds())
				case "remove sandbox dir + disk image":
					removeNs.Add(s.Wall.Nanoseconds())
				}
			})
			defer SetPhaseHook(nil)
			ctx := context.Background()
			spec := sandbox.Spec{Template: sandbox.HostTemplate(), Resources: sandbox.Resources{DiskBytes: 1 << 30}}
			b.ResetTimer()
			for range b.N {
				spec.ID = sandbox.NewID()
				if _, err := be.Create(ctx, spec); err != nil {
					b.Fatal(err)
				}
				if err := be.Destroy(ctx, spec.ID); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(copyNs.Load())/float64(b.N)/1e6, "disk-copy-ms/op")
			b.ReportMetric(float64(removeNs.Load())/float64(b.N)/1e6, "disk-remove-ms/op")
		})
	}
}
