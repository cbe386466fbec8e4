package template

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/layer"
)

// Export writes template ref as a docker-loadable tarball (format
// "docker", tagged with the template's name) or an OCI archive (format
// "oci"), from the stored blobs.
func (s *Store) Export(ctx context.Context, tmplName, format string, w io.Writer) error {
	if format != "docker" && format != "oci" {
		return sandbox.Errorf(sandbox.ClassInvalid, "export: format %q is not docker or oci", format)
	}
	r, err := parseRef(tmplName)
	if err != nil {
		return err
	}
	o := s.newOp()
	defer o.done()
	s.mu.Lock()
	rec := s.records[r.key()]
	if rec != nil {
		c := *rec
		rec = &c
		rec.Layers = slices.Clone(rec.Layers)
		o.pinLocked(blobKey(hexOf(rec.Digest)))
		for _, l := range rec.Layers {
			if l.hasBlob() {
				o.pinLocked(blobKey(hexOf(l.Blob)))
			} else {
				o.pinLocked(layerKey(hexOf(l.DiffID)))
			}
		}
	}
	s.mu.Unlock()
	if rec == nil {
		if info, err := s.getInfo(r); err == nil {
			return sandbox.Errorf(sandbox.ClassInvalid, "export: template %q is of kind %s, not an image", r, info.Kind)
		}
		return sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", r)
	}
	// Layers kept without a blob (snapshots) get one for this export only.
	written := map[v1.Hash]string{}
	defer func() {
		for _, p := range written {
			os.Remove(p)
		}
	}()
	for i, l := range rec.Layers {
		if l.hasBlob() {
			continue
		}
		if p, ok := findWritten(written, rec.Layers[:i], l.DiffID); ok {
			rec.Layers[i] = p
			continue
		}
		nl, path, err := s.writeLayerBlob(ctx, l)
		if err != nil {
			return fmt.Errorf("export %s: %w", r, err)
		}
		h, _ := v1.NewHash(nl.Blob)
		written[h] = path
		rec.Layers[i] = nl
	}
	img, err := s.exportImage(rec, format == "oci", written)
	if err != nil {
		return err
	}
	if format == "docker" {
		tag, err := name.NewTag(r.key())
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		if err := tarball.Write(tag, img, ctxWriter{ctx, w}); err != nil {
			return fmt.Errorf("export %s: %w", r, err)
		}
		return nil
	}
	return writeOCIArchive(ctx, img, r, w)
}

// ctxWriter stops a long export when ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// findWritten returns the record of a layer with diff id that an earlier
// layer of the same export already got a blob for (images may repeat a
// layer).
func findWritten(written map[v1.Hash]string, earlier []layerRecord, diffID string) (layerRecord, bool) {
	for _, l := range earlier {
		if h, err := v1.NewHash(l.Blob); err == nil && l.DiffID == diffID && written[h] != "" {
			return l, true
		}
	}
	return layerRecord{}, false
}

// writeLayerBlob writes the gzip blob of a layer stored without one into
// tmp/, from its unpacked tree: layer.Diff of the tree gives the layer's
// tar again, which must hash to its diff id (the image config names it).
// The caller removes the file.
func (s *Store) writeLayerBlob(ctx context.Context, l layerRecord) (layerRecord, string, error) {
	f, err := os.CreateTemp(s.tmpDir(), "export-")
	if err != nil {
		return l, "", fmt.Errorf("template store: %w", err)
	}
	ok := false
	defer func() {
		f.Close()
		if !ok {
			os.Remove(f.Name())
		}
	}()
	th, bh := sha256.New(), sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, bh))
	// The tree holds the image's ids (no shift) and nothing to leave out.
	if err := layer.Diff(ctx, s.layerRoot(hexOf(l.DiffID)), io.MultiWriter(gz, th), layer.DiffOptions{}); err != nil {
		return l, "", fmt.Errorf("write layer %s again: %w", l.DiffID, err)
	}
	if err := gz.Close(); err != nil {
		return l, "", fmt.Errorf("template store: compress layer: %w", err)
	}
	if got := "sha256:" + hex.EncodeToString(th.Sum(nil)); got != l.DiffID {
		return l, "", sandbox.Errorf(sandbox.ClassInternal, "layer %s is stored without its blob and its files give another tar (%s): it cannot be exported", l.DiffID, got)
	}
	fi, err := f.Stat()
	if err != nil {
		return l, "", fmt.Errorf("template store: %w", err)
	}
	l.Blob, l.BlobSize, l.MediaType = "sha256:"+hex.EncodeToString(bh.Sum(nil)), fi.Size(), string(types.OCILayer)
	ok = true
	return l, f.Name(), nil
}

// storedImage is a record as a go-containerregistry image over the blobs.
type storedImage struct {
	s        *Store
	manifest []byte
	config   []byte
	mt       types.MediaType
	layers   map[v1.Hash]v1.Descriptor
	// written are blobs of this export only (layers stored without one).
	written map[v1.Hash]string
}

