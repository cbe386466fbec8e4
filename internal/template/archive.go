package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// importOCIArchive imports an OCI archive (an OCI layout in a tarball): it
// is extracted into tmp/, keeping only the layout's own files, then read
// as a layout directory.
func (s *Store) importOCIArchive(ctx context.Context, p, tmplName string, progress func(Progress)) (Info, error) {
	base := filepath.Base(p)
	dir, err := os.MkdirTemp(s.tmpDir(), "oci-")
	if err != nil {
		return Info{}, fmt.Errorf("template store: %w", err)
	}
	defer os.RemoveAll(dir)
	rc, err := openTar(p)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	err = extractLayout(ctx, rc, dir, s.maxArchiveBytes())
	rc.Close()
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	return s.importLayout(ctx, dir, tmplName, "oci-archive:"+base, progress)
}

// maxArchiveBytes bounds what one archive may extract.
func (s *Store) maxArchiveBytes() int64 {
	if s.opts.MaxLayerBytes > 0 {
		return 4 * s.maxBlobBytes()
	}
	return defaultMaxBlobBytes
}

// layoutFile matches the files of an OCI layout the store reads.
var layoutFile = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(oci-layout|index\.json|blobs/sha256/[a-f0-9]{64})$`)
})

// extractLayout writes the OCI layout files of tar r into dst: regular
// files with the names above only (every other entry is skipped, so no
// link, device or path outside dst is ever created), each at most once,
// max bytes in all.
func extractLayout(ctx context.Context, r io.Reader, dst string, max int64) error {
	if err := os.MkdirAll(filepath.Join(dst, "blobs", "sha256"), 0o700); err != nil {
		return fmt.Errorf("template store: %w", err)
	}
	tr := tar.NewReader(ctxReader{ctx, r})
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("corrupt tar archive: %v", err))
		}
		n := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if h.Typeflag != tar.TypeReg || !layoutFile().MatchString(n) {
			continue
		}
		if total += h.Size; total > max {
			return sandbox.Errorf(sandbox.ClassTooLarge, "archive holds more than %d bytes", max)
		}
		f, err := os.OpenFile(filepath.Join(dst, filepath.FromSlash(n)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			if errors.Is(err, os.ErrExist) {
				return sandbox.Errorf(sandbox.ClassInvalid, "archive has %s twice", n)
			}
			return fmt.Errorf("template store: %w", err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", n, err)
		}
	}
}
