package template

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/layer"
)

// layerMeta is layers/<hex>/layer.json.
type layerMeta struct {
	DiffID  string `json:"diff_id"`
	Size    int64  `json:"size"`
	Entries int    `json:"entries"`
}

// maxTrailing bounds what may follow a layer tar's end-of-archive marker
// (padding to a record size; Docker writes at most 10 KiB). It must still
// be read: the diff id covers the whole stream.
const maxTrailing = 1 << 20

// layerSrc is one layer to store, from whatever source.
type layerSrc struct {
	diffID v1.Hash // from the image config
	blob   v1.Hash // digest of the blob as the source has it
	size   int64   // blob size, -1 unknown
	media  types.MediaType
	open   func() (io.ReadCloser, error) // the blob's bytes
}

// flight is one layer being fetched and unpacked; others wanting the same
// layer wait for it instead of unpacking it again.
type flight struct{ done chan struct{} }

// op pins the blobs and layers an operation is writing or will reference,
// so that a concurrent GC leaves them alone until the record is saved.
type op struct {
	s    *Store
	keys []string
}

func (s *Store) newOp() *op { return &op{s: s} }

func blobKey(hexd string) string  { return "b:" + hexd }
func layerKey(hexd string) string { return "l:" + hexd }

// pinLocked pins keys; s.mu is held.
func (o *op) pinLocked(keys ...string) {
	for _, k := range keys {
		o.s.pins[k]++
		o.keys = append(o.keys, k)
	}
}

func (o *op) pin(keys ...string) {
	o.s.mu.Lock()
	o.pinLocked(keys...)
	o.s.mu.Unlock()
}

// done releases every pin.
func (o *op) done() {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	for _, k := range o.keys {
		if o.s.pins[k]--; o.s.pins[k] <= 0 {
			delete(o.s.pins, k)
		}
	}
	o.keys = nil
}

// ensureLayer makes sure layer src is stored (blob and unpacked tree),
// fetching and unpacking only what is missing, once even when several
// operations want it at the same time.
func (s *Store) ensureLayer(ctx context.Context, o *op, src layerSrc, progress func(Progress)) (layerRecord, error) {
	dh, bh := src.diffID.Hex, src.blob.Hex
	for {
		s.mu.Lock()
		o.pinLocked(layerKey(dh), blobKey(bh))
		haveLayer, haveBlob := exists(s.layerDir(dh)), exists(s.blobPath(bh))
		if haveLayer && haveBlob {
			s.mu.Unlock()
			rec, err := s.layerRecord(src)
			if err == nil {
				report(progress, Progress{Layer: src.diffID.String(), Status: "cached", Current: rec.BlobSize, Total: rec.BlobSize})
			}
			return rec, err
		}
		if f := s.flights[dh]; f != nil {
			s.mu.Unlock()
			select {
			case <-f.done:
				continue // look again: it may have failed, or fetched another blob
			case <-ctx.Done():
				return layerRecord{}, ctx.Err()
			}
		}
		f := &flight{done: make(chan struct{})}
		s.flights[dh] = f
		s.mu.Unlock()
		err := s.fetchLayer(ctx, src, !haveBlob, !haveLayer, progress)
		s.mu.Lock()
		delete(s.flights, dh)
		close(f.done)
		s.mu.Unlock()
		if err != nil {
			return layerRecord{}, err
		}
		return s.layerRecord(src)
	}
}

// layerRecord describes a stored layer for a record.
func (s *Store) layerRecord(src layerSrc) (layerRecord, error) {
	meta, err := s.readLayerMeta(src.diffID.Hex)
	if err != nil {
		return layerRecord{}, err
	}
	fi, err := os.Stat(s.blobPath(src.blob.Hex))
	if err != nil {
		return layerRecord{}, fmt.Errorf("template store: layer blob: %w", err)
	}
	return layerRecord{DiffID: src.diffID.String(), Blob: src.blob.String(), MediaType: string(src.media), BlobSize: fi.Size(), Size: meta.Size}, nil
}

