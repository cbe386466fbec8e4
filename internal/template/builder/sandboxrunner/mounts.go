package sandboxrunner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/builder"
)

// mounts are one step's extra mounts and the host files behind them.
type mounts struct {
	tmp      string
	spec     []sandbox.Mount
	targets  []string // mount targets in the sandbox: never in the layer
	secrets  []secretFile
	caches   []string // host dirs of cache mounts, in the resting ids between steps
	cacheIDs []string // lock keys, sorted
	tmpfs    []string
	binds    []string // host mount points of bind views
}

type secretFile struct {
	path     string
	uid, gid uint32
	mode     uint32
}

// prepare makes the host side of step's mounts.
func (r *Runner) prepare(m *mounts, step builder.RunStep) error {
	seen := map[string]bool{}
	target := func(t string) (string, error) {
		t = path.Clean("/" + t)
		if t == "/" {
			return "", sandbox.Errorf(sandbox.ClassInvalid, "a mount target may not be /")
		}
		if seen[t] {
			return "", sandbox.Errorf(sandbox.ClassInvalid, "two mounts at %s", t)
		}
		seen[t] = true
		m.targets = append(m.targets, t)
		return t, nil
	}
	for i, s := range step.Secrets {
		if s.Target == "" {
			continue // environment only
		}
		t, err := target(s.Target)
		if err != nil {
			return err
		}
		// Host root's until own() gives it to the step's user: nothing in
		// the sandbox can read it before.
		p := filepath.Join(m.tmp, "secret-"+strconv.Itoa(i))
		if err := os.WriteFile(p, s.Data, 0o400); err != nil {
			return fmt.Errorf("secret %s: %w", s.ID, err)
		}
		mode := s.Mode
		if mode == 0 {
			mode = 0o400
		}
		m.secrets = append(m.secrets, secretFile{path: p, uid: s.UID, gid: s.GID, mode: mode & 0o777})
		m.spec = append(m.spec, sandbox.Mount{Source: p, Target: t, ReadOnly: true})
	}
	for _, c := range step.Caches {
		t, err := target(c.Target)
		if err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(c.ID))
		key := hex.EncodeToString(sum[:16])
		dir := filepath.Join(r.cfg.Dir, "cache", key)
		if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return fmt.Errorf("cache %s: %w", c.ID, err)
			}
			// In the resting ids (image ids where sandboxes map none):
			// shifted into the sandbox's range by own(). No set-uid bit:
			// it means nothing on a directory.
			rest, _ := r.cfg.IDs.resting()
			if err := os.Lchown(dir, int(rest.uid(c.UID)), int(rest.gid(c.GID))); err != nil {
				return err
			}
			if err := os.Chmod(dir, modeBits(c.Mode&0o3777)|0o700); err != nil {
				return err
			}
		}
		m.caches = append(m.caches, dir)
		m.cacheIDs = append(m.cacheIDs, key)
		m.spec = append(m.spec, sandbox.Mount{Source: dir, Target: t, ReadOnly: c.ReadOnly})
	}
	sort.Strings(m.cacheIDs)
	for i, b := range step.Binds {
		t, err := target(b.Target)
		if err != nil {
			return err
		}
		if b.ReadWrite {
			return sandbox.Errorf(sandbox.ClassInvalid, "--mount=type=bind,rw at %s: writable bind mounts are not supported; bind read-only (the default) or COPY --from", t)
		}
		src, err := m.bindView(i, b)
		if err != nil {
			return fmt.Errorf("--mount=type=bind at %s: %w", t, err)
		}
		m.spec = append(m.spec, sandbox.Mount{Source: src, Target: t, ReadOnly: true})
	}
	for i, tf := range step.Tmpfs {
		t, err := target(tf.Target)
		if err != nil {
			return err
		}
		// A throw-away directory of the step (tmpfs size limits do not
		// apply: it is on the daemon's disk for one step).
		dir := filepath.Join(m.tmp, "tmpfs-"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		m.tmpfs = append(m.tmpfs, dir)
		m.spec = append(m.spec, sandbox.Mount{Source: dir, Target: t})
	}
	return nil
}

