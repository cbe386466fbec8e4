package manager

import (
	"context"
	"io"
	"os"
	"slices"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/units"
	"github.com/agentbox/agentbox/internal/volume"
)

// Volumes: the manager adds to the volume service what only it knows —
// the tenant's storage quota (a volume's size counts against
// STORAGE_QUOTA_PER_USER beside its private templates) and which
// sandboxes have a volume mounted (their records, in the shared store, so
// every replica sees the same).

// VolumeInfo is a volume and what it holds now.
type VolumeInfo struct {
	volume.Volume
	Usage *volume.Usage `json:"usage,omitempty"`
	// MountedBy are the live sandboxes that mount it.
	MountedBy []sandbox.ID `json:"mounted_by"`
}

func (m *Manager) volumes() (*volume.Service, error) {
	if m.cfg.Volumes == nil {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "this server has no volumes")
	}
	return m.cfg.Volumes, nil
}

// CreateVolume makes owner's volume name of size bytes (0: the default)
// and kind ("": local).
func (m *Manager) CreateVolume(ctx context.Context, owner, name, kind string, size int64) (VolumeInfo, error) {
	vs, err := m.volumes()
	if err != nil {
		return VolumeInfo{}, err
	}
	admit := func(size int64) error {
		q := m.cfg.StorageQuota
		if q <= 0 || m.isTemplateAdmin(owner) {
			return nil
		}
		m.storage.mu.Lock()
		pending := m.storage.user(owner).pending
		m.storage.mu.Unlock()
		stored := m.storedUsage(owner).Bytes
		if stored+pending+size > q {
			return sandbox.Errorf(sandbox.ClassQuota, "storage quota exceeded: your volumes and private templates hold %s, a volume of %s would pass your %s (STORAGE_QUOTA_PER_USER); delete volumes or snapshots you no longer need",
				units.FormatBytes(stored+pending), units.FormatBytes(size), units.FormatBytes(q))
		}
		return nil
	}
	v, err := vs.Create(ctx, owner, name, volume.CreateOptions{Kind: kind, SizeBytes: size, Admit: admit})
	if err != nil {
		return VolumeInfo{}, err
	}
	m.log.Info("volume created", "owner", owner, "volume", name, "id", v.ID, "size", v.SizeBytes)
	m.emitOther(events.VolumeCreated, owner, map[string]any{"volume": v.Name, "kind": v.Kind, "size_bytes": v.SizeBytes})
	return VolumeInfo{Volume: v, MountedBy: []sandbox.ID{}}, nil
}

// ListVolumes returns owner's volumes.
func (m *Manager) ListVolumes(ctx context.Context, owner string) ([]VolumeInfo, error) {
	vs, err := m.volumes()
	if err != nil {
		return nil, err
	}
	all, err := vs.List(ctx, owner)
	if err != nil {
		return nil, err
	}
	users, err := m.volumeUsers(ctx, owner)
	if err != nil {
		return nil, err
	}
	out := make([]VolumeInfo, 0, len(all))
	for _, v := range all {
		out = append(out, VolumeInfo{Volume: v, MountedBy: orEmpty(users[v.Name])})
	}
	return out, nil
}

// GetVolume returns owner's volume name with its usage.
func (m *Manager) GetVolume(ctx context.Context, owner, name string) (VolumeInfo, error) {
	vs, err := m.volumes()
	if err != nil {
		return VolumeInfo{}, err
	}
	v, err := vs.Get(ctx, owner, name)
	if err != nil {
		return VolumeInfo{}, err
	}
	users, err := m.volumeUsers(ctx, owner)
	if err != nil {
		return VolumeInfo{}, err
	}
	info := VolumeInfo{Volume: v, MountedBy: orEmpty(users[v.Name])}
	if u, err := vs.Usage(ctx, v); err == nil {
		info.Usage = &u
	}
	return info, nil
}