func (s *Store) readLayerMeta(hexd string) (layerMeta, error) {
	var m layerMeta
	b, err := os.ReadFile(filepath.Join(s.layerDir(hexd), "layer.json"))
	if err != nil {
		return m, fmt.Errorf("template store: layer %s: %w", hexd, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("template store: layer %s: %w", hexd, err)
	}
	return m, nil
}

// fetchLayer downloads the blob and/or unpacks it.
func (s *Store) fetchLayer(ctx context.Context, src layerSrc, needBlob, needLayer bool, progress func(Progress)) error {
	id := src.diffID.String()
	if needBlob {
		rc, err := src.open()
		if err != nil {
			return fmt.Errorf("template store: open layer %s: %w", src.blob, err)
		}
		pr := &progressReader{r: rc, report: func(n int64) {
			report(progress, Progress{Layer: id, Status: "downloading", Current: n, Total: src.size})
		}}
		_, _, err = s.writeBlob(ctx, pr, src.blob, src.size, s.maxBlobBytes())
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %s: %w", src.blob, err)
		}
	}
	if needLayer {
		report(progress, Progress{Layer: id, Status: "unpacking"})
		f, err := os.Open(s.blobPath(src.blob.Hex))
		if err != nil {
			return fmt.Errorf("template store: open blob: %w", err)
		}
		defer f.Close()
		r, err := decompress(f)
		if err != nil {
			return fmt.Errorf("layer %s: %w", src.blob, err)
		}
		defer r.Close()
		want := src.diffID
		diff, st, tmp, err := s.unpackLayer(ctx, r, &want)
		if err != nil {
			return fmt.Errorf("layer %s: %w", src.diffID, err)
		}
		if err := s.installLayer(tmp, diff, st); err != nil {
			return err
		}
	}
	report(progress, Progress{Layer: id, Status: "done", Current: src.size, Total: src.size})
	return nil
}

// decompress returns the uncompressed tar of a layer blob, by its magic
// bytes (media types lie more often than magic does).
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read layer: %w", err)
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, sandbox.Wrap(sandbox.ClassInvalid, err, "layer: bad gzip stream")
		}
		return z, nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		z, err := zstd.NewReader(br, zstd.WithDecoderMaxMemory(256<<20))
		if err != nil {
			return nil, sandbox.Wrap(sandbox.ClassInvalid, err, "layer: bad zstd stream")
		}
		return z.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// unpackLayer unpacks the uncompressed layer tar r into a new directory
// under tmp/ and returns its diff id. want, when set, is the diff id the
// image config promises; content that hashes otherwise is refused.
func (s *Store) unpackLayer(ctx context.Context, r io.Reader, want *v1.Hash) (v1.Hash, layer.Stats, string, error) {
	tmp, err := os.MkdirTemp(s.tmpDir(), "layer-")
	if err != nil {
		return v1.Hash{}, layer.Stats{}, "", fmt.Errorf("template store: %w", err)
	}
	fail := func(err error) (v1.Hash, layer.Stats, string, error) {
		os.RemoveAll(tmp)
		return v1.Hash{}, layer.Stats{}, "", err
	}
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return fail(fmt.Errorf("template store: %w", err))
	}
	h := sha256.New()
	tee := io.TeeReader(ctxReader{ctx, r}, h)
	st, err := layer.Unpack(ctx, tee, root, s.layerOpts())
	switch {
	case errors.Is(err, layer.ErrLimit):
		return fail(sandbox.Wrap(sandbox.ClassTooLarge, err, err.Error()))
	case errors.Is(err, layer.ErrInvalid):
		return fail(sandbox.Wrap(sandbox.ClassInvalid, err, err.Error()))
	case err != nil:
		return fail(err)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(tee, maxTrailing+1))
	if err != nil {
		return fail(fmt.Errorf("read layer: %w", err))
	}
	if n > maxTrailing {
		return fail(sandbox.Errorf(sandbox.ClassInvalid, "layer: more than %d bytes after the tar's end", maxTrailing))
	}
	got := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	if want != nil && got != *want {
		return fail(sandbox.Errorf(sandbox.ClassInvalid, "layer diff id mismatch: the image config says %s, the content is %s", *want, got))
	}
	return got, st, tmp, nil
}

