package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// record is one stored template (templates.json).
type record struct {
	Name string `json:"name"`
	Tag  string `json:"tag"`
	Kind string `json:"kind"`
	// Digest is the sha256 of the image config blob: the template's identity.
	Digest string `json:"digest"`
	// Manifest is the image manifest blob as pulled or imported ("" when
	// the store made the image itself; Export builds manifests anyway).
	Manifest  string              `json:"manifest,omitempty"`
	Source    string              `json:"source,omitempty"`
	Layers    []layerRecord       `json:"layers"`
	Config    sandbox.ImageConfig `json:"config"`
	Size      int64               `json:"size"`
	Created   time.Time           `json:"created"`
	Resources sandbox.Resources   `json:"resources"`
}

// layerRecord is one layer of a record, lowest first.
type layerRecord struct {
	DiffID string `json:"diff_id"` // sha256 of the uncompressed tar: names layers/<hex>
	// Blob is the sha256 of the blob as stored (compressed or not); ""
	// when the store keeps only the unpacked layer (snapshots): an export
	// writes the blob again from it.
	Blob      string `json:"blob"`
	MediaType string `json:"media_type"` // of the blob
	BlobSize  int64  `json:"blob_size"`
	Size      int64  `json:"size"` // unpacked file bytes
	// Charged is what this layer counts against the storage quota of the
	// user whose private template added it (a tenant's snapshot): what it
	// took in the store, at least its tar's length. 0: nobody's quota
	// (image layers, builds, template admins' snapshots). It travels with
	// the layer into templates made on top of it.
	Charged int64 `json:"charged,omitempty"`
}

// hasBlob reports whether the store keeps a blob of the layer.
func (l layerRecord) hasBlob() bool { return l.Blob != "" }

// recordsFile is templates.json. Retired records are images a name no
// longer points at (re-pulled, re-committed) that live sandboxes still use:
// their layers must outlive the name, until GC finds them unused.
type recordsFile struct {
	Version   int      `json:"version"`
	Templates []record `json:"templates"`
	Retired   []record `json:"retired,omitempty"`
}

const recordsVersion = 1

var digestPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[a-f0-9]{64}$`) })

// hexOf returns the hex part of a validated "sha256:..." digest.
func hexOf(digest string) string { return digest[len("sha256:"):] }

// validate refuses a record that could steer a path or lie about its kind:
// templates.json is ours, but a corrupt file must fail loudly, not mount
// the wrong directory.
func (r *record) validate(retired bool) error {
	if err := validName(r.Name); err != nil {
		return fmt.Errorf("record %q: %w", r.Name, err)
	}
	if !retired && !tagPattern().MatchString(r.Tag) {
		return fmt.Errorf("record %q: invalid tag %q", r.Name, r.Tag)
	}
	if r.Kind != sandbox.TemplateImage {
		return fmt.Errorf("record %s:%s: kind %q is not stored", r.Name, r.Tag, r.Kind)
	}
	if !digestPattern().MatchString(r.Digest) || (r.Manifest != "" && !digestPattern().MatchString(r.Manifest)) {
		return fmt.Errorf("record %s:%s: invalid digest", r.Name, r.Tag)
	}
	for _, l := range r.Layers {
		if !digestPattern().MatchString(l.DiffID) || (l.hasBlob() && !digestPattern().MatchString(l.Blob)) {
			return fmt.Errorf("record %s:%s: invalid layer digest", r.Name, r.Tag)
		}
	}
	return nil
}

func (s *Store) recordsPath() string { return filepath.Join(s.dir, "templates.json") }

// loadRecords reads templates.json (absent: an empty store).
func (s *Store) loadRecords() error {
	b, err := os.ReadFile(s.recordsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("template store: read records: %w", err)
	}
	var f recordsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("template store: %s is corrupt (fix or move it away; layers stay): %w", s.recordsPath(), err)
	}
	if f.Version != recordsVersion {
		return fmt.Errorf("template store: %s has version %d, this agentbox reads %d", s.recordsPath(), f.Version, recordsVersion)
	}
	for i := range f.Templates {
		r := f.Templates[i]
		if err := r.validate(false); err != nil {
			return fmt.Errorf("template store: %s: %w", s.recordsPath(), err)
		}
		s.records[ref{r.Name, r.Tag}.key()] = &r
	}
	for i := range f.Retired {
		if err := f.Retired[i].validate(true); err != nil {
			return fmt.Errorf("template store: %s: %w", s.recordsPath(), err)
		}
	}
	s.retired = f.Retired
	return nil
}

// saveRecordsLocked writes templates.json atomically and durably (temp
// file, fsync, rename, fsync of the directory). s.mu is held.
func (s *Store) saveRecordsLocked() error {
	f := recordsFile{Version: recordsVersion, Templates: []record{}, Retired: s.retired}
	for _, r := range s.records {
		f.Templates = append(f.Templates, *r)
	}
	sort.Slice(f.Templates, func(i, j int) bool {
		return ref{f.Templates[i].Name, f.Templates[i].Tag}.key() < ref{f.Templates[j].Name, f.Templates[j].Tag}.key()
	})
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("template store: encode records: %w", err)
	}
	return writeFileAtomic(s.recordsPath(), b)
}

// writeFileAtomic replaces path with b so that a crash leaves either the
// old or the new content.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// putRecordLocked stores rec under its name (rec nil: removes the name
// k), retiring the image the name pointed at. s.mu is held.
//
// A sandbox created from the old image may still run on its layers, so
// the old record is kept, untagged, until GC asks Options.InUse (never
// under s.mu: the manager may hold its own lock while it calls us).
func (s *Store) putRecordLocked(k string, rec *record) error {
	old := s.records[k]
	oldRetired := s.retired
	if rec != nil {
		s.records[k] = rec
	} else {
		delete(s.records, k)
	}
	if old != nil && (rec == nil || old.Digest != rec.Digest) && !s.digestReferencedLocked(old.Digest) {
		r := *old
		r.Tag = ""
		s.retired = append(append([]record(nil), s.retired...), r)
	}
	if err := s.saveRecordsLocked(); err != nil {
		if old != nil {
			s.records[k] = old
		} else {
			delete(s.records, k)
		}
		s.retired = oldRetired
		return err
	}
	return nil
}

// digestReferencedLocked reports whether a tagged or retired record has digest.
func (s *Store) digestReferencedLocked(digest string) bool {
	for _, r := range s.records {
		if r.Digest == digest {
			return true
		}
	}
	for _, r := range s.retired {
		if r.Digest == digest {
			return true
		}
	}
	return false
}

// recordByDigestLocked finds a record (tagged first, then retired) by digest.
func (s *Store) recordByDigestLocked(digest string) *record {
	keys := make([]string, 0, len(s.records))
	for k := range s.records {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if s.records[k].Digest == digest {
			return s.records[k]
		}
	}
	for i := range s.retired {
		if s.retired[i].Digest == digest {
			return &s.retired[i]
		}
	}
	return nil
}

func (s *Store) inUse(digest string) int {
	if s.opts.InUse == nil || digest == "" {
		return 0
	}
	return s.opts.InUse(digest)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
