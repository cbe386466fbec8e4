// Package template is agentbox's one home for templates: what a sandbox's
// root filesystem is made of. It keeps a content-addressed store in the
// data dir, like a registry: blobs by sha256, every layer unpacked once
// into its own directory and shared by all templates that use it, and
// template records (name, tag, digest, ordered layers, image config, our
// metadata). Sources: registry pulls, image archives (docker save, OCI),
// root filesystem directories or tarballs, snapshots and builds (a base
// template plus one layer). The manager resolves a name to a
// sandbox.Template; backends never parse names.
//
// Layout under the store's directory:
//
//	blobs/sha256/<hex>       compressed layers, configs, manifests as pulled
//	layers/<diffid hex>/     one layer: root/ (unpacked, overlayfs form) + layer.json
//	templates.json           name:tag -> template record
//	tmp/                     work in progress, removed at open
//	lock                     flock held while a Store is open: one process at a time
//
// The daemon keeps the builder's step cache index (build-cache/) and the
// bootstrap cache (bootstrap/) in the same directory, so that a directory
// kept across machines' data dirs (TEMPLATE_DIR) keeps everything a rebuild
// needs; the store leaves other entries alone.
//
// Names: one namespace for "host" (built in, always there), the operator's
// registered directories and stored templates. A stored name never shadows
// a registered directory nor the other way round: storing a name that is
// registered, or registering a name that is stored (any tag), is
// sandbox.ClassConflict. Names follow Docker's reference grammar with
// lowercase components; the tag defaults to "latest".
package template

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Options configure a Store.
type Options struct {
	Logger *slog.Logger
	// MaxLayerBytes and MaxLayerEntries bound one unpacked layer.
	MaxLayerBytes   int64
	MaxLayerEntries int
	// InUse reports how many live sandboxes use the template with this
	// digest; templates in use cannot be deleted, and their layers outlive
	// their name. Nil: none are. The store never calls it with its own
	// lock held, so it may take the caller's locks.
	InUse func(digest string) int
	// Auth is the registry credentials source (docker config.json paths,
	// AGENTBOX_REGISTRY_AUTH); Mirrors maps registry hosts ("docker.io",
	// "ghcr.io", "host:port") to mirrors tried in order before the
	// registry: "host[:port][/path-prefix]", "https://..." or "http://..."
	// (plain HTTP).
	Auth    RegistryAuth
	Mirrors map[string][]string
}

// RegistryAuth says where registry credentials come from.
type RegistryAuth struct {
	// DockerConfig is a docker config.json ("" = $DOCKER_CONFIG or
	// ~/.docker/config.json when present).
	DockerConfig string
	// Inline is AGENTBOX_REGISTRY_AUTH: JSON {"registry": {"username":
	// "...", "password": "..."} | {"auth": "base64"} | {"token": "..."}}.
	Inline string
}

// Info describes a stored template.
type Info struct {
	Name    string              `json:"name"`
	Tag     string              `json:"tag"`
	Kind    string              `json:"kind"`
	Digest  string              `json:"digest,omitempty"`
	Source  string              `json:"source,omitempty"` // image ref, file, "snapshot of <id>", "build"
	Layers  []LayerInfo         `json:"layers,omitempty"`
	Config  sandbox.ImageConfig `json:"config"`
	Size    int64               `json:"size"` // unpacked bytes of all layers
	Created time.Time           `json:"created"`
	InUse   int                 `json:"in_use"`
	// Resources are the template's default resources (zero: the server's).
	Resources sandbox.Resources `json:"resources"`
}

// LayerInfo describes one layer of a template.
type LayerInfo struct {
	DiffID string `json:"diff_id"` // sha256:... of the uncompressed tar
	Size   int64  `json:"size"`
}

// Progress reports a long operation (pull, import, build).
type Progress struct {
	Layer   string `json:"layer,omitempty"` // diff id or blob digest
	Status  string `json:"status"`          // "downloading", "unpacking", "done", "cached"
	Current int64  `json:"current,omitempty"`
	Total   int64  `json:"total,omitempty"`
}

// PullOptions refine a pull.
type PullOptions struct {
	// Platform is os/arch[/variant]; "" means the host's.
	Platform string
	// Insecure allows plain HTTP registries (tests, local mirrors).
	Insecure bool
}

// Bounds on what an image may be. A hostile registry or archive gets a
// clear error before the store reads or allocates much.
const (
	maxImageLayers   = 256
	maxConfigBytes   = 8 << 20
	maxManifestBytes = 4 << 20
	// defaultMaxBlobBytes bounds one layer blob when MaxLayerBytes is unset.
	defaultMaxBlobBytes = 64 << 30
	// pullJobs is how many layers of one image are fetched at a time.
	pullJobs = 3
)

