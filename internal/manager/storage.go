package manager

import (
	"context"
	"slices"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/units"
)

// Tenant-owned storage: what a user keeps in the daemon's data dir beyond
// a sandbox's life is charged to one account per user, capped by
// Config.StorageQuota bytes. Private templates (snapshots) are charged
// now; volumes are meant to add their bytes to storedUsage and charge
// their writes through the same storageCharge, so that one quota bounds
// everything a tenant can make the server keep. Template admins are the
// operator: their snapshots are not charged (the disk reserve and
// admission still apply to them).
//
// A write in progress is charged as it streams (pending bytes, seen by
// every other write of the same user), so concurrent snapshots cannot
// each take the whole remaining quota; once it ends, what it stored is
// in the store's own figures.

// storageAccount holds every user's writes in progress.
type storageAccount struct {
	mu    sync.Mutex
	users map[string]*storageUser
}

type storageUser struct {
	pending      int64 // bytes of writes in progress
	pendingNames int   // new private template names being written
	charges      int   // writes in progress
	// gen changes whenever a write of the user ends: its bytes move from
	// pending into the store's figures, so cached figures are stale.
	gen uint64
}

// user returns owner's entry; a.mu is held.
func (a *storageAccount) user(owner string) *storageUser {
	if a.users == nil {
		a.users = map[string]*storageUser{}
	}
	u := a.users[owner]
	if u == nil {
		u = &storageUser{}
		a.users[owner] = u
	}
	return u
}

// storedUsage is what owner's content holds now, writes in progress not
// included. (Volumes: add theirs here.)
func (m *Manager) storedUsage(owner string) template.Usage {
	var u template.Usage
	if m.cfg.Committer != nil {
		u = m.cfg.Committer.PrivateUsage(owner)
	}
	if m.cfg.Volumes != nil {
		// A volume holds its whole size (its blocks are reserved at create).
		if n, err := m.cfg.Volumes.Bytes(context.Background(), owner); err == nil {
			u.Bytes += n
		}
	}
	return u
}

// storageCharge is one write in progress of owner's (a snapshot).
type storageCharge struct {
	m       *Manager
	owner   string
	enforce bool  // false: a template admin's, counted nowhere
	n       int64 // bytes charged so far
	newName bool  // it holds one of pendingNames
	// stored is owner's stored bytes as last read, at generation gen.
	stored int64
	gen    uint64
	ended  bool
}

// startSnapshotCharge opens the charge of a snapshot of owner's into
// template name (already in owner's namespace): refused when owner's
// templates already fill the quota, or when name is new and owner has
// the most private templates allowed.
func (m *Manager) startSnapshotCharge(owner, name string) (*storageCharge, error) {
	c := &storageCharge{m: m, owner: owner, enforce: !m.isTemplateAdmin(owner)}
	if !c.enforce {
		return c, nil
	}
	key, err := template.Key(name)
	if err != nil {
		return nil, err
	}
	a := &m.storage
	a.mu.Lock()
	u := a.user(owner)
	u.charges++
	c.gen = u.gen
	a.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			c.end()
		}
	}()
	usage := m.storedUsage(owner)
	c.stored = usage.Bytes
	a.mu.Lock()
	defer a.mu.Unlock()
	if q := m.cfg.StorageQuota; q > 0 && c.stored+u.pending >= q {
		return nil, m.quotaError(c.stored, u.pending, false)
	}
	if max := m.cfg.MaxPrivateTemplates; max > 0 && !slices.Contains(usage.Templates, key) {
		if len(usage.Templates)+u.pendingNames >= max {
			return nil, sandbox.Errorf(sandbox.ClassQuota, "you have %d private templates (snapshots), the most one user may keep (MAX_TEMPLATES_PER_USER); delete one, or snapshot into a name you have", len(usage.Templates)+u.pendingNames)
		}
		u.pendingNames++
		c.newName = true
	}
	ok = true
	return c, nil
}

// quotaError refuses a snapshot at its start (streaming false: pending
// are other snapshots) or while its layer streams in (pending includes
// it).
func (m *Manager) quotaError(stored, pending int64, streaming bool) error {
	msg := "your private templates hold " + units.FormatBytes(stored)
	switch {
	case streaming:
		msg += " and snapshots in progress, this one included, " + units.FormatBytes(pending)
	case pending > 0:
		msg += " and snapshots in progress " + units.FormatBytes(pending)
	}
	return sandbox.Errorf(sandbox.ClassQuota, "storage quota exceeded: %s of your %s (STORAGE_QUOTA_PER_USER); delete private templates you no longer need",
		msg, units.FormatBytes(m.cfg.StorageQuota))
}

// add charges n more bytes (template.CommitOptions.Charge): an error stops
// the write, which then stores nothing.
func (c *storageCharge) add(n int64) error {
	c.n += n
	if !c.enforce {
		return nil
	}
	a := &c.m.storage
	a.mu.Lock()
	u := a.user(c.owner)
	u.pending += n
	a.mu.Unlock()
	if limit := c.m.cfg.SnapshotMaxBytes; limit > 0 && c.n > limit {
		return sandbox.Errorf(sandbox.ClassTooLarge, "the snapshot's layer is over %s, the most one snapshot may add (SNAPSHOT_MAX_SIZE; files count at their full size, the holes of sparse files included)",
			units.FormatBytes(limit))
	}
	q := c.m.cfg.StorageQuota
	if q <= 0 {
		return nil
	}
	for fresh := false; ; fresh = true {
		a.mu.Lock()
		pending, gen := u.pending, u.gen
		a.mu.Unlock()
		if gen != c.gen {
			c.refresh(gen)
			fresh = true
		}
		if c.stored+pending <= q {
			return nil
		}
		if fresh {
			return c.m.quotaError(c.stored, pending, true)
		}
		// The figures may predate a delete: read them again before refusing.
		c.refresh(gen)
	}
}

// refresh reads owner's stored bytes again, as of generation gen.
func (c *storageCharge) refresh(gen uint64) {
	c.stored = c.m.storedUsage(c.owner).Bytes
	c.gen = gen
}

// end closes the charge once the write stored its layer or failed: its
// pending bytes and name go (a stored layer is in the store's figures by
// now).
func (c *storageCharge) end() {
	if c.ended || !c.enforce {
		return
	}
	c.ended = true
	a := &c.m.storage
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.user(c.owner)
	u.pending -= c.n
	if c.newName {
		u.pendingNames--
	}
	u.charges--
	u.gen++
	if u.charges == 0 {
		delete(a.users, c.owner)
	}
}
