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
//	layers/<diffid hex>/     one unpacked layer (overlayfs form) + layer.json
//	templates.json           name:tag -> template record
//	tmp/                     work in progress, removed at open
package template

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	// digest; templates in use cannot be deleted. Nil: none are.
	InUse func(digest string) int
	// Auth is the registry credentials source (docker config.json paths,
	// AGENTBOX_REGISTRY_AUTH); Mirrors maps registry hosts to mirrors.
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

// ErrNotImplemented marks the parts of this skeleton still to be written.
var ErrNotImplemented = errors.New("template store: not implemented")

// Store is the template store. It is safe for concurrent use.
type Store struct {
	dir  string
	opts Options
}

// Open opens (creating) the store in dir, removing unfinished work.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	return nil, ErrNotImplemented
}

// RegisterDir makes an operator's root filesystem directory available as
// template name (kind dir). It is not persisted: configuration registers
// it at every start. The directory is validated by the backend.
func (s *Store) RegisterDir(name, dir string) error { return ErrNotImplemented }

// Resolve returns the template named ref ("name", "name:tag"; "host" is
// always there). An unknown name is sandbox.ClassNotFound.
func (s *Store) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	return sandbox.Template{}, ErrNotImplemented
}

// List returns every template, sorted by name and tag.
func (s *Store) List(ctx context.Context) ([]Info, error) { return nil, ErrNotImplemented }

// Get returns one template.
func (s *Store) Get(ctx context.Context, ref string) (Info, error) {
	return Info{}, ErrNotImplemented
}

// Delete removes a template name. A template a live sandbox uses is
// sandbox.ClassConflict. Layers no template uses any more are removed by GC.
func (s *Store) Delete(ctx context.Context, ref string) error { return ErrNotImplemented }

// Pull fetches image ref from its registry and stores it as template name
// (name "" = the image reference itself).
func (s *Store) Pull(ctx context.Context, ref, name string, opts PullOptions, progress func(Progress)) (Info, error) {
	return Info{}, ErrNotImplemented
}

// Import stores the image or root filesystem at path (a docker save
// tarball, an OCI archive or layout directory, a root filesystem directory
// or tarball) as template name.
func (s *Store) Import(ctx context.Context, path, name string, progress func(Progress)) (Info, error) {
	return Info{}, ErrNotImplemented
}

// Commit stores a new template name made of base's layers plus the layer
// tar read from diff (nil: no new layer), with cfg as its image config.
// Snapshots and builds use it.
func (s *Store) Commit(ctx context.Context, name string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string) (Info, error) {
	return Info{}, ErrNotImplemented
}

// Export writes template ref as a docker-loadable tarball (format
// "docker") or an OCI archive (format "oci").
func (s *Store) Export(ctx context.Context, ref, format string, w io.Writer) error {
	return ErrNotImplemented
}

// GC removes layers and blobs no template uses; it returns the bytes freed.
func (s *Store) GC(ctx context.Context) (int64, error) { return 0, ErrNotImplemented }
