package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// The upload must reach the server while the reader is still producing:
// the second chunk is only written after the server saw the first.
func TestUploadStreamsWithoutBuffering(t *testing.T) {
	fs, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	const chunk = 64 << 10
	var received atomic.Int64
	serverGot := make(chan struct{}, 100)
	fs.OnUpload = func(path string, n int64) {
		received.Store(n)
		select {
		case serverGot <- struct{}{}:
		default:
		}
	}
	pr, pw := io.Pipe()
	writerErr := make(chan error, 1)
	go func() {
		first := bytes.Repeat([]byte("a"), chunk)
		if _, err := pw.Write(first); err != nil {
			writerErr <- err
			return
		}
		deadline := time.After(5 * time.Second)
		for received.Load() < chunk {
			select {
			case <-serverGot:
			case <-deadline:
				err := errors.New("server did not receive the first chunk before the reader was exhausted: the upload is buffered")
				pw.CloseWithError(err)
				writerErr <- err
				return
			}
		}
		_, err := pw.Write(bytes.Repeat([]byte("b"), chunk))
		pw.Close()
		writerErr <- err
	}()

	var mu sync.Mutex // progress is called from the transport's goroutine
	var progress []int64
	e, err := c.Upload(ctx, sb.ID, "data/big.bin", pr, -1, func(n int64) {
		mu.Lock()
		progress = append(progress, n)
		mu.Unlock()
	})
	if werr := <-writerErr; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != "/home/user/data/big.bin" || e.Size != 2*chunk || e.Type != "file" {
		t.Errorf("entry = %+v", e)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) < 2 || progress[len(progress)-1] != 2*chunk {
		t.Errorf("progress = %v", progress)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] {
			t.Errorf("progress not increasing: %v", progress)
		}
	}
	data, _ := fs.File(sb.ID, "data/big.bin")
	if want := strings.Repeat("a", chunk) + strings.Repeat("b", chunk); string(data) != want {
		t.Errorf("server has %d bytes, want %d", len(data), len(want))
	}
}

func TestUploadKnownSizeAndEmpty(t *testing.T) {
	fs, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	r := io.NopCloser(strings.NewReader("hello")) // a Closer: Upload must not close it
	if _, err := c.Upload(ctx, sb.ID, "/workspace/h.txt", r, 5, nil); err != nil {
		t.Fatal(err)
	}
	if data, _ := fs.File(sb.ID, "/workspace/h.txt"); string(data) != "hello" {
		t.Errorf("file = %q", data)
	}
	h := fs.Headers()
	if got := h[len(h)-1].Get("Content-Type"); got != "application/octet-stream" {
		t.Errorf("Content-Type = %q", got)
	}
	e, err := c.Upload(ctx, sb.ID, "empty", strings.NewReader(""), 0, nil)
	if err != nil || e.Size != 0 {
		t.Fatalf("empty upload: %+v, %v", e, err)
	}
	if _, ok := fs.File(sb.ID, "empty"); !ok {
		t.Error("empty file not created")
	}
	if _, err := c.Upload(ctx, "missing", "x", strings.NewReader("x"), 1, nil); !client.IsNotFound(err) {
		t.Errorf("upload to missing sandbox: %v", err)
	}
}

func TestDownload(t *testing.T) {
	fs, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	content := bytes.Repeat([]byte("0123456789"), 10000)
	fs.PutFile(sb.ID, "/workspace/out.bin", content)
	rc, size, err := c.Download(ctx, sb.ID, "/workspace/out.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, content) || size != int64(len(content)) {
		t.Fatalf("download: %d bytes (size %d), %v", len(got), size, err)
	}
	if _, _, err := c.Download(ctx, sb.ID, "/nope"); !client.IsNotFound(err) {
		t.Errorf("download missing file: %v", err)
	}
}

func TestDownloadCancel(t *testing.T) {
	fs, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	fs.PutFile(sb.ID, "f", []byte("x"))
	dctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := c.Download(dctx, sb.ID, "f"); !errors.Is(err, context.Canceled) {
		t.Errorf("download with cancelled ctx: %v", err)
	}
}

func TestFileOperations(t *testing.T) {
	fs, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	if e, err := c.MakeDir(ctx, sb.ID, "/workspace/a/b"); err != nil || !e.IsDir() {
		t.Fatalf("mkdir: %+v, %v", e, err)
	}
	fs.PutFile(sb.ID, "/workspace/a/b/f.txt", []byte("abc"))
	if e, err := c.Stat(ctx, sb.ID, "/workspace/a/b/f.txt"); err != nil || e.Size != 3 || e.Name != "f.txt" || e.ModifiedAt.IsZero() {
		t.Fatalf("stat: %+v, %v", e, err)
	}
	if _, err := c.MakeDir(ctx, sb.ID, "/workspace/a/b/f.txt"); !client.IsConflict(err) {
		t.Errorf("mkdir over a file: %v", err)
	}
	entries, err := c.ListFiles(ctx, sb.ID, "/workspace", 3)
	if err != nil || len(entries) != 3 || entries[2].Path != "/workspace/a/b/f.txt" {
		t.Fatalf("list depth 3: %+v, %v", entries, err)
	}
	if entries, _ := c.ListFiles(ctx, sb.ID, "/workspace", 0); len(entries) != 1 {
		t.Errorf("list depth 1: %+v", entries)
	}
	if e, err := c.Move(ctx, sb.ID, "/workspace/a", "/workspace/z"); err != nil || e.Path != "/workspace/z" {
		t.Fatalf("move: %+v, %v", e, err)
	}
	if _, ok := fs.File(sb.ID, "/workspace/z/b/f.txt"); !ok {
		t.Error("move lost the file")
	}
	if err := c.Remove(ctx, sb.ID, "/workspace/z"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, sb.ID, "/workspace/z/b"); !client.IsNotFound(err) {
		t.Errorf("stat after remove: %v", err)
	}
	if err := c.Remove(ctx, sb.ID, "/workspace/z"); !client.IsNotFound(err) {
		t.Errorf("second remove: %v", err)
	}
}
