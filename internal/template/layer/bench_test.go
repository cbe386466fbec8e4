package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// benchLayer is a ~200 MB synthetic layer shaped like a real one: 100
// directories, 10,000 small files (5 KiB) and 150 large ones (1 MiB), all
// random (no zero blocks to skip).
func benchLayer(b *testing.B) []byte {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	blob := make([]byte, 1<<20+5<<10)
	for i := range blob {
		blob[i] = byte(rng.Uint32()) | 1
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(h *tar.Header, body []byte) {
		h.ModTime, h.Format = testTime, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			b.Fatal(err)
		}
	}
	for d := range 100 {
		dir := fmt.Sprintf("usr/lib/pkg%03d", d)
		write(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
		for f := range 100 {
			body := blob[f*37 : f*37+5<<10]
			write(&tar.Header{Name: fmt.Sprintf("%s/file%03d.py", dir, f), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body)
		}
	}
	for f := range 150 {
		body := blob[f : f+1<<20]
		write(&tar.Header{Name: fmt.Sprintf("opt/big%03d.so", f), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))}, body)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// go test -run XXX -bench Unpack ./internal/template/layer (MB/s is of the tar).
func BenchmarkUnpack(b *testing.B) {
	requireRoot(b)
	data := benchLayer(b)
	tmp := b.TempDir()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := range b.N {
		dst := filepath.Join(tmp, fmt.Sprint(i))
		if err := os.Mkdir(dst, 0o755); err != nil {
			b.Fatal(err)
		}
		if _, err := Unpack(context.Background(), bytes.NewReader(data), dst, Options{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}

func BenchmarkDiff(b *testing.B) {
	requireRoot(b)
	data := benchLayer(b)
	dst := b.TempDir()
	if _, err := Unpack(context.Background(), bytes.NewReader(data), dst, Options{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if err := Diff(context.Background(), dst, io.Discard, DiffOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
