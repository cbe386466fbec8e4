package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// A template is what a sandbox's root filesystem is made of.
type template struct {
	kind string // "host" or "dir"
	dir  string // for "dir": the unpacked root filesystem
}

func parseTemplate(name string) (template, error) {
	switch {
	case name == "" || name == "host":
		return template{kind: "host"}, nil
	case strings.HasPrefix(name, "dir:"):
		dir := filepath.Clean(strings.TrimPrefix(name, "dir:"))
		if !filepath.IsAbs(dir) {
			return template{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q: the directory must be an absolute path", name)
		}
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() {
			return template{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q: %s is not a directory", name, dir)
		}
		if dir == "/" {
			return template{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q: the host root cannot be a template (use \"host\")", name)
		}
		return template{kind: "dir", dir: dir}, nil
	}
	return template{}, sandbox.Errorf(sandbox.ClassInvalid, "unknown template %q (want \"host\" or \"dir:/path\")", name)
}

// hostTopLevel lists the top-level entries of a merged-/usr host that the
// host template reproduces: symlinks stay symlinks, real directories (on
// hosts without merged /usr) are bind-mounted read-only.
var hostTopLevel = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// Directories every rootfs skeleton has; mount points and the standard
// hierarchy programs expect.
var skeletonDirs = []string{
	"usr", "etc", "proc", "sys", "dev", "tmp", "run", "var", "var/tmp", "var/lib", "var/cache",
	"workspace", "home", "home/user", "root", "opt", "srv", "mnt", "media", ".agentbox",
}

// hostSkeleton populates rootfs with the host template's directory skeleton.
// It is written once into the cached disk template image.
func hostSkeleton(rootfs string) error {
	for _, d := range skeletonDirs {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(rootfs, "var/tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, ".agentbox", "agent"), nil, 0o755); err != nil {
		return err
	}
	for _, name := range hostTopLevel {
		host := filepath.Join("/", name)
		fi, err := os.Lstat(host)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		dst := filepath.Join(rootfs, name)
		if fi.Mode()&os.ModeSymlink != 0 {
			link, err := os.Readlink(host)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, dst); err != nil {
				return fmt.Errorf("skeleton link %s: %w", name, err)
			}
			continue
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// hostBindDirs returns the top-level host directories that are real
// directories (not merged-/usr symlinks) and must be bind-mounted.
func hostBindDirs() []string {
	dirs := []string{"/usr"}
	for _, name := range hostTopLevel {
		host := filepath.Join("/", name)
		if fi, err := os.Lstat(host); err == nil && fi.IsDir() {
			dirs = append(dirs, host)
		}
	}
	return dirs
}