// bindView mounts a read-only view of b.From on the host and returns the
// path of b.Source in it (resolved inside the view).
func (m *mounts) bindView(i int, b builder.BindMount) (string, error) {
	dir := filepath.Join(m.tmp, "bind-"+strconv.Itoa(i))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	var err error
	switch {
	case b.From.Kind == sandbox.TemplateDir:
		err = bindReadOnly(b.From.Dir, dir)
	case b.From.Kind != sandbox.TemplateImage:
		return "", sandbox.Errorf(sandbox.ClassInvalid, "cannot bind from a %s template", b.From.Kind)
	case len(b.From.Layers) == 0:
		return "", sandbox.Errorf(sandbox.ClassInvalid, "the stage has no files (FROM scratch)")
	case len(b.From.Layers) == 1:
		err = bindReadOnly(b.From.Layers[0], dir)
	default:
		err = overlayReadOnly(b.From.Layers, dir)
	}
	if err != nil {
		return "", err
	}
	m.binds = append(m.binds, dir)
	src, err := securejoin.SecureJoin(dir, b.Source)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(src); err != nil {
		return "", sandbox.Errorf(sandbox.ClassInvalid, "%s: not found", b.Source)
	}
	return src, nil
}

func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return fmt.Errorf("read-only bind: %w", err)
	}
	return nil
}

// overlayReadOnly mounts the layers (lowest first) as one read-only view.
func overlayReadOnly(layers []string, dst string) error {
	lower := make([]string, len(layers))
	for i, l := range layers {
		if strings.ContainsAny(l, ":,\\\n") {
			return fmt.Errorf("layer path %q contains an overlay option separator", l)
		}
		lower[len(layers)-1-i] = l
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",redirect_dir=off,metacopy=off"
	if len(opts) >= unix.Getpagesize() {
		return sandbox.Errorf(sandbox.ClassInvalid, "the stage has too many layers (%d) for one overlay mount", len(layers))
	}
	if err := unix.Mount("overlay", dst, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount stage view: %w", err)
	}
	return nil
}

// own gives the step's files to the sandbox's ids: secrets to their
// uid/gid, cache directories from their resting ids to the same ids in its
// range, tmpfs directories to its root.
func (m *mounts) own(area HostIDs, ids idMap) error {
	for _, s := range m.secrets {
		if err := os.Lchown(s.path, int(ids.uid(s.uid)), int(ids.gid(s.gid))); err != nil {
			return fmt.Errorf("secret file: %w", err)
		}
		if err := os.Chmod(s.path, os.FileMode(s.mode)); err != nil {
			return err
		}
	}
	for _, d := range m.tmpfs {
		if err := os.Lchown(d, int(ids.uid(0)), int(ids.gid(0))); err != nil {
			return err
		}
		if err := os.Chmod(d, os.ModePerm|os.ModeSticky); err != nil {
			return err
		}
	}
	if len(m.caches) == 0 || ids.identity() {
		return nil
	}
	if _, ok := area.resting(); !ok {
		// Between steps the files would belong to host accounts.
		return sandbox.Errorf(sandbox.ClassUnavailable, "cache mounts need a host id range no sandbox uses (SANDBOX_ID_RANGES of 2 or more)")
	}
	if ids.size < rangeSize {
		return fmt.Errorf("cache mount: the build sandbox maps %d ids, not %d", ids.size, rangeSize)
	}
	for _, d := range m.caches {
		if err := os.Remove(restMarker(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cache mount: %w", err)
		}
		if err := reownTree(d, area, ids, false); err != nil {
			return fmt.Errorf("cache mount: %w", err)
		}
	}
	return nil
}

// rest gives the step's cache directories back to the resting ids once
// its sandbox (ids) is gone, without set-uid or set-gid files.
func (r *Runner) rest(m *mounts, ids idMap) {
	rest, ok := r.cfg.IDs.resting()
	if !ok || ids.identity() {
		return
	}
	for _, d := range m.caches {
		r.toRest(d, rest)
	}
}

// restMarker is the path of the file that says the files of cache
// directory d (Dir/cache/KEY) are at rest, in the range it names:
// Dir/cache-rest/KEY, written once they are and removed before they leave
// it, so a daemon that starts after a crash knows which caches to walk.
func restMarker(d string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(d)), "cache-rest", filepath.Base(d))
}