// exportImage builds a manifest for rec in OCI or Docker media types (the
// config digest, the template's identity, stays the same). written are
// blob files outside blobs/ by digest.
func (s *Store) exportImage(rec *record, oci bool, written map[v1.Hash]string) (v1.Image, error) {
	raw, err := s.readBlob(rec.Digest, maxConfigBytes)
	if err != nil {
		return nil, err
	}
	cd, _ := v1.NewHash(rec.Digest)
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.DockerManifestSchema2,
		Config: v1.Descriptor{MediaType: types.DockerConfigJSON, Size: int64(len(raw)), Digest: cd}}
	if oci {
		m.MediaType, m.Config.MediaType = types.OCIManifestSchema1, types.OCIConfigJSON
	}
	si := &storedImage{s: s, config: raw, mt: m.MediaType, layers: map[v1.Hash]v1.Descriptor{}, written: written}
	for _, l := range rec.Layers {
		h, _ := v1.NewHash(l.Blob)
		d := v1.Descriptor{MediaType: layerMediaType(types.MediaType(l.MediaType), oci), Size: l.BlobSize, Digest: h}
		m.Layers = append(m.Layers, d)
		si.layers[h] = d
	}
	if si.manifest, err = json.Marshal(m); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return partial.CompressedToImage(si)
}

// layerMediaType converts a layer media type to the OCI or Docker family.
func layerMediaType(mt types.MediaType, oci bool) types.MediaType {
	toOCI := map[types.MediaType]types.MediaType{types.DockerLayer: types.OCILayer, types.DockerUncompressedLayer: types.OCIUncompressedLayer}
	toDocker := map[types.MediaType]types.MediaType{types.OCILayer: types.DockerLayer, types.OCIUncompressedLayer: types.DockerUncompressedLayer}
	conv := toDocker
	if oci {
		conv = toOCI
	}
	if c, ok := conv[mt]; ok {
		return c
	}
	return mt
}

func (i *storedImage) RawConfigFile() ([]byte, error)      { return i.config, nil }
func (i *storedImage) RawManifest() ([]byte, error)        { return i.manifest, nil }
func (i *storedImage) MediaType() (types.MediaType, error) { return i.mt, nil }

func (i *storedImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	d, ok := i.layers[h]
	if !ok {
		return nil, fmt.Errorf("export: no layer %s", h)
	}
	return storedLayer{i.s, d, i.written[h]}, nil
}

type storedLayer struct {
	s    *Store
	d    v1.Descriptor
	path string // "": the blob in blobs/
}

func (l storedLayer) Digest() (v1.Hash, error)            { return l.d.Digest, nil }
func (l storedLayer) Size() (int64, error)                { return l.d.Size, nil }
func (l storedLayer) MediaType() (types.MediaType, error) { return l.d.MediaType, nil }
func (l storedLayer) Compressed() (io.ReadCloser, error) {
	if l.path != "" {
		return os.Open(l.path)
	}
	return os.Open(l.s.blobPath(l.d.Digest.Hex))
}

// writeOCIArchive writes img as an OCI layout in a tar stream.
func writeOCIArchive(ctx context.Context, img v1.Image, r ref, w io.Writer) error {
	tw := tar.NewWriter(ctxWriter{ctx, w})
	now := time.Now()
	add := func(n string, size int64, body io.Reader) error {
		h := &tar.Header{Name: n, Mode: 0o644, Size: size, ModTime: now, Typeflag: tar.TypeReg}
		if body == nil {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if body != nil {
			if _, err := io.CopyN(tw, body, size); err != nil {
				return err
			}
		}
		return nil
	}
	addBytes := func(n string, b []byte) error { return add(n, int64(len(b)), bytesReader(b)) }
	rawM, _ := img.RawManifest()
	md, _ := img.Digest()
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Size: int64(len(rawM)), Digest: md,
		Annotations: map[string]string{"org.opencontainers.image.ref.name": r.tag, "io.containerd.image.name": r.key()},
	}}}
	rawIdx, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	rawC, _ := img.RawConfigFile()
	cd, _ := img.ConfigName()
	steps := []func() error{
		func() error { return addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)) },
		func() error { return addBytes("index.json", rawIdx) },
		func() error { return add("blobs/", 0, nil) },
		func() error { return add("blobs/sha256/", 0, nil) },
		func() error { return addBytes("blobs/sha256/"+md.Hex, rawM) },
		func() error { return addBytes("blobs/sha256/"+cd.Hex, rawC) },
	}
	for _, st := range steps {
		if err := st(); err != nil {
			return fmt.Errorf("export %s: %w", r, err)
		}
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("export %s: %w", r, err)
	}
	seen := map[v1.Hash]bool{}
	for _, l := range layers {
		if err := copyLayer(l, seen, add); err != nil {
			return fmt.Errorf("export %s: %w", r, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("export %s: %w", r, err)
	}
	return nil
}

func copyLayer(l v1.Layer, seen map[v1.Hash]bool, add func(string, int64, io.Reader) error) error {
	d, err := l.Digest()
	if err != nil || seen[d] {
		return err
	}
	seen[d] = true
	size, err := l.Size()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	return add("blobs/sha256/"+d.Hex, size, rc)
}
