package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// dataBytes counts the bytes of path SEEK_DATA finds (unwritten extents
// of a preallocated image are holes to it).
func dataBytes(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	var n, off int64
	for i := 0; off < st.Size() && i < 1<<20; i++ {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		n += hole - data
		off = hole
	}
	return n
}

// TestForkCopiesUsedBlocksOnly: a fork of a sandbox whose disk was filled
// and emptied copies what its filesystem holds, not every block ever
// written to the image (the 128 MiB deleted stay written in the source's
// image), and the files it holds arrive whole.
func TestForkCopiesUsedBlocksOnly(t *testing.T) {
	be := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := context.Background()
	src := sandbox.NewID()
	info, err := be.Create(ctx, sandbox.Spec{ID: src, Template: sandbox.HostTemplate(), Resources: sandbox.Resources{DiskBytes: 512 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Destroy(context.Background(), src)
	bx, err := be.lookup(src)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, n int64) []byte {
		var buf bytes.Buffer
		f, err := os.Create(bx.diskPath("workspace", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := io.CopyN(io.MultiWriter(f, &buf), rand.Reader, n); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		_ = f.Chown(int(bx.rec.HostIDBase)+1000, int(bx.rec.HostIDBase)+1000)
		return buf.Bytes()
	}
	write("big", 128<<20)
	if err := os.Remove(bx.diskPath("workspace", "big")); err != nil {
		t.Fatal(err)
	}
	kept := write("kept", 4<<20)
	unix.Sync()
	if got := dataBytes(t, bx.paths.image); got < 128<<20 {
		t.Fatalf("the source's image holds %d bytes of data: the deleted file's blocks are not written in it, the test shows nothing", got)
	}
	fork := sandbox.NewID()
	fs := info.Spec
	fs.ID = fork
	if _, err := be.Fork(ctx, src, fs); err != nil {
		t.Fatal(err)
	}
	defer be.Destroy(context.Background(), fork)
	fx, err := be.lookup(fork)
	if err != nil {
		t.Fatal(err)
	}
	if got := dataBytes(t, fx.paths.image); got > 64<<20 {
		t.Errorf("the fork's image holds %d bytes of data: the source's free blocks were copied", got)
	}
	got, err := os.ReadFile(fx.diskPath("workspace", "kept"))
	if err != nil || !bytes.Equal(got, kept) {
		t.Fatalf("the fork's copy of a 4 MiB file: %d bytes, equal %v, %v", len(got), bytes.Equal(got, kept), err)
	}
}