func restMarkerData(rest idMap) string { return strconv.FormatUint(uint64(rest.uidBase), 10) }

// toRest gives the cache directory d its owners at rest (see HostIDs). A
// cache that cannot be brought to rest is removed: it must not stay in a
// range the next sandbox may be given, nor in host accounts' ids.
func (r *Runner) toRest(d string, rest idMap) {
	err := reownTree(d, r.cfg.IDs, rest, true)
	if err == nil {
		err = os.WriteFile(restMarker(d), []byte(restMarkerData(rest)), 0o600)
		if err == nil {
			return
		}
	}
	r.log.Warn("build cache removed: its files could not be given their owners at rest", "cache", filepath.Base(d), "err", err)
	_ = os.Remove(restMarker(d))
	if err := os.RemoveAll(d); err != nil {
		r.log.Error("remove build cache", "cache", filepath.Base(d), "err", err)
	}
}

func (m *mounts) cleanup() {
	for _, d := range m.binds {
		_ = unix.Unmount(d, unix.MNT_DETACH)
	}
	_ = os.RemoveAll(m.tmp)
}

// unmountAll unmounts bind views a crashed daemon left in a step dir.
func unmountAll(stepDir string) {
	matches, _ := filepath.Glob(filepath.Join(stepDir, "bind-*"))
	for _, d := range matches {
		_ = unix.Unmount(d, unix.MNT_DETACH)
	}
}

// maxCacheDepth bounds how deep a cache's directories may nest (the walk
// holds a descriptor per level).
const maxCacheDepth = 256

// reownTree gives every entry of dir, dir included, the id its owner stands
// for (HostIDs.offset) in the range to, and with strip clears the set-uid
// and set-gid bits of everything but directories (chown clears them on
// regular files anyway; a directory's set-gid bit only passes its group
// on). Symlinks are never followed: each entry is opened from its
// directory's descriptor with O_PATH|O_NOFOLLOW and changed through that
// descriptor, so a tree that changes during the walk cannot send it
// elsewhere.
func reownTree(dir string, area HostIDs, to idMap, strip bool) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	w := reowner{area: area, to: to, strip: strip}
	if err := w.entry(fd, 0); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return nil
}

type reowner struct {
	area  HostIDs
	to    idMap
	strip bool
}

// entry reowns the file fd (an O_PATH descriptor) and, for a directory,
// everything below it.
func (w reowner) entry(fd, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	uid, gid := w.to.uid(w.area.offset(st.Uid)), w.to.gid(w.area.offset(st.Gid))
	if uid != st.Uid || gid != st.Gid {
		if err := unix.Fchownat(fd, "", int(uid), int(gid), unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	typ := st.Mode & unix.S_IFMT
	if w.strip && typ != unix.S_IFDIR && typ != unix.S_IFLNK && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		// chmod has no O_PATH form but the descriptor's /proc link.
		if err := unix.Chmod(procFd(fd), st.Mode&^(unix.S_IFMT|unix.S_ISUID|unix.S_ISGID)); err != nil {
			return fmt.Errorf("clear set-id bits: %w", err)
		}
	}
	if typ != unix.S_IFDIR {
		return nil
	}
	if depth >= maxCacheDepth {
		return fmt.Errorf("directories nest deeper than %d", maxCacheDepth)
	}
	// The same directory, opened for reading its entries.
	dfd, err := unix.Open(procFd(fd), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(dfd), "dir")
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(1024)
		for _, name := range names {
			cfd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			err = w.entry(cfd, depth+1)
			unix.Close(cfd)
			if err != nil {
				return fmt.Errorf("%s/%w", name, err)
			}
		}
		if errors.Is(err, io.EOF) || err == nil && len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// modeBits turns the permission and set-id bits of a Unix mode into an
// os.FileMode.
func modeBits(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}
