package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// A template is what a sandbox's root filesystem is made of.
type template struct {
	kind string // "host" or "dir"
	dir  string // for "dir": the unpacked root filesystem
}

// parseTemplate resolves a template name. private lists host directories
// no template may come from or contain (the daemon's data dir, tenants'
// workspaces).
func parseTemplate(name string, private []string) (template, error) {
	switch {
	case name == "" || name == "host":
		return template{kind: "host"}, nil
	case strings.HasPrefix(name, "dir:"):
		dir, err := checkTemplateDir(strings.TrimPrefix(name, "dir:"), private)
		if err != nil {
			return template{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("template %q: %v", name, err))
		}
		return template{kind: "dir", dir: dir}, nil
	}
	return template{}, sandbox.Errorf(sandbox.ClassInvalid, "unknown template %q (want \"host\" or \"dir:/path\")", name)
}

// parseTemplate resolves a template name against this backend's private
// directories.
func (b *Backend) parseTemplate(name string) (template, error) {
	return parseTemplate(name, b.privateDirs)
}

// CheckTemplate reports whether name is a template this backend can boot
// (the daemon checks its configured templates at start with it).
func (b *Backend) CheckTemplate(name string) error {
	tmpl, err := b.parseTemplate(name)
	if err == nil && b.rootless && tmpl.kind != "host" {
		return fmt.Errorf("template %q needs a root daemon (overlayfs); a rootless daemon has only \"host\"", name)
	}
	return err
}

// Host directories whose contents belong to the kernel or to running
// programs, never to a root filesystem.
var pseudoDirs = []string{"/proc", "/sys", "/dev", "/run"}

// Filesystems a template directory may not live on: kernel interfaces
// whose contents describe the host (processes, cgroups, devices, keys).
var pseudoFilesystems = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "proc",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.BPF_FS_MAGIC:        "bpf",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.NSFS_MAGIC:          "nsfs",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
}

// checkTemplateDir validates the host directory of a dir: template and
// returns it. The directory becomes an overlay lower layer, so it must be
// exactly what the operator named: an absolute clean path whose every
// component is a real directory (no symlink anywhere: a link to / or into
// the data dir would defeat the checks below), with no character that the
// overlay option parser reads as a separator (":" stacks lower layers, ","
// starts another option, "\" escapes). It may not be the host root, a
// pseudo filesystem, or inside or above a private directory.
func checkTemplateDir(dir string, private []string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", errors.New("the directory must be an absolute path")
	}
	if c := filepath.Clean(dir); c != dir {
		return "", fmt.Errorf("the path must be clean (%s)", c)
	}
	for _, r := range dir {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError || unicode.IsSpace(r) || strings.ContainsRune(":,\\", r) {
			return "", fmt.Errorf("the path contains %q; template directories may not contain ':', ',', '\\', spaces or control characters", r)
		}
	}
	if dir == "/" {
		return "", errors.New("the host root cannot be a template (use \"host\")")
	}
	for _, p := range pseudoDirs {
		if dir == p || hasPathPrefix(dir, p) {
			return "", fmt.Errorf("%s is a kernel or runtime directory of the host", p)
		}
	}
	for _, p := range private {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir == p || hasPathPrefix(dir, p) || hasPathPrefix(p, dir) {
			return "", fmt.Errorf("the directory overlaps %s, which holds the server's or its users' data", p)
		}
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return "", errors.New("the path goes through a symbolic link; name the real directory")
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENOENT):
		return "", fmt.Errorf("%s is not a directory", dir)
	case err != nil:
		return "", fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return "", fmt.Errorf("statfs %s: %w", dir, err)
	}
	if name, ok := pseudoFilesystems[int64(fs.Type)]; ok {
		return "", fmt.Errorf("%s is on a %s filesystem, not a root filesystem", dir, name)
	}
	return dir, nil
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