// Store is the template store. It is safe for concurrent use.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger

	lock *os.File // flock of <dir>/lock, released by Close

	mu      sync.Mutex
	records map[string]*record // "name:tag"
	retired []record           // untagged images live sandboxes may still use
	dirs    map[string]string  // registered directory templates: name -> dir
	pins    map[string]int     // blobs/layers in-flight operations will reference
	flights map[string]*flight // layers being fetched, by diff id hex
	gcMu    sync.Mutex         // one GC at a time
}

// Open opens (creating) the store in dir, removing unfinished work and
// layers or blobs no record references (left by a crash).
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("template store: %q is not an absolute path", dir)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Malformed credentials settings fail at start, not at the first pull.
	if _, err := newKeychain(opts.Auth); err != nil {
		return nil, sandbox.Wrap(sandbox.ClassInvalid, err, "template store: "+err.Error())
	}
	s := &Store{
		dir: dir, opts: opts, log: opts.Logger,
		records: map[string]*record{}, dirs: map[string]string{},
		pins: map[string]int{}, flights: map[string]*flight{},
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if err := os.RemoveAll(s.tmpDir()); err != nil {
		return nil, fmt.Errorf("template store: clear tmp: %w", err)
	}
	for _, d := range []string{s.tmpDir(), s.blobsDir(), s.layersDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("template store: %w", err)
		}
	}
	if err := s.loadRecords(); err != nil {
		return nil, err
	}
	if freed, err := s.GC(ctx); err != nil {
		return nil, err
	} else if freed > 0 {
		s.log.Info("template store: removed unused layers and blobs", "bytes", freed)
	}
	ok = true
	return s, nil
}

// lockDir takes the store's exclusive lock: Open clears tmp/ and collects
// what its own records do not reference, so a second process on the same
// directory would destroy the first one's work.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("template store %s is in use by another process (one agentbox daemon per TEMPLATE_DIR)", dir)
		}
		return nil, fmt.Errorf("template store: lock %s: %w", dir, err)
	}
	return f, nil
}

// Close releases the store's directory for another process. The store
// must not be used afterwards.
func (s *Store) Close() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close() // closing the descriptor drops the flock
	s.lock = nil
	return err
}