// DeleteVolume deletes owner's volume name: refused while a sandbox
// mounts it, unless force (those sandboxes then get I/O errors in it).
func (m *Manager) DeleteVolume(ctx context.Context, owner, name string, force bool) error {
	vs, err := m.volumes()
	if err != nil {
		return err
	}
	err = vs.Delete(ctx, owner, name, force, func(v volume.Volume) (bool, error) {
		users, err := m.volumeUsers(ctx, owner)
		return len(users[v.Name]) > 0, err
	})
	if err != nil {
		return err
	}
	m.log.Info("volume deleted", "owner", owner, "volume", name, "force", force)
	m.emitOther(events.VolumeDeleted, owner, map[string]any{"volume": name, "force": force})
	return nil
}

// volumeUsers maps owner's volume names to the sandboxes that mount them,
// from the records of every replica.
func (m *Manager) volumeUsers(ctx context.Context, owner string) (map[string][]sandbox.ID, error) {
	recs, err := m.store.List(ctx)
	if err != nil {
		return nil, err
	}
	users := map[string][]sandbox.ID{}
	for _, r := range recs {
		if r.Owner != owner {
			continue
		}
		for _, vm := range r.Volumes {
			if !slices.Contains(users[vm.Name], r.ID) {
				users[vm.Name] = append(users[vm.Name], r.ID)
			}
		}
	}
	return users, nil
}

func orEmpty(ids []sandbox.ID) []sandbox.ID {
	if ids == nil {
		return []sandbox.ID{}
	}
	return ids
}

// Volume content without a sandbox: each call is one of owner's heavy
// requests (MAX_REQUESTS_PER_USER).

// VolumeStat describes a file of owner's volume.
func (m *Manager) VolumeStat(ctx context.Context, owner, name, p string) (volume.Entry, error) {
	vs, err := m.volumes()
	if err != nil {
		return volume.Entry{}, err
	}
	return vs.Stat(ctx, owner, name, p)
}

// VolumeList lists a directory of owner's volume.
func (m *Manager) VolumeList(ctx context.Context, owner, name, p string) ([]volume.Entry, error) {
	vs, err := m.volumes()
	if err != nil {
		return nil, err
	}
	release, err := m.Admit(owner, 0)
	if err != nil {
		return nil, err
	}
	defer release()
	return vs.ListDir(ctx, owner, name, p)
}

// VolumeOpen opens a file of owner's volume for reading; release ends
// the request once the caller has read it.
func (m *Manager) VolumeOpen(ctx context.Context, owner, name, p string) (f *os.File, e volume.Entry, release func(), err error) {
	vs, err := m.volumes()
	if err != nil {
		return nil, volume.Entry{}, nil, err
	}
	release, err = m.Admit(owner, 0)
	if err != nil {
		return nil, volume.Entry{}, nil, err
	}
	f, e, err = vs.Open(ctx, owner, name, p)
	if err != nil {
		release()
		return nil, volume.Entry{}, nil, err
	}
	return f, e, release, nil
}

// VolumeWrite stores a file in owner's volume, at most limit bytes.
func (m *Manager) VolumeWrite(ctx context.Context, owner, name, p string, r io.Reader, limit int64) (volume.Entry, error) {
	vs, err := m.volumes()
	if err != nil {
		return volume.Entry{}, err
	}
	release, err := m.Admit(owner, 0)
	if err != nil {
		return volume.Entry{}, err
	}
	defer release()
	return vs.Write(ctx, owner, name, p, r, limit)
}

// VolumeMkdir makes a directory in owner's volume.
func (m *Manager) VolumeMkdir(ctx context.Context, owner, name, p string) error {
	vs, err := m.volumes()
	if err != nil {
		return err
	}
	return vs.Mkdir(ctx, owner, name, p)
}

// VolumeRemove deletes a file or tree of owner's volume.
func (m *Manager) VolumeRemove(ctx context.Context, owner, name, p string) error {
	vs, err := m.volumes()
	if err != nil {
		return err
	}
	release, err := m.Admit(owner, 0)
	if err != nil {
		return err
	}
	defer release()
	return vs.Remove(ctx, owner, name, p)
}
