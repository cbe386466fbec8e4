package template

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// GC removes layers and blobs no template uses; it returns the bytes freed.
// Retired images (names that moved on, deleted names) go first once no
// sandbox uses them. It is safe against concurrent pulls, imports and
// commits: what they are writing or about to reference is pinned.
func (s *Store) GC(ctx context.Context) (int64, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	if err := s.dropUnusedRetired(); err != nil {
		return 0, err
	}
	trash, err := s.moveUnreferenced()
	if err != nil || trash == "" {
		return 0, err
	}
	freed := diskUsage(trash)
	if err := os.RemoveAll(trash); err != nil {
		return freed, fmt.Errorf("template store: remove unused layers: %w", err)
	}
	return freed, nil
}

// dropUnusedRetired forgets retired records no sandbox uses. InUse is
// asked without s.mu held.
func (s *Store) dropUnusedRetired() error {
	s.mu.Lock()
	digests := make([]string, 0, len(s.retired))
	for _, r := range s.retired {
		digests = append(digests, r.Digest)
	}
	s.mu.Unlock()
	unused := map[string]bool{}
	for _, d := range digests {
		if s.inUse(d) == 0 {
			unused[d] = true
		}
	}
	if len(unused) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only entries seen above are judged: retired only grows outside GC
	// (and GC holds gcMu), so they are the first len(digests).
	old := s.retired
	var keep []record
	for i, r := range s.retired {
		if i >= len(digests) || !unused[r.Digest] {
			keep = append(keep, r)
		}
	}
	s.retired = keep
	if err := s.saveRecordsLocked(); err != nil {
		s.retired = old
		return err
	}
	return nil
}

// moveUnreferenced moves every layer and blob that no record, pin or
// in-flight fetch references into one trash directory under tmp/ and
// returns it ("" when nothing is unused). Deciding and moving happen
// under s.mu, so an operation that pins a layer either sees it gone (and
// fetches it again) or keeps it; the slow removal happens outside.
func (s *Store) moveUnreferenced() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := map[string]bool{}
	add := func(r *record) {
		refs[blobKey(hexOf(r.Digest))] = true
		if r.Manifest != "" {
			refs[blobKey(hexOf(r.Manifest))] = true
		}
		for _, l := range r.Layers {
			if l.hasBlob() {
				refs[blobKey(hexOf(l.Blob))] = true
			}
			refs[layerKey(hexOf(l.DiffID))] = true
		}
	}
	for _, r := range s.records {
		add(r)
	}
	for i := range s.retired {
		add(&s.retired[i])
	}
	for k := range s.pins {
		refs[k] = true
	}
	for h := range s.flights {
		refs[layerKey(h)] = true
	}
	trash := ""
	move := func(dir, name string) error {
		if trash == "" {
			t, err := os.MkdirTemp(s.tmpDir(), "gc-")
			if err != nil {
				return fmt.Errorf("template store: gc: %w", err)
			}
			trash = t
		}
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(trash, filepath.Base(dir)+"-"+name)); err != nil {
			return fmt.Errorf("template store: gc: %w", err)
		}
		return nil
	}
	for _, d := range []struct {
		dir string
		key func(string) string
	}{{s.layersDir(), layerKey}, {s.blobsDir(), blobKey}} {
		entries, err := os.ReadDir(d.dir)
		if err != nil {
			return trash, fmt.Errorf("template store: gc: %w", err)
		}
		for _, e := range entries {
			if refs[d.key(e.Name())] {
				continue
			}
			if err := move(d.dir, e.Name()); err != nil {
				return trash, err
			}
		}
	}
	return trash, nil
}

// diskUsage sums the sizes of the regular files under dir.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
