package template

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// imageSrc is an image to store, from any source.
type imageSrc struct {
	rawManifest []byte // nil: no manifest kept (docker save archives)
	rawConfig   []byte // verified against its digest by the builder
	config      *v1.ConfigFile
	layers      []layerSrc
	source      string
}

// layerMediaTypes are the layer blobs the store accepts. Foreign
// (Windows) and encrypted layers are refused by name.
var layerMediaTypes = map[types.MediaType]bool{
	types.DockerLayer: true, types.DockerUncompressedLayer: true,
	types.OCILayer: true, types.OCILayerZStd: true, types.OCIUncompressedLayer: true,
}

// fromImage reads what the store needs of img (a registry or OCI layout
// image), bounded: the manifest and config sizes and the layer count are
// checked before anything big is read.
func fromImage(img v1.Image, source string) (imageSrc, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return imageSrc{}, fmt.Errorf("read manifest: %w", err)
	}
	if len(raw) > maxManifestBytes {
		return imageSrc{}, sandbox.Errorf(sandbox.ClassTooLarge, "image manifest is %d bytes, over the limit of %d", len(raw), maxManifestBytes)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return imageSrc{}, sandbox.Wrap(sandbox.ClassInvalid, err, "image manifest is not valid JSON")
	}
	if len(m.Layers) > maxImageLayers {
		return imageSrc{}, sandbox.Errorf(sandbox.ClassTooLarge, "image has %d layers, over the limit of %d", len(m.Layers), maxImageLayers)
	}
	if m.Config.Size < 0 || m.Config.Size > maxConfigBytes {
		return imageSrc{}, sandbox.Errorf(sandbox.ClassTooLarge, "image config is %d bytes, over the limit of %d", m.Config.Size, maxConfigBytes)
	}
	cl, err := img.LayerByDigest(m.Config.Digest)
	if err != nil {
		return imageSrc{}, fmt.Errorf("read image config: %w", err)
	}
	rc, err := cl.Compressed()
	if err != nil {
		return imageSrc{}, fmt.Errorf("read image config: %w", err)
	}
	rawConfig, err := io.ReadAll(io.LimitReader(rc, m.Config.Size+1))
	rc.Close()
	if err != nil {
		return imageSrc{}, fmt.Errorf("read image config: %w", err)
	}
	if int64(len(rawConfig)) != m.Config.Size || sha256Hash(rawConfig) != m.Config.Digest {
		return imageSrc{}, sandbox.Errorf(sandbox.ClassInvalid, "image config does not match its descriptor %s (%d bytes)", m.Config.Digest, m.Config.Size)
	}
	cfg, err := parseConfig(rawConfig, len(m.Layers))
	if err != nil {
		return imageSrc{}, err
	}
	src := imageSrc{rawManifest: raw, rawConfig: rawConfig, config: cfg, source: source}
	for i, d := range m.Layers {
		if !layerMediaTypes[d.MediaType] {
			return imageSrc{}, sandbox.Errorf(sandbox.ClassInvalid, "layer %d has media type %q, which agentbox does not unpack", i, d.MediaType)
		}
		if d.Size < 0 {
			return imageSrc{}, sandbox.Errorf(sandbox.ClassInvalid, "layer %d has a negative size", i)
		}
		digest := d.Digest
		src.layers = append(src.layers, layerSrc{
			diffID: cfg.RootFS.DiffIDs[i], blob: digest, size: d.Size, media: d.MediaType,
			open: func() (io.ReadCloser, error) {
				l, err := img.LayerByDigest(digest)
				if err != nil {
					return nil, err
				}
				return l.Compressed()
			},
		})
	}
	return src, nil
}

// parseConfig parses an image config and checks it against the image.
func parseConfig(raw []byte, layers int) (*v1.ConfigFile, error) {
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, sandbox.Wrap(sandbox.ClassInvalid, err, "image config is not valid JSON")
	}
	if cfg.OS != "" && cfg.OS != "linux" {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "image is for %s; agentbox runs linux images", cfg.OS)
	}
	if len(cfg.RootFS.DiffIDs) != layers {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "image config lists %d layer diff ids for %d layers", len(cfg.RootFS.DiffIDs), layers)
	}
	for _, d := range cfg.RootFS.DiffIDs {
		if !digestPattern().MatchString(d.String()) {
			return nil, sandbox.Errorf(sandbox.ClassInvalid, "image config has an unsupported diff id %q", d)
		}
	}
	return cfg, nil
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// storeImage stores src's blobs and layers and records it as template r.
func (s *Store) storeImage(ctx context.Context, r ref, src imageSrc, progress func(Progress)) (Info, error) {
	if err := s.checkStorable(r); err != nil {
		return Info{}, err
	}
	for i, l := range src.layers {
		if !digestPattern().MatchString(l.blob.String()) {
			return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "layer %d has an unsupported digest %q", i, l.blob)
		}
	}
	o := s.newOp()
	defer o.done()
	progress = serialized(progress)
	rec := &record{
		Name: r.name, Tag: r.tag, Kind: sandbox.TemplateImage, Source: src.source,
		Config: imageConfig(src.config.Config), Created: time.Now().UTC(),
		Layers: make([]layerRecord, len(src.layers)),
	}
	cd := sha256Hash(src.rawConfig)
	o.pin(blobKey(cd.Hex))
	if _, err := s.writeBlobBytes(ctx, src.rawConfig); err != nil {
		return Info{}, err
	}
	rec.Digest = cd.String()
	if src.rawManifest != nil {
		md := sha256Hash(src.rawManifest)
		o.pin(blobKey(md.Hex))
		if _, err := s.writeBlobBytes(ctx, src.rawManifest); err != nil {
			return Info{}, err
		}
		rec.Manifest = md.String()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pullJobs)
	for i, l := range src.layers {
		g.Go(func() error {
			lr, err := s.ensureLayer(gctx, o, l, progress)
			rec.Layers[i] = lr
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Info{}, err
	}
	for _, l := range rec.Layers {
		rec.Size += l.Size
	}
	return s.saveRecord(r, rec)
}

// checkStorable refuses names that are built in or registered directories.
func (s *Store) checkStorable(r ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkStorableLocked(r)
}

// saveRecord records rec as template r.
func (s *Store) saveRecord(r ref, rec *record) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkStorableLocked(r); err != nil {
		return Info{}, err
	}
	if err := s.putRecordLocked(r.key(), rec); err != nil {
		return Info{}, err
	}
	s.log.Info("template stored", "template", r.String(), "digest", rec.Digest, "source", rec.Source, "layers", len(rec.Layers), "bytes", rec.Size)
	return rec.info(), nil
}

// serialized makes progress safe to call from the parallel layer fetches.
func serialized(progress func(Progress)) func(Progress) {
	if progress == nil {
		return nil
	}
	var mu sync.Mutex
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		progress(p)
	}
}
