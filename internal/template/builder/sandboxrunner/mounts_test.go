package sandboxrunner

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

type noSandboxes struct{}

func (noSandboxes) RunBuildSandbox(context.Context, sandbox.Spec, func(context.Context, manager.BuildSandbox) error) error {
	return sandbox.Errorf(sandbox.ClassUnavailable, "no sandboxes in this test")
}
func (noSandboxes) NetworkAvailable() bool { return false }

// owner is what one entry of a cache should be: uid and gid relative to
// the range it should be in, its permission and set-id bits.
type owner struct {
	uid, gid uint32
	mode     fs.FileMode
}

// makeTree makes the entries (name → owner in host ids and mode) under dir,
// in order; a mode with fs.ModeSymlink makes a link to the name in link.
func makeTree(t *testing.T, dir string, entries []treeEntry) {
	t.Helper()
	for _, e := range entries {
		p := filepath.Join(dir, e.name)
		switch {
		case e.link != "":
			if err := os.Symlink(e.link, p); err != nil {
				t.Fatal(err)
			}
		case e.hardlink != "":
			if err := os.Link(filepath.Join(dir, e.hardlink), p); err != nil {
				t.Fatal(err)
			}
			continue
		case e.mode.IsDir():
			if err := os.Mkdir(p, 0o700); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Lchown(p, int(e.uid), int(e.gid)); err != nil {
			t.Fatal(err)
		}
		if e.link == "" {
			if err := os.Chmod(p, e.mode&^fs.ModeDir); err != nil {
				t.Fatal(err)
			}
		}
	}
}

type treeEntry struct {
	name           string
	uid, gid       uint32
	mode           fs.FileMode
	link, hardlink string
}

// checkTree compares every entry under dir with want (names relative to
// dir, "." for dir), owners relative to base.
func checkTree(t *testing.T, dir string, base uint32, want map[string]owner) {
	t.Helper()
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		w, ok := want[rel]
		if !ok {
			t.Errorf("%s: unexpected", rel)
			return nil
		}
		seen++
		if st.Uid != base+w.uid || st.Gid != base+w.gid {
			t.Errorf("%s: owner %d:%d, want %d:%d", rel, st.Uid, st.Gid, base+w.uid, base+w.gid)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if got := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky); got != w.mode {
				t.Errorf("%s: mode %v, want %v", rel, got, w.mode)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Errorf("saw %d entries, want %d", seen, len(want))
	}
}

// TestSecurityCacheAtRest: between steps a cache mount's files belong to
// the resting id range, which no sandbox and no host account has, and
// hold no set-uid or set-gid file, whatever the step left there (set-uid
// root, world-writable directories, links out, ids it could not map); the
// next step's sandbox gets them in its own range with the ids they had.
// Caches an earlier version kept in image ids (host root's) are brought
// to rest when the runner starts.
func TestSecurityCacheAtRest(t *testing.T) {
	testutil.RequireRoot(t)
	const base = 1 << 30
	area := HostIDs{Base: base, Ranges: 4, Resting: base + 3*rangeSize}
	step := idMap{uidBase: base + rangeSize, gidBase: base + rangeSize, size: rangeSize}
	next := idMap{uidBase: base + 2*rangeSize, gidBase: base + 2*rangeSize, size: rangeSize}
	dir := t.TempDir()
	r, err := New(Config{Sandboxes: noSandboxes{}, Dir: dir, IDs: area})
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	if err := os.MkdirAll(filepath.Join(cache, "k1"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Outside the cache: what links in it point to, host root's.
	outside := filepath.Join(dir, "outside")
	makeTree(t, dir, []treeEntry{
		{name: "outside", mode: fs.ModeDir | 0o755},
		{name: "outside/suid", mode: 0o755 | fs.ModeSetuid},
	})

	// What a step (root in its sandbox, host id step+0) leaves.
	s := step.uidBase
	makeTree(t, filepath.Join(cache, "k1"), []treeEntry{
		{name: ".", uid: s, gid: s, mode: fs.ModeDir | 0o755},
		{name: "suidbb", uid: s, gid: s, mode: 0o755 | fs.ModeSetuid},
		{name: "sgid", uid: s + 1000, gid: s + 1000, mode: 0o755 | fs.ModeSetgid},
		// Set-gid without group execute survives chown.
		{name: "sgid-noexec", uid: s + 1000, gid: s + 1000, mode: 0o644 | fs.ModeSetgid},
		{name: "ww", uid: s, gid: s, mode: fs.ModeDir | 0o777},
		{name: "ww/shared", uid: s + 1000, gid: s + 100, mode: fs.ModeDir | 0o775 | fs.ModeSetgid | fs.ModeSticky},
		{name: "ww/shared/f", uid: s + 1000, gid: s + 100, mode: 0o666},
		{name: "hard", hardlink: "suidbb"},
		{name: "out", uid: s, gid: s, link: outside},
		{name: "outfile", uid: s, gid: s, link: filepath.Join(outside, "suid")},
		// An id no sandbox could have made.
		{name: "stray", uid: 4242424, gid: 0, mode: 0o644},
	})
	m := &mounts{caches: []string{filepath.Join(cache, "k1")}}
	r.rest(m, step)
	atRest := map[string]owner{
		".":           {0, 0, 0o755},
		"suidbb":      {0, 0, 0o755},
		"hard":        {0, 0, 0o755},
		"sgid":        {1000, 1000, 0o755},
		"sgid-noexec": {1000, 1000, 0o644},
		"ww":          {0, 0, 0o777},
		"ww/shared":   {1000, 100, 0o775 | fs.ModeSetgid | fs.ModeSticky},
		"ww/shared/f": {1000, 100, 0o666},
		"out":         {0, 0, 0},
		"outfile":     {0, 0, 0},
		"stray":       {nobodyID, 0, 0o644},
	}
	checkTree(t, filepath.Join(cache, "k1"), area.Resting, atRest)
	// Nothing outside was touched through the links.
	checkTree(t, outside, 0, map[string]owner{".": {0, 0, 0o755}, "suid": {0, 0, 0o755 | fs.ModeSetuid}})

	// The next step gets the same ids in its own range.
	if err := m.own(area, next); err != nil {
		t.Fatal(err)
	}
	checkTree(t, filepath.Join(cache, "k1"), next.uidBase, atRest)
	r.rest(m, next)
	checkTree(t, filepath.Join(cache, "k1"), area.Resting, atRest)

	// Without a resting range, a sandbox that maps its ids gets no cache.
	if err := m.own(HostIDs{Base: base, Ranges: 4}, next); err == nil {
		t.Error("a cache mount was shifted into a sandbox with no resting range")
	}

	if _, err := os.Stat(filepath.Join(dir, "cache-rest", "k1")); err != nil {
		t.Fatalf("no rest marker: %v", err)
	}

	// A step the daemon crashed in leaves its cache in the step's range;
	// a cache in image ids (an earlier version's), root's set-uid file
	// included: both are brought to rest when the runner starts.
	if err := m.own(area, next); err != nil {
		t.Fatal(err)
	}
	makeTree(t, filepath.Join(cache, "legacy"), []treeEntry{
		{name: ".", mode: fs.ModeDir | 0o755},
		{name: "suidbb", mode: 0o755 | fs.ModeSetuid},
		{name: "ww", mode: fs.ModeDir | 0o777},
		{name: "ww/f", uid: 1000, gid: 1000, mode: 0o644},
	})
	if _, err := New(Config{Sandboxes: noSandboxes{}, Dir: dir, IDs: area}); err != nil {
		t.Fatal(err)
	}
	checkTree(t, filepath.Join(cache, "legacy"), area.Resting, map[string]owner{
		".":      {0, 0, 0o755},
		"suidbb": {0, 0, 0o755},
		"ww":     {0, 0, 0o777},
		"ww/f":   {1000, 1000, 0o644},
	})
	checkTree(t, filepath.Join(cache, "k1"), area.Resting, atRest)
}
