package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// MaxMounts caps the volumes one sandbox mounts.
const MaxMounts = 16

// Mounts turn a sandbox's volume requests into the host bind mounts the
// backend makes. A volume's whole tree is its mount point; a subpath is
// opened beneath it with every symlink refused (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) and bind-mounted from that descriptor onto a
// staging point of the sandbox's own (BindDir/<sandbox>/<n>), so nothing
// a sandbox does inside the volume — a directory swapped for a symlink —
// can send the mount elsewhere between the check and the mount. The
// staging mounts live as long as the sandbox (Release).

// CheckMounts refuses malformed requests before anything is made.
func CheckMounts(ms []sandbox.VolumeMount) error {
	if len(ms) > MaxMounts {
		return sandbox.Invalid("volumes", "%d volume mounts, at most %d allowed", len(ms), MaxMounts)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if err := CheckName(m.Name); err != nil {
			return err
		}
		p := m.Path
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" || len(p) > 1024 || strings.ContainsAny(p, "\x00:,") {
			return sandbox.Invalid("volumes", "volume %q: mount path %.100q must be a clean absolute path other than / (no '..', ':' or ',')", m.Name, p)
		}
		if seen[p] {
			return sandbox.Invalid("volumes", "two volumes mounted at %q", p)
		}
		seen[p] = true
		if _, err := cleanSub(m.SubPath); err != nil {
			return sandbox.Invalid("volumes", "volume %q: %v", m.Name, err)
		}
	}
	// A mount inside another would hide it or be hidden.
	for a := range seen {
		for b := range seen {
			if a != b && strings.HasPrefix(b, a+"/") {
				return sandbox.Invalid("volumes", "volume mount %q is inside volume mount %q", b, a)
			}
		}
	}
	return nil
}

// cleanSub is a subpath relative to the volume root ("" for the root);
// any '..' is refused rather than resolved.
func cleanSub(sub string) (string, error) {
	sub = strings.Trim(sub, "/")
	if sub == "" || sub == "." {
		return "", nil
	}
	if len(sub) > 1024 || strings.ContainsRune(sub, 0) {
		return "", errors.New("subpath is too long or contains NUL")
	}
	for _, part := range strings.Split(sub, "/") {
		if part == ".." {
			return "", errors.New("subpath may not contain '..'")
		}
	}
	return path.Clean(sub), nil
}

// Attach resolves owner's volume mounts for sandbox id into bind mounts:
// every volume must be owner's and on this replica. On error nothing
// stays behind.
func (s *Service) Attach(ctx context.Context, owner string, id sandbox.ID, ms []sandbox.VolumeMount) (out []sandbox.Mount, err error) {
	if len(ms) == 0 {
		return nil, nil
	}
	if err := CheckMounts(ms); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Release(id)
		}
	}()
	for i, m := range ms {
		v, err := s.Get(ctx, owner, m.Name)
		if err != nil {
			return nil, err
		}
		root, err := s.Path(ctx, v)
		if err != nil {
			return nil, err
		}
		src := root
		if sub, _ := cleanSub(m.SubPath); sub != "" {
			if src, err = s.stage(root, sub, id, i); err != nil {
				return nil, fmt.Errorf("volume %q: %w", m.Name, err)
			}
		}
		out = append(out, sandbox.Mount{Source: src, Target: m.Path, ReadOnly: m.ReadOnly, IDMapped: true})
	}
	return out, nil
}

func (s *Service) bindDir(id sandbox.ID) string {
	return filepath.Join(s.cfg.BindDir, string(id))
}

// stage bind-mounts root/sub onto a staging point of sandbox id.
func (s *Service) stage(root, sub string, id sandbox.ID, n int) (string, error) {
	if s.cfg.BindDir == "" {
		return "", sandbox.Errorf(sandbox.ClassUnavailable, "this server does not mount volume subpaths")
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	// Created when missing, as the sandbox user's (os.Root keeps it
	// inside the volume).
	if err := mkdirAllOwned(r, sub); err != nil {
		return "", fmt.Errorf("create subpath %q: %w", sub, err)
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(rootFd)
	fd, err := unix.Openat2(rootFd, sub, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return "", sandbox.Invalid("volumes", "subpath %q is not a directory of the volume (symlinks are not followed): %v", sub, err)
	}
	defer unix.Close(fd)
	dir := s.bindDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	target := filepath.Join(dir, strconv.Itoa(n))
	if err := os.Mkdir(target, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(target)
		return "", fmt.Errorf("bind subpath: %w", err)
	}
	return target, nil
}

func mkdirAllOwned(r *os.Root, sub string) error {
	parts := strings.Split(sub, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := r.Mkdir(p, 0o755)
		if err == nil {
			_ = r.Lchown(p, sandboxUser, sandboxUser)
			continue
		}
		if !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// Release unmounts sandbox id's staging mounts (its sandbox is gone).
func (s *Service) Release(id sandbox.ID) {
	if s.cfg.BindDir == "" {
		return
	}
	dir := s.bindDir(id)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if mounted, err := mountinfo.Mounted(p); err == nil && mounted {
			if unix.Unmount(p, 0) != nil {
				_ = unix.Unmount(p, unix.MNT_DETACH)
			}
		}
		_ = os.Remove(p)
	}
	_ = os.Remove(dir)
}

// Sweep releases the staging mounts of sandboxes live no longer reports
// (they ended while the daemon was away).
func (s *Service) Sweep(live func(sandbox.ID) bool) {
	if s.cfg.BindDir == "" {
		return
	}
	ents, err := os.ReadDir(s.cfg.BindDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if id := sandbox.ID(e.Name()); !live(id) {
			s.Release(id)
		}
	}
}
