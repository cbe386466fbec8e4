package template

import (
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/units"
)

// Usage is what one user's private templates hold in the store.
type Usage struct {
	// Bytes is the sum of the charges of the distinct layers the user's
	// snapshots added (layerRecord.Charged), less layers a shared
	// template also has: those would be stored without the user's
	// templates too.
	Bytes int64
	// Templates are the user's private template names ("name:tag"), sorted.
	Templates []string
}

// PrivateUsage returns what owner's private namespace holds: its tagged
// templates, and the images they named before (a snapshot into the same
// name again) for as long as a sandbox still runs on them. A layer two of
// owner's templates share counts once; one another user's template also
// has counts for each of them (each alone keeps it stored). Layers of
// shared templates under owner's (the base image) never count: they are
// the operator's.
func (s *Store) PrivateUsage(owner string) Usage {
	prefix := privatePrefix(owner)
	var u Usage
	var mine, retired [][]layerRecord
	var retiredDigests []string
	shared := map[string]bool{}
	s.mu.Lock()
	for _, r := range s.records {
		switch {
		case strings.HasPrefix(r.Name, prefix):
			u.Templates = append(u.Templates, ref{r.Name, r.Tag}.key())
			mine = append(mine, r.Layers)
		case !IsPrivate(r.Name):
			for _, l := range r.Layers {
				shared[l.DiffID] = true
			}
		}
	}
	for _, r := range s.retired {
		switch {
		case strings.HasPrefix(r.Name, prefix):
			retired = append(retired, r.Layers)
			retiredDigests = append(retiredDigests, r.Digest)
		case !IsPrivate(r.Name):
			for _, l := range r.Layers {
				shared[l.DiffID] = true
			}
		}
	}
	s.mu.Unlock()
	// Asked without s.mu held (see Options.InUse). A retired image no
	// sandbox uses can no longer be started and goes at the next GC.
	for i, d := range retiredDigests {
		if s.inUse(d) > 0 {
			mine = append(mine, retired[i])
		}
	}
	seen := map[string]bool{}
	for _, layers := range mine {
		for _, l := range layers {
			if l.Charged > 0 && !shared[l.DiffID] && !seen[l.DiffID] {
				seen[l.DiffID] = true
				u.Bytes += l.Charged
			}
		}
	}
	slices.Sort(u.Templates)
	return u
}

// Key returns the store's key ("name:tag") of a template name, checked.
func Key(name string) (string, error) {
	r, err := parseRef(name)
	if err != nil {
		return "", err
	}
	return r.key(), nil
}

// FreeBytes returns the space of the store's filesystem unprivileged
// writers may still use.
func (s *Store) FreeBytes() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return 0, fmt.Errorf("template store: statfs: %w", err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// CheckFree refuses (sandbox.ClassNoSpace) when the store's filesystem has
// reserve bytes free or less; reserve <= 0 never refuses. The store shares
// that filesystem with sandbox disks and the state database (unless
// TEMPLATE_DIR moved it), so what it writes must not take the last of it.
func (s *Store) CheckFree(reserve int64) error {
	if reserve <= 0 {
		return nil
	}
	free, err := s.FreeBytes()
	if err != nil {
		return err
	}
	if free <= reserve {
		return sandbox.Errorf(sandbox.ClassNoSpace, "the server's template store has %s of disk space free, within the %s kept in reserve (DISK_RESERVE); nothing more is stored until space is freed",
			units.FormatBytes(free), units.FormatBytes(reserve))
	}
	return nil
}

// Charging granularity while a layer streams in: how many bytes pass
// between two calls of CommitOptions.Charge, and between two looks at the
// filesystem's free space. A layer overshoots a limit by at most that
// much before it is stopped (and then stores nothing).
const (
	chargeStep    = 1 << 20
	freeCheckStep = 8 << 20
)

// meterReader passes a layer tar through, telling opts.Charge of its
// bytes and checking opts.Reserve as it goes.
type meterReader struct {
	r    io.Reader
	s    *Store
	opts CommitOptions
	// total is every byte read; pending and unchecked those not yet
	// charged and read since the last free-space check.
	total, pending, unchecked int64
}

func (m *meterReader) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.total += int64(n)
	m.pending += int64(n)
	m.unchecked += int64(n)
	if m.pending >= chargeStep {
		if cerr := m.flush(); cerr != nil {
			return n, cerr
		}
	}
	if m.unchecked >= freeCheckStep {
		m.unchecked = 0
		if cerr := m.s.CheckFree(m.opts.Reserve); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

// flush charges the bytes read since the last charge.
func (m *meterReader) flush() error {
	n := m.pending
	m.pending = 0
	if m.opts.Charge == nil || n == 0 {
		return nil
	}
	return m.opts.Charge(n)
}

// finish settles the layer unpacked in dir, before it is installed: the
// rest of its tar's bytes, then what its tree takes on disk beyond them (a
// directory or a small file takes a whole block, more than its tar entry),
// plus blobBytes when a blob is kept. It returns the layer's charge (0
// without opts.Charge) after a last look at the free space.
func (m *meterReader) finish(dir string, blobBytes int64) (int64, error) {
	if err := m.flush(); err != nil {
		return 0, err
	}
	var charged int64
	if m.opts.Charge != nil {
		charged = m.total
		if disk := allocatedBytes(dir); disk > charged {
			if err := m.opts.Charge(disk - charged); err != nil {
				return 0, err
			}
			charged = disk
		}
		if blobBytes > 0 {
			if err := m.opts.Charge(blobBytes); err != nil {
				return 0, err
			}
			charged += blobBytes
		}
	}
	if err := m.s.CheckFree(m.opts.Reserve); err != nil {
		return 0, err
	}
	return charged, nil
}

// allocatedBytes sums the blocks every entry under dir takes (not the
// apparent size: holes cost nothing, a directory a block).
func allocatedBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}
