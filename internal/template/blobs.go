package template

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func (s *Store) tmpDir() string              { return filepath.Join(s.dir, "tmp") }
func (s *Store) blobsDir() string            { return filepath.Join(s.dir, "blobs", "sha256") }
func (s *Store) layersDir() string           { return filepath.Join(s.dir, "layers") }
func (s *Store) blobPath(hexd string) string { return filepath.Join(s.blobsDir(), hexd) }

// layerDir holds one unpacked layer: root/ (the overlayfs lower directory)
// and layer.json. The tree is one level down so that our metadata never
// shows inside a sandbox.
func (s *Store) layerDir(hexd string) string  { return filepath.Join(s.layersDir(), hexd) }
func (s *Store) layerRoot(hexd string) string { return filepath.Join(s.layerDir(hexd), "root") }

// exists reports whether path exists (without following a last symlink).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// ctxReader fails reads once ctx ends, so a stalled copy stops.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// progressReader reports bytes read at most every progressStep bytes.
type progressReader struct {
	r       io.Reader
	n, last int64
	report  func(n int64)
}

const progressStep = 1 << 20

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.report != nil && (p.n-p.last >= progressStep || (err == io.EOF && p.n != p.last)) {
		p.last = p.n
		p.report(p.n)
	}
	return n, err
}

// writeBlob stores the bytes of r as a blob. want, when set, is the digest
// they must have; size (>= 0) the exact length. Nothing past max bytes is
// read. The blob appears under blobs/ only once complete and verified.
func (s *Store) writeBlob(ctx context.Context, r io.Reader, want v1.Hash, size, max int64) (v1.Hash, int64, error) {
	if size > max {
		return v1.Hash{}, 0, sandbox.Errorf(sandbox.ClassTooLarge, "blob %s is %d bytes, over the limit of %d", want, size, max)
	}
	limit := max
	if size >= 0 {
		limit = size
	}
	f, err := os.CreateTemp(s.tmpDir(), "blob-")
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("template store: blob: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, r}, limit+1))
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("template store: read blob %s: %w", want, err)
	}
	if n > limit {
		if size >= 0 {
			return v1.Hash{}, 0, sandbox.Errorf(sandbox.ClassInvalid, "blob %s is longer than the %d bytes its descriptor says", want, size)
		}
		return v1.Hash{}, 0, sandbox.Errorf(sandbox.ClassTooLarge, "blob %s is over the limit of %d bytes", want, max)
	}
	if size >= 0 && n != size {
		return v1.Hash{}, 0, sandbox.Errorf(sandbox.ClassInvalid, "blob %s is %d bytes, its descriptor says %d", want, n, size)
	}
	got := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	if want != (v1.Hash{}) && got != want {
		return v1.Hash{}, 0, sandbox.Errorf(sandbox.ClassInvalid, "blob digest mismatch: expected %s, content is %s", want, got)
	}
	if err := s.installBlob(f, got); err != nil {
		return v1.Hash{}, 0, err
	}
	return got, n, nil
}

// installBlob makes the complete temp file f the blob named h.
func (s *Store) installBlob(f *os.File, h v1.Hash) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("template store: sync blob: %w", err)
	}
	if err := os.Rename(f.Name(), s.blobPath(h.Hex)); err != nil {
		return fmt.Errorf("template store: install blob: %w", err)
	}
	return syncDir(s.blobsDir())
}

// writeBlobBytes stores b (a config or manifest) as a blob.
func (s *Store) writeBlobBytes(ctx context.Context, b []byte) (v1.Hash, error) {
	h, _, err := s.writeBlob(ctx, bytesReader(b), v1.Hash{}, int64(len(b)), int64(len(b)))
	return h, err
}

// readBlob reads a small blob (config, manifest) of at most max bytes.
func (s *Store) readBlob(digest string, max int64) ([]byte, error) {
	if !digestPattern().MatchString(digest) {
		return nil, fmt.Errorf("template store: invalid digest %q", digest)
	}
	f, err := os.Open(s.blobPath(hexOf(digest)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, sandbox.Errorf(sandbox.ClassInternal, "template store: blob %s is missing", digest)
		}
		return nil, fmt.Errorf("template store: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("template store: read blob %s: %w", digest, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("template store: blob %s is over %d bytes", digest, max)
	}
	return b, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
