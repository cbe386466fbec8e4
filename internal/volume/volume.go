// Package volume keeps named, tenant-owned stores of files that outlive
// sandboxes: their records (in the daemon's state store, so every replica
// agrees on them), their storage (a Driver per kind; "local" is an ext4
// image on the data disk whose size the kernel enforces), their mounts
// into sandboxes and their content API without a sandbox.
package volume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/units"
)

// KindLocal is the kind of volumes on this host's data disk.
const KindLocal = "local"

// Volume is a volume's record.
type Volume struct {
	// ID names the volume's storage; it never changes and is never reused,
	// so a volume deleted and created again under its name is a new one.
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Owner     string    `json:"owner"`
	Kind      string    `json:"kind"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Node is the replica whose disk holds a local volume: only sandboxes
	// there can mount it and only that replica serves its content.
	Node string `json:"node,omitempty"`
}

// Usage is what a volume's filesystem holds.
type Usage struct {
	UsedBytes  int64 `json:"used_bytes"`
	TotalBytes int64 `json:"total_bytes"`
}

// A Driver is the storage of one kind of volume. A Driver is safe for
// concurrent use; the Service serialises the calls for one volume.
type Driver interface {
	// Create makes v's storage: an empty filesystem of v.SizeBytes whose
	// root belongs to the sandbox user (uid and gid 1000). It fails with
	// ClassNoSpace when the storage has no room for it, and leaves nothing
	// behind when it fails.
	Create(ctx context.Context, v Volume) error
	// Path returns the host directory that holds v's files, attaching
	// the storage first when it is not (after a restart). Its files carry
	// the sandbox's own ids (sandbox.Mount.IDMapped).
	Path(ctx context.Context, v Volume) (string, error)
	// Usage reports what v's filesystem holds.
	Usage(ctx context.Context, v Volume) (Usage, error)
	// Remove destroys v's storage and every file in it. Sandboxes that
	// still have it mounted get I/O errors from then on.
	Remove(ctx context.Context, v Volume) error
}

// docKind is the store documents' kind of volume records.
const docKind = "volume"

// Config configures a Service.
type Config struct {
	Docs    store.Docs
	Drivers map[string]Driver
	// Node is this replica's NODE_ID, recorded in the local volumes it
	// makes.
	Node        string
	DefaultSize int64
	MaxSize     int64
	MinSize     int64
	// MaxPerUser caps one owner's volumes; 0: no cap.
	MaxPerUser int
	// BindDir holds the staging mounts of volume subpaths (mount.go);
	// "": subpaths are refused.
	BindDir string
}

// Service is the volumes of every tenant.
type Service struct {
	cfg   Config
	locks sync.Map // volume key -> *sync.Mutex
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.MinSize <= 0 {
		cfg.MinSize = 8 << 20
	}
	return &Service{cfg: cfg}
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)

// ErrInUse refuses the delete of a volume sandboxes have mounted.
var ErrInUse = errors.New("volume is mounted")

// CheckName refuses a name no volume may have.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return sandbox.Invalid("name", "invalid volume name %.70q: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

func docKey(owner, name string) string { return url.PathEscape(owner) + "/" + name }

func (s *Service) lock(owner, name string) func() {
	mu, _ := s.locks.LoadOrStore(docKey(owner, name), &sync.Mutex{})
	m := mu.(*sync.Mutex)
	m.Lock()
	return m.Unlock
}

// Kinds lists the kinds this server can create.
func (s *Service) Kinds() []string {
	var k []string
	for name := range s.cfg.Drivers {
		k = append(k, name)
	}
	sort.Strings(k)
	return k
}

// CreateOptions are a new volume's settings.
type CreateOptions struct {
	Kind      string // "" = local
	SizeBytes int64  // 0 = the default size
	// Admit checks the new volume against the owner's storage quota
	// (nil: none) before its storage is made.
	Admit func(size int64) error
}

// Create makes owner's volume name.
func (s *Service) Create(ctx context.Context, owner, name string, o CreateOptions) (Volume, error) {
	if err := CheckName(name); err != nil {
		return Volume{}, err
	}
	if o.Kind == "" {
		o.Kind = KindLocal
	}
	d, ok := s.cfg.Drivers[o.Kind]
	if !ok {
		return Volume{}, sandbox.Invalid("kind", "volume kind %q is not available on this server (it has: %v)", o.Kind, s.Kinds())
	}
	size := o.SizeBytes
	if size == 0 {
		size = s.cfg.DefaultSize
	}
	if size < s.cfg.MinSize || (s.cfg.MaxSize > 0 && size > s.cfg.MaxSize) {
		return Volume{}, sandbox.Invalid("size", "volume size must be between %s and %s (VOLUME_MAX_SIZE)", units.FormatBytes(s.cfg.MinSize), units.FormatBytes(s.cfg.MaxSize))
	}
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	unlock := s.lock(owner, name)
	defer unlock()
	if max := s.cfg.MaxPerUser; max > 0 {
		all, err := s.List(ctx, owner)
		if err != nil {
			return Volume{}, err
		}
		if len(all) >= max {
			return Volume{}, sandbox.Errorf(sandbox.ClassQuota, "you have %d volumes, the most one user may keep (VOLUME_MAX_PER_USER); delete one first", len(all))
		}
	}
	if _, err := s.Get(ctx, owner, name); err == nil {
		return Volume{}, sandbox.Errorf(sandbox.ClassConflict, "volume %q already exists", name)
	} else if sandbox.ClassOf(err) != sandbox.ClassNotFound {
		return Volume{}, err
	}
	if o.Admit != nil {
		if err := o.Admit(size); err != nil {
			return Volume{}, err
		}
	}
	v := Volume{ID: newID(), Name: name, Owner: owner, Kind: o.Kind, SizeBytes: size, CreatedAt: time.Now().UTC()}
	if o.Kind == KindLocal {
		v.Node = s.cfg.Node
	}
	if err := d.Create(ctx, v); err != nil {
		return Volume{}, err
	}
	data, _ := json.Marshal(v)
	// The record last: a volume is listed only once its storage exists.
	// Another replica may have stored the name meanwhile; then this
	// storage goes.
	err := s.cfg.Docs.UpdateDoc(ctx, docKind, owner, docKey(owner, name), func(old []byte) ([]byte, time.Duration, error) {
		if old != nil {
			return nil, 0, sandbox.Errorf(sandbox.ClassConflict, "volume %q already exists", name)
		}
		return data, 0, nil
	})
	if err != nil {
		_ = d.Remove(context.WithoutCancel(ctx), v)
		return Volume{}, err
	}
	return v, nil
}

// Get returns owner's volume name (ClassNotFound: none; another owner's
// volume is not found either).
func (s *Service) Get(ctx context.Context, owner, name string) (Volume, error) {
	if err := CheckName(name); err != nil {
		return Volume{}, sandbox.Errorf(sandbox.ClassNotFound, "no volume %.70q", name)
	}
	data, err := s.cfg.Docs.Doc(ctx, docKind, docKey(owner, name))
	if err != nil {
		return Volume{}, err
	}
	if data == nil {
		return Volume{}, sandbox.Errorf(sandbox.ClassNotFound, "no volume %q", name)
	}
	var v Volume
	if err := json.Unmarshal(data, &v); err != nil {
		return Volume{}, fmt.Errorf("read volume record %q: %w", name, err)
	}
	if v.Owner != owner {
		return Volume{}, sandbox.Errorf(sandbox.ClassNotFound, "no volume %q", name)
	}
	return v, nil
}

// List returns owner's volumes by name.
func (s *Service) List(ctx context.Context, owner string) ([]Volume, error) {
	docs, err := s.cfg.Docs.GroupDocs(ctx, docKind, owner)
	if err != nil {
		return nil, err
	}
	out := make([]Volume, 0, len(docs))
	for _, d := range docs {
		var v Volume
		if json.Unmarshal(d, &v) == nil && v.Owner == owner {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Bytes is the size of all of owner's volumes, what they hold of its
// storage quota.
func (s *Service) Bytes(ctx context.Context, owner string) (int64, error) {
	all, err := s.List(ctx, owner)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, v := range all {
		n += v.SizeBytes
	}
	return n, nil
}

// Delete removes owner's volume name and its files. inUse reports
// whether sandboxes have it mounted: then it is refused (ErrInUse, class
// conflict) unless force, which cuts those sandboxes off it.
func (s *Service) Delete(ctx context.Context, owner, name string, force bool, inUse func(Volume) (bool, error)) error {
	unlock := s.lock(owner, name)
	defer unlock()
	v, err := s.Get(ctx, owner, name)
	if err != nil {
		return err
	}
	if !force && inUse != nil {
		used, err := inUse(v)
		if err != nil {
			return err
		}
		if used {
			return &sandbox.Error{Class: sandbox.ClassConflict, Msg: fmt.Sprintf("volume %q is mounted in a sandbox: delete those sandboxes first, or force the delete", name), Err: ErrInUse}
		}
	}
	d, err := s.driver(v)
	if err != nil {
		return err
	}
	if err := s.local(v); err != nil {
		return err
	}
	// The record first: from now on no create mounts it.
	err = s.cfg.Docs.UpdateDoc(ctx, docKind, owner, docKey(owner, name), func(old []byte) ([]byte, time.Duration, error) {
		return nil, 0, nil
	})
	if err != nil {
		return err
	}
	return d.Remove(ctx, v)
}

// Path returns the host directory of v's files on this replica.
func (s *Service) Path(ctx context.Context, v Volume) (string, error) {
	d, err := s.driver(v)
	if err != nil {
		return "", err
	}
	if err := s.local(v); err != nil {
		return "", err
	}
	return d.Path(ctx, v)
}

// Usage reports what v holds.
func (s *Service) Usage(ctx context.Context, v Volume) (Usage, error) {
	d, err := s.driver(v)
	if err != nil {
		return Usage{}, err
	}
	if err := s.local(v); err != nil {
		return Usage{}, err
	}
	return d.Usage(ctx, v)
}

func (s *Service) driver(v Volume) (Driver, error) {
	d, ok := s.cfg.Drivers[v.Kind]
	if !ok {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "volume %q is of kind %q, which this server does not serve", v.Name, v.Kind)
	}
	return d, nil
}

// local refuses a local volume of another replica: its files are on
// that replica's disk.
func (s *Service) local(v Volume) error {
	if v.Kind == KindLocal && v.Node != "" && v.Node != s.cfg.Node {
		return sandbox.Errorf(sandbox.ClassUnavailable, "volume %q is a local volume of node %s; only sandboxes on that node can use it", v.Name, v.Node)
	}
	return nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "vol-" + hex.EncodeToString(b[:])
}
