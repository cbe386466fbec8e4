package sandboxrunner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

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
	caches   []string // host dirs of cache mounts, in image ids between steps
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
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("cache %s: %w", c.ID, err)
			}
			// In image ids: shifted into the sandbox's range by own().
			if err := os.Chmod(dir, os.FileMode(c.Mode&0o7777)|0o700); err != nil {
				return err
			}
			if err := os.Lchown(dir, int(c.UID), int(c.GID)); err != nil {
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
// uid/gid, cache directories shifted from image ids into its range,
// tmpfs directories to its root.
func (m *mounts) own(ids idMap) error {
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
	for _, d := range m.caches {
		if err := shiftTree(d, ids, true); err != nil {
			return fmt.Errorf("cache mount: %w", err)
		}
	}
	return nil
}

// disown shifts cache directories back to image ids, so the next step's
// sandbox (another id range) can own them again.
func (m *mounts) disown(ids idMap) {
	for _, d := range m.caches {
		if err := shiftTree(d, ids, false); err != nil {
			// The next step shifts what it finds; ids outside a range stay.
			_ = err
		}
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

// shiftTree moves every owner in dir between image ids and the sandbox's
// host ids (in: image -> host). Symlinks are not followed.
func shiftTree(dir string, ids idMap, in bool) error {
	if ids.identity() {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		uid, gid, ok := ids.shift(st.Uid, st.Gid, in)
		if !ok {
			return nil
		}
		if err := os.Lchown(p, int(uid), int(gid)); err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			// chown clears set-id bits; keep what the step set.
			_ = os.Chmod(p, fi.Mode()&fs.ModePerm|fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
		}
		return nil
	})
}