// installLayer writes layer.json into the unpacked tmp directory and
// renames it into layers/ — atomically, so a layer directory is always
// complete. If the layer appeared meanwhile, tmp is dropped.
func (s *Store) installLayer(tmp string, diff v1.Hash, st layer.Stats) error {
	defer os.RemoveAll(tmp) // no-op after a successful rename
	b, _ := json.Marshal(layerMeta{DiffID: diff.String(), Size: st.Bytes, Entries: st.Entries})
	if err := os.WriteFile(filepath.Join(tmp, "layer.json"), b, 0o644); err != nil {
		return fmt.Errorf("template store: %w", err)
	}
	// One syncfs makes every file of the layer durable before it becomes
	// visible (cheaper than an fsync per file).
	if d, err := os.Open(tmp); err == nil {
		err = unix.Syncfs(int(d.Fd()))
		d.Close()
		if err != nil {
			return fmt.Errorf("template store: syncfs: %w", err)
		}
	}
	if err := os.Rename(tmp, s.layerDir(diff.Hex)); err != nil {
		if exists(s.layerDir(diff.Hex)) {
			return nil
		}
		return fmt.Errorf("template store: install layer: %w", err)
	}
	return syncDir(s.layersDir())
}

// ingestTar stores the uncompressed layer tar r as a new layer whose diff
// id is not known in advance (a commit's diff, a root filesystem): it is
// unpacked and, unless opts.NoBlob, gzip-compressed at the same time into
// a blob for export. opts.Charge and opts.Reserve are applied as it
// streams in and before anything is installed.
func (s *Store) ingestTar(ctx context.Context, o *op, r io.Reader, progress func(Progress), opts CommitOptions) (layerRecord, error) {
	meter := &meterReader{r: r, s: s, opts: opts}
	report(progress, Progress{Status: "unpacking"})
	if opts.NoBlob {
		diff, st, tmp, err := s.unpackLayer(ctx, meter, nil)
		if err != nil {
			return layerRecord{}, err
		}
		defer os.RemoveAll(tmp)
		charged, err := meter.finish(tmp, 0)
		if err != nil {
			return layerRecord{}, err
		}
		o.pin(layerKey(diff.Hex))
		if err := s.installLayer(tmp, diff, st); err != nil {
			return layerRecord{}, err
		}
		report(progress, Progress{Layer: diff.String(), Status: "done"})
		meta, err := s.readLayerMeta(diff.Hex)
		if err != nil {
			return layerRecord{}, err
		}
		return layerRecord{DiffID: diff.String(), Size: meta.Size, Charged: charged}, nil
	}
	f, err := os.CreateTemp(s.tmpDir(), "blob-")
	if err != nil {
		return layerRecord{}, fmt.Errorf("template store: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	bh := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, bh))
	diff, st, tmp, err := s.unpackLayer(ctx, io.TeeReader(meter, gz), nil)
	if err != nil {
		return layerRecord{}, err
	}
	defer os.RemoveAll(tmp)
	if err := gz.Close(); err != nil {
		return layerRecord{}, fmt.Errorf("template store: compress layer: %w", err)
	}
	var blobBytes int64
	if fi, err := f.Stat(); err == nil {
		blobBytes = fi.Size()
	}
	charged, err := meter.finish(tmp, blobBytes)
	if err != nil {
		return layerRecord{}, err
	}
	blob := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(bh.Sum(nil))}
	o.pin(layerKey(diff.Hex), blobKey(blob.Hex))
	if err := s.installBlob(f, blob); err != nil {
		return layerRecord{}, err
	}
	if err := s.installLayer(tmp, diff, st); err != nil {
		return layerRecord{}, err
	}
	report(progress, Progress{Layer: diff.String(), Status: "done"})
	lr, err := s.layerRecord(layerSrc{diffID: diff, blob: blob, media: types.OCILayer})
	lr.Charged = charged
	return lr, err
}

func (s *Store) layerOpts() layer.Options {
	return layer.Options{MaxBytes: s.opts.MaxLayerBytes, MaxEntries: s.opts.MaxLayerEntries}
}

// report calls progress when there is one.
func report(progress func(Progress), p Progress) {
	if progress != nil {
		progress(p)
	}
}
