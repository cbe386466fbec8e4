package template

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// CommitOptions refine a commit.
type CommitOptions struct {
	// NoBlob keeps only the unpacked layer, not also a compressed blob of
	// it: an export writes the blob again from the layer's files. For
	// layers made by layer.Diff (snapshots), which a Diff of their
	// unpacked tree gives again byte for byte; a layer that does not
	// (found at export) cannot be exported.
	NoBlob bool
	// Charge, when set, is told of the new layer's cost as it is stored:
	// its tar's bytes as they stream in (about every MiB, sparse files at
	// their apparent size), then what the unpacked tree takes on disk
	// beyond them, before the layer is installed. An error from it aborts
	// the commit, which then stores nothing. The layer's record keeps the
	// total (layerRecord.Charged), which PrivateUsage counts.
	Charge func(n int64) error
	// Reserve is space of the store's filesystem the commit leaves free:
	// it is refused at once, or aborted while the layer streams in, when
	// less would be left (sandbox.ClassNoSpace). 0: no check.
	Reserve int64
}

// Commit stores a new template name made of base's layers plus the layer
// tar read from diff (nil: no new layer), with cfg as its image config.
// Snapshots and builds use it. base is an image template (resolved from
// this store), or an image template with no digest and no layers for
// "scratch". The host template is the host's /usr, not layers, and a
// directory template is not in the store: both are refused with a hint.
func (s *Store) Commit(ctx context.Context, tmplName string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string) (Info, error) {
	return s.CommitWith(ctx, tmplName, base, diff, cfg, source, CommitOptions{})
}

// CommitWith is Commit with options (snapshots: no blob, charged to a
// quota, within the disk reserve).
func (s *Store) CommitWith(ctx context.Context, tmplName string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string, opts CommitOptions) (Info, error) {
	r, err := parseRef(tmplName)
	if err != nil {
		return Info{}, err
	}
	switch base.Kind {
	case sandbox.TemplateHost:
		return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "commit %s: the host template is the host's own /usr, not layers, so nothing can be stacked on it; start from an image template (pull, import or bootstrap one)", r)
	case sandbox.TemplateDir:
		return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "commit %s: template %q is an operator's directory, not in the store; import it first (agentbox template import DIR -t NAME) and start from that", r, base.Ref)
	case sandbox.TemplateImage:
	default:
		return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "commit %s: unknown base kind %q", r, base.Kind)
	}
	var b *record
	if base.Digest != "" || len(base.Layers) > 0 {
		s.mu.Lock()
		if found := s.recordByDigestLocked(base.Digest); found != nil {
			c := *found
			b = &c
		}
		s.mu.Unlock()
		if b == nil {
			return Info{}, sandbox.Errorf(sandbox.ClassNotFound, "commit %s: base template %q (%s) is no longer in the store", r, base.Ref, base.Digest)
		}
	}
	if diff == nil && b != nil {
		if info, ok := s.sameAsCurrent(r, b.Layers, cfg); ok {
			return info, nil
		}
	}
	if err := s.CheckFree(opts.Reserve); err != nil {
		return Info{}, fmt.Errorf("commit %s: %w", r, err)
	}
	return s.commitLayer(ctx, r, b, diff, cfg, source, nil, opts)
}

// sameAsCurrent returns the record name r has when it already is the
// layers with run configuration cfg: naming it again (an unchanged
// rebuild, a bootstrap or rootfs tarball imported again) keeps its digest,
// so warm pools and sandboxes of the name do not see a "new" template that
// is the same one, and build steps FROM it keep their cache keys.
func (s *Store) sameAsCurrent(r ref, layers []layerRecord, cfg sandbox.ImageConfig) (Info, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.records[r.key()]
	if cur == nil || cur.Kind != sandbox.TemplateImage || len(cur.Layers) != len(layers) ||
		!reflect.DeepEqual(cur.Config, cfg) {
		return Info{}, false
	}
	for i := range cur.Layers {
		if cur.Layers[i].DiffID != layers[i].DiffID {
			return Info{}, false
		}
	}
	return cur.info(), true
}