// RegisterDir makes an operator's root filesystem directory available as
// template name (kind dir, tag "latest"). It is not persisted:
// configuration registers it at every start. The directory is validated by
// the backend. A name already stored (any tag) is sandbox.ClassConflict.
func (s *Store) RegisterDir(name, dir string) error {
	r, err := parseRef(name)
	if err != nil {
		return err
	}
	if r.tag != DefaultTag || r.name != name {
		return sandbox.Errorf(sandbox.ClassInvalid, "directory template %q: give a name without a tag", name)
	}
	if r.name == sandbox.TemplateHost {
		return sandbox.Errorf(sandbox.ClassConflict, "template name %q is built in", name)
	}
	if !filepath.IsAbs(dir) {
		return sandbox.Errorf(sandbox.ClassInvalid, "directory template %q: %q is not an absolute path", name, dir)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nameStoredLocked(r.name) {
		return sandbox.Errorf(sandbox.ClassConflict, "directory template %q: a stored template has that name (delete it or pick another name)", name)
	}
	s.dirs[r.name] = filepath.Clean(dir)
	return nil
}

// nameStoredLocked reports whether any tag of name is stored.
func (s *Store) nameStoredLocked(name string) bool {
	for _, r := range s.records {
		if r.Name == name {
			return true
		}
	}
	return false
}

// checkStorableLocked refuses to store under a name that is built in or
// an operator's directory.
func (s *Store) checkStorableLocked(r ref) error {
	if r.name == sandbox.TemplateHost {
		return sandbox.Errorf(sandbox.ClassConflict, "template name %q is built in", r.name)
	}
	if _, ok := s.dirs[r.name]; ok {
		return sandbox.Errorf(sandbox.ClassConflict, "template name %q is an operator's directory template", r.name)
	}
	return nil
}

// Resolve returns the template named ref ("name", "name:tag"; "host" is
// always there). An unknown name is sandbox.ClassNotFound.
func (s *Store) Resolve(ctx context.Context, name string) (sandbox.Template, error) {
	r, err := parseRef(name)
	if err != nil {
		return sandbox.Template{}, err
	}
	if r.name == sandbox.TemplateHost && r.tag == DefaultTag {
		return sandbox.HostTemplate(), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.dirs[r.name]; ok && r.tag == DefaultTag {
		return sandbox.Template{Ref: r.String(), Kind: sandbox.TemplateDir, Dir: d}, nil
	}
	rec := s.records[r.key()]
	if rec == nil {
		return sandbox.Template{}, sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", r.String())
	}
	t := sandbox.Template{Ref: r.String(), Digest: rec.Digest, Kind: rec.Kind, Config: rec.Config}
	for i, l := range rec.Layers {
		root := s.layerRoot(hexOf(l.DiffID))
		if !exists(root) {
			return sandbox.Template{}, sandbox.Errorf(sandbox.ClassInternal, "template %q: layer %s is missing from the store; pull or import it again", r.String(), l.DiffID)
		}
		if !repeatedAbove(rec.Layers, i) {
			t.Layers = append(t.Layers, root)
		}
	}
	return t, nil
}

// repeatedAbove reports whether layer i appears again higher up. Images
// may repeat a layer (often the empty one) and overlayfs refuses a lower
// directory twice; applying a layer again on top makes its lower copy
// invisible (its files, whiteouts and opaque directories all act again),
// so only the highest copy is kept.
func repeatedAbove(layers []layerRecord, i int) bool {
	for _, l := range layers[i+1:] {
		if l.DiffID == layers[i].DiffID {
			return true
		}
	}
	return false
}

// List returns every template, sorted by name and tag. The builder's
// intermediate results (build-cache/) are its cache, not templates: no
// list shows them (Get still finds one by name).
func (s *Store) List(ctx context.Context) ([]Info, error) {
	s.mu.Lock()
	out := []Info{hostInfo()}
	for name := range s.dirs {
		out = append(out, dirInfo(name))
	}
	for _, rec := range s.records {
		if info := rec.info(); !strings.HasPrefix(info.Name, buildCacheRoot) {
			out = append(out, info)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Tag < out[j].Tag
	})
	for i := range out {
		out[i].InUse = s.inUse(out[i].Digest)
	}
	return out, nil
}

// Get returns one template.
func (s *Store) Get(ctx context.Context, name string) (Info, error) {
	r, err := parseRef(name)
	if err != nil {
		return Info{}, err
	}
	info, err := s.getInfo(r)
	if err != nil {
		return Info{}, err
	}
	info.InUse = s.inUse(info.Digest)
	return info, nil
}

func (s *Store) getInfo(r ref) (Info, error) {
	if r.name == sandbox.TemplateHost && r.tag == DefaultTag {
		return hostInfo(), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.dirs[r.name]; ok && r.tag == DefaultTag {
		return dirInfo(r.name), nil
	}
	if rec := s.records[r.key()]; rec != nil {
		return rec.info(), nil
	}
	return Info{}, sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", r.String())
}

func hostInfo() Info {
	return Info{Name: sandbox.TemplateHost, Tag: DefaultTag, Kind: sandbox.TemplateHost, Source: "the host's /usr"}
}

// dirInfo leaves the directory out: API callers never see host paths.
func dirInfo(name string) Info {
	return Info{Name: name, Tag: DefaultTag, Kind: sandbox.TemplateDir, Source: "operator directory"}
}

func (r *record) info() Info {
	in := Info{
		Name: r.Name, Tag: r.Tag, Kind: r.Kind, Digest: r.Digest, Source: r.Source,
		Config: r.Config, Size: r.Size, Created: r.Created, Resources: r.Resources,
	}
	for _, l := range r.Layers {
		in.Layers = append(in.Layers, LayerInfo{DiffID: l.DiffID, Size: l.Size})
	}
	return in
}

// Delete removes a template name. A template a live sandbox uses is
// sandbox.ClassConflict. Layers no template uses any more are then
// removed (GC).
func (s *Store) Delete(ctx context.Context, name string) error {
	r, err := parseRef(name)
	if err != nil {
		return err
	}
	info, err := s.getInfo(r)
	if err != nil {
		return err
	}
	switch info.Kind {
	case sandbox.TemplateHost:
		return sandbox.Errorf(sandbox.ClassConflict, "template %q is built in and cannot be deleted", r.String())
	case sandbox.TemplateDir:
		return sandbox.Errorf(sandbox.ClassConflict, "template %q is an operator's directory (remove it from the configuration)", r.String())
	}
	// Asked without s.mu held (see putRecordLocked). A sandbox created in
	// the gap is still safe: the record is retired, not dropped, and GC
	// asks again.
	if n := s.inUse(info.Digest); n > 0 {
		return sandbox.Errorf(sandbox.ClassConflict, "template %q is used by %d sandbox(es); delete them first", r.String(), n)
	}
	s.mu.Lock()
	if s.records[r.key()] == nil {
		s.mu.Unlock()
		return sandbox.Errorf(sandbox.ClassNotFound, "template %q not found", r.String())
	}
	err = s.putRecordLocked(r.key(), nil)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	freed, err := s.GC(ctx)
	if err != nil {
		s.log.Warn("template store: collecting layers after a delete", "template", r.String(), "err", err)
	} else {
		s.log.Info("template deleted", "template", r.String(), "freed_bytes", freed)
	}
	return nil
}

func (s *Store) maxBlobBytes() int64 {
	if s.opts.MaxLayerBytes > 0 {
		// A layer tar is its file bytes plus headers and padding; a
		// compressed blob is usually far smaller.
		return 2*s.opts.MaxLayerBytes + 64<<20
	}
	return defaultMaxBlobBytes
}
