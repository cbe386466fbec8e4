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

// maxImageLayers bounds the lower layers of an image template: overlayfs
// stacks at most 500, and every layer costs a descriptor and a few bytes
// of the one-page mount option string (see mountLayers).
const maxImageLayers = 128

// checkTemplate validates the resolved template of a sandbox before
// anything is built from it. private lists host directories no dir
// template may come from or contain (the daemon's data dir, tenants'
// workspaces).
func checkTemplate(t sandbox.Template, private []string, rootless bool) error {
	name := t.Ref
	if name == "" {
		name = t.Kind
	}
	if rootless && t.Kind != sandbox.TemplateHost {
		return sandbox.Errorf(sandbox.ClassInvalid, "template %q needs a root daemon (overlayfs); a rootless daemon has only \"host\"", name)
	}
	switch t.Kind {
	case sandbox.TemplateHost:
		return nil
	case sandbox.TemplateDir:
		if _, err := checkTemplateDir(t.Dir, private); err != nil {
			return sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("template %q: %v", name, err))
		}
		return nil
	case sandbox.TemplateImage:
		if err := checkImageLayers(t.Layers); err != nil {
			return sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("template %q: %v", name, err))
		}
		return nil
	}
	return sandbox.Errorf(sandbox.ClassInvalid, "template %q has unknown kind %q (want host, dir or image)", name, t.Kind)
}

// CheckTemplate reports whether t is a template this backend can boot (the
// daemon checks its configured templates at start with it).
func (b *Backend) CheckTemplate(t sandbox.Template) error {
	if err := checkTemplate(t, b.privateDirs, b.rootless); err != nil {
		return err
	}
	if t.Kind == sandbox.TemplateImage {
		if err := b.idmappedOverlaySupported(); err != nil {
			return sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("template %q: %v", t.Ref, err))
		}
	}
	return nil
}

// checkImageLayers validates the layer directories of an image template.
// They come from the template store, in the data dir, so unlike a dir
// template they may lie under a private directory; they must still be
// exactly what the store named: absolute clean paths through no symlink,
// real directories on a real filesystem.
func checkImageLayers(layers []string) error {
	if len(layers) == 0 {
		return errors.New("an image template needs at least one layer")
	}
	if len(layers) > maxImageLayers {
		return fmt.Errorf("%d layers, at most %d supported", len(layers), maxImageLayers)
	}
	for _, dir := range layers {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || dir == "/" {
			return fmt.Errorf("layer directory %q is not an absolute clean path", dir)
		}
		if err := checkRealDir(dir); err != nil {
			return fmt.Errorf("layer: %w", err)
		}
	}
	return nil
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
	if err := checkRealDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// checkRealDir checks that dir is a directory reached through no symbolic
// link, on a filesystem that holds files rather than kernel state.
func checkRealDir(dir string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return errors.New("the path goes through a symbolic link; name the real directory")
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s is not a directory", dir)
	case err != nil:
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if name, ok := pseudoFilesystems[int64(fs.Type)]; ok {
		return fmt.Errorf("%s is on a %s filesystem, not a root filesystem", dir, name)
	}
	return nil
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
