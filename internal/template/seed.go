package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/layer"
)

// Seed describes a copy of this store holding only the named templates:
// what the daemon's container image ships so that a daemon on a fresh data
// dir serves them at once (scripts/image.sh, deploy/docker). records is the
// copy's templates.json and paths the entries of this store's directory it
// needs, relative to it: each layer's directory and each template's config
// blob. Records go without a manifest and layers without their blobs
// where the unpacked tree gives the layer's tar again (an export writes
// both from the trees; a pulled layer whose tar was written otherwise
// keeps its blob), so the copy holds most files once; no build cache,
// bootstrap cache or retired image goes with it. The copy is a store like any other once its files are in
// place (ownership, whiteout devices and xattrs kept, as GNU tar --xattrs
// keeps them).
func (s *Store) Seed(ctx context.Context, names ...string) (records []byte, paths []string, err error) {
	o := s.newOp()
	defer o.done()
	f := recordsFile{Version: recordsVersion, Templates: []record{}}
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	var recs []record
	for _, n := range names {
		r, err := parseRef(n)
		if err != nil {
			return nil, nil, err
		}
		s.mu.Lock()
		rec := s.records[r.key()]
		var c record
		if rec != nil {
			c = *rec
			c.Layers = slices.Clone(rec.Layers)
			o.pinLocked(blobKey(hexOf(rec.Digest)))
			for _, l := range rec.Layers {
				o.pinLocked(layerKey(hexOf(l.DiffID)))
				if l.hasBlob() {
					o.pinLocked(blobKey(hexOf(l.Blob)))
				}
			}
		}
		s.mu.Unlock()
		if rec == nil {
			return nil, nil, sandbox.Errorf(sandbox.ClassNotFound, "seed: template %q is not stored", r)
		}
		if seen["record:"+r.key()] {
			continue
		}
		seen["record:"+r.key()] = true
		recs = append(recs, c)
	}
	// Whether each layer's tree gives its tar again, once per layer.
	rewritable := map[string]bool{}
	for _, c := range recs {
		c.Manifest = ""
		for i, l := range c.Layers {
			add(filepath.Join("layers", hexOf(l.DiffID)))
			if !l.hasBlob() {
				continue
			}
			ok, known := rewritable[l.DiffID]
			if !known {
				if ok, err = s.treeGivesLayer(ctx, l); err != nil {
					return nil, nil, err
				}
				rewritable[l.DiffID] = ok
			}
			if ok {
				l.Blob, l.MediaType, l.BlobSize = "", "", 0
				c.Layers[i] = l
			} else {
				add(filepath.Join("blobs", "sha256", hexOf(l.Blob)))
			}
		}
		add(filepath.Join("blobs", "sha256", hexOf(c.Digest)))
		f.Templates = append(f.Templates, c)
	}
	sort.Slice(f.Templates, func(i, j int) bool {
		return ref{f.Templates[i].Name, f.Templates[i].Tag}.key() < ref{f.Templates[j].Name, f.Templates[j].Tag}.key()
	})
	sort.Strings(paths)
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("template store: encode seed records: %w", err)
	}
	return b, paths, nil
}

// treeGivesLayer reports whether layer.Diff of l's unpacked tree hashes to
// its diff id, as writeLayerBlob needs of a layer kept without its blob.
func (s *Store) treeGivesLayer(ctx context.Context, l layerRecord) (bool, error) {
	h := sha256.New()
	if err := layer.Diff(ctx, s.layerRoot(hexOf(l.DiffID)), h, layer.DiffOptions{}); err != nil {
		return false, fmt.Errorf("seed: read layer %s: %w", l.DiffID, err)
	}
	return "sha256:"+hex.EncodeToString(h.Sum(nil)) == l.DiffID, nil
}