// commitLayer stores template r: base's layers (nil: none) plus the layer
// tar diff (nil: none), with config cfg.
func (s *Store) commitLayer(ctx context.Context, r ref, base *record, diff io.Reader, cfg sandbox.ImageConfig, source string, progress func(Progress), opts CommitOptions) (Info, error) {
	if err := s.checkStorable(r); err != nil {
		return Info{}, err
	}
	o := s.newOp()
	defer o.done()
	rec := &record{Name: r.name, Tag: r.tag, Kind: sandbox.TemplateImage, Source: source, Created: time.Now().UTC()}
	cf := &v1.ConfigFile{}
	if base != nil {
		// Pin the base first: its name may be deleted meanwhile.
		s.mu.Lock()
		o.pinLocked(blobKey(hexOf(base.Digest)))
		for _, l := range base.Layers {
			o.pinLocked(layerKey(hexOf(l.DiffID)))
			if l.hasBlob() {
				o.pinLocked(blobKey(hexOf(l.Blob)))
			}
		}
		missing := !exists(s.blobPath(hexOf(base.Digest)))
		s.mu.Unlock()
		if missing {
			return Info{}, sandbox.Errorf(sandbox.ClassNotFound, "base image %s is no longer in the store", base.Digest)
		}
		raw, err := s.readBlob(base.Digest, maxConfigBytes)
		if err != nil {
			return Info{}, err
		}
		if cf, err = parseConfig(raw, len(base.Layers)); err != nil {
			return Info{}, fmt.Errorf("base image config: %w", err)
		}
		rec.Layers = slices.Clone(base.Layers)
	}
	if diff != nil {
		if len(rec.Layers) >= maxImageLayers {
			return Info{}, sandbox.Errorf(sandbox.ClassTooLarge, "commit %s: an image has at most %d layers", r, maxImageLayers)
		}
		lr, err := s.ingestTar(ctx, o, diff, serialized(progress), opts)
		if err != nil {
			return Info{}, fmt.Errorf("commit %s: %w", r, err)
		}
		rec.Layers = append(rec.Layers, lr)
		if info, ok := s.sameAsCurrent(r, rec.Layers, cfg); ok {
			return info, nil
		}
	}
	raw, err := newConfig(cf, rec, cfg, source, diff != nil)
	if err != nil {
		return Info{}, err
	}
	cd := sha256Hash(raw)
	o.pin(blobKey(cd.Hex))
	if _, err := s.writeBlobBytes(ctx, raw); err != nil {
		return Info{}, err
	}
	rec.Digest = cd.String()
	rec.Config = cfg
	for _, l := range rec.Layers {
		rec.Size += l.Size
	}
	return s.saveRecord(r, rec)
}

// newConfig derives the new image's config from its base's: the layers'
// diff ids, the run configuration and one more history entry.
func newConfig(base *v1.ConfigFile, rec *record, cfg sandbox.ImageConfig, source string, newLayer bool) ([]byte, error) {
	cf := *base
	cf.OS = "linux"
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Created = v1.Time{Time: rec.Created}
	cf.RootFS = v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{}}
	for _, l := range rec.Layers {
		h, err := v1.NewHash(l.DiffID)
		if err != nil {
			return nil, fmt.Errorf("template store: %w", err)
		}
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, h)
	}
	cf.Config = ociConfig(base.Config, cfg)
	cf.History = append(slices.Clone(base.History), v1.History{
		Created: cf.Created, CreatedBy: "agentbox: " + source, EmptyLayer: !newLayer,
	})
	b, err := json.Marshal(cf)
	if err != nil {
		return nil, fmt.Errorf("template store: encode config: %w", err)
	}
	return b, nil
}
