package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Image templates: the root filesystem is an overlay of the template's
// layer directories (lowest last in lowerdir, as overlayfs wants the top
// first) with the upper and work directories on the sandbox's own disk, so
// a template costs nothing per sandbox and everything a sandbox writes
// counts against its disk.
//
// Layer files carry the image's own ids (root is 0), while the sandbox
// runs in a user namespace mapping its ids to a private host range. Each
// layer is therefore mounted as an idmapped mount (open_tree with
// OPEN_TREE_CLONE, then mount_setattr MOUNT_ATTR_IDMAP with the sandbox's
// user namespace): image root is the sandbox's root, image uid 1000 its
// 1000, and the layer directories are never chowned, so every sandbox
// shares them unchanged. Overlayfs accepts idmapped lower layers since
// Linux 5.19; idmappedOverlaySupported probes it once per backend.
//
// A gVisor sandbox has no user namespace: gVisor's kernel keeps its own
// ids, and on the host its files belong to the ids it names (its files
// are written by the Sentry and its gofer). Its layers are mounted
// without the idmap, so the ids stored in them are the ones gVisor's
// kernel sees (image root is 0, the image's uid 1000 is the sandbox
// user), with the same writable upper on the sandbox's disk.

// maxOverlayOptions is the kernel's limit for mount(2)'s option string
// (one page).
const maxOverlayOptions = 4095

// idmappedTree returns a detached, read-only clone of the mount at dir
// whose ids are mapped through the user namespace nsfd; with nsfd -1
// (gVisor) its ids are left as stored.
func idmappedTree(dir string, nsfd int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", dir, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if nsfd >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(nsfd)
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmap layer %s: %w", dir, err)
	}
	return fd, nil
}

// mountLayers mounts at target an overlay of layers (lowest first) as
// idmapped through the user namespace at usernsPath (none: "", for
// gVisor), with upper and work as its writable layer. As
// mountOverlayHidden, every layer is named by /proc/self/fd/N so no host
// path shows in the sandbox's mountinfo.
func mountLayers(target string, layers []string, upper, work, usernsPath string) error {
	nsfd := -1
	if usernsPath != "" {
		ns, err := os.Open(usernsPath)
		if err != nil {
			return fmt.Errorf("open sandbox user namespace: %w", err)
		}
		defer ns.Close()
		nsfd = int(ns.Fd())
	}
	lower := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		fd, err := idmappedTree(layers[i], nsfd)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		lower = append(lower, "/proc/self/fd/"+strconv.Itoa(fd))
	}
	var rw [2]string
	for i, dir := range []string{upper, work} {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open overlay layer %s: %w", dir, err)
		}
		defer unix.Close(fd)
		rw[i] = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	// Descriptor paths hold no option separator; overlayOptions checks
	// each layer's, then they are stacked with ':'.
	for _, l := range lower {
		if _, err := overlayOptions(l, rw[0], rw[1]); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + rw[0] + ",workdir=" + rw[1] + overlayFeaturesOff
	if len(opts) > maxOverlayOptions {
		return fmt.Errorf("%d layers do not fit in one overlay mount", len(layers))
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mount image layers: %w", err)
	}
	return nil
}

// idmapProbe caches the outcome of the idmapped overlay probe.
type idmapProbe struct {
	once sync.Once
	err  error
}

// idmappedOverlaySupported reports whether this kernel and the data dir's
// filesystem can mount an overlay over idmapped lower layers, probing
// once: an image template on a kernel that cannot fails its create with
// this error, and the daemon's start check names it.
func (b *Backend) idmappedOverlaySupported() error {
	b.idmap.once.Do(func() {
		b.idmap.err = b.probeIdmappedOverlay()
		if b.idmap.err != nil {
			b.idmap.err = fmt.Errorf("image templates need overlayfs over idmapped mounts (Linux 5.19 or later, and a data dir filesystem with idmapped mount support such as ext4, xfs or btrfs): %w", b.idmap.err)
		}
	})
	return b.idmap.err
}

func (b *Backend) probeIdmappedOverlay() error {
	dir, err := os.MkdirTemp(b.diskRoot, ".idmap-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var paths [4]string
	for i, n := range []string{"lower", "upper", "work", "merged"} {
		paths[i] = filepath.Join(dir, n)
		if err := os.Mkdir(paths[i], 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(paths[0], "f"), nil, 0o644); err != nil {
		return err
	}
	ids := idMap{userns: true, base: b.idRanges.base, gidBase: b.idRanges.base, size: idRangeSize}
	holder, err := newUserNamespace(b.cfg.AgentPath, ids)
	if err != nil {
		return err
	}
	defer holder.release()
	if err := mountLayers(paths[3], []string{paths[0]}, paths[1], paths[2], holder.path()); err != nil {
		return err
	}
	defer func() { _ = unix.Unmount(paths[3], unix.MNT_DETACH) }()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(paths[3], "f"), &st); err != nil {
		return err
	}
	if st.Uid != ids.base {
		return fmt.Errorf("a file owned by 0 in the layer shows as host uid %d, want %d", st.Uid, ids.base)
	}
	return nil
}

// imageUser is who a sandbox's processes run as.
type imageUser struct {
	uid, gid   int
	name, home string
}

// resolveImageUser decides who the processes of an image sandbox run as
// (documented in docs/templates.md):
//   - a root sandbox (Spec.Root) runs as root, whatever the image's USER
//     says: the caller asked for root, as `docker run --user root` does;
//   - otherwise as the image's USER when it names an account other than
//     root, looked up in the template's own /etc/passwd and /etc/group;
//   - otherwise (no USER, or USER root, as most images have) as uid 1000
//     `user`, like every sandbox that did not ask for root.
func resolveImageUser(rootfs string, cfg sandbox.ImageConfig, root bool) (imageUser, error) {
	acc := readImageAccounts(rootfs)
	if root {
		u := imageUser{uid: 0, gid: 0, name: "root", home: "/root"}
		if e, ok := acc.byUID(0); ok && e.home != "" {
			u.home = e.home
		}
		return u, nil
	}
	def := imageUser{uid: sandboxUID, gid: sandboxGID, name: sandboxUser, home: sandboxHome}
	if e, ok := acc.byUID(sandboxUID); ok {
		def.gid, def.name = e.gid, e.name
		if e.home != "" && e.home != "/" {
			def.home = e.home
		}
	}
	spec := strings.TrimSpace(cfg.User)
	if spec == "" {
		return def, nil
	}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	var u imageUser
	if n, err := strconv.ParseUint(userPart, 10, 32); err == nil {
		u = imageUser{uid: int(n), gid: int(n), name: userPart, home: "/"}
		if e, ok := acc.byUID(int(n)); ok {
			u.gid, u.name, u.home = e.gid, e.name, e.home
		}
	} else {
		e, ok := acc.byName(userPart)
		if !ok {
			return imageUser{}, sandbox.Errorf(sandbox.ClassInvalid, "the template's user %q is not in its /etc/passwd", userPart)
		}
		u = imageUser{uid: e.uid, gid: e.gid, name: e.name, home: e.home}
	}
	if hasGroup {
		if n, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
			u.gid = int(n)
		} else if g, ok := acc.groups[groupPart]; ok {
			u.gid = g
		} else {
			return imageUser{}, sandbox.Errorf(sandbox.ClassInvalid, "the template's group %q is not in its /etc/group", groupPart)
		}
	}
	if u.uid == 0 {
		return def, nil // root only when the caller asks for it
	}
	if u.uid >= idRangeSize || u.gid >= idRangeSize {
		return imageUser{}, sandbox.Errorf(sandbox.ClassInvalid, "the template's user %q has an id above %d, which sandboxes do not map", spec, idRangeSize-1)
	}
	if u.home == "" {
		u.home = "/"
	}
	return u, nil
}

// maxAccountFile bounds how much of an image's passwd or group is read.
const maxAccountFile = 4 << 20

type accountEntry struct {
	name     string
	uid, gid int
	home     string
}

type imageAccounts struct {
	users  []accountEntry
	groups map[string]int
}

func (a imageAccounts) byUID(uid int) (accountEntry, bool) {
	for _, e := range a.users {
		if e.uid == uid {
			return e, true
		}
	}
	return accountEntry{}, false
}

func (a imageAccounts) byName(name string) (accountEntry, bool) {
	for _, e := range a.users {
		if e.name == name {
			return e, true
		}
	}
	return accountEntry{}, false
}

// readImageAccounts reads the passwd and group files of a root filesystem.
// os.Root keeps symlinks in the image from pointing the daemon anywhere
// on the host; a missing or unreadable file is an empty one.
func readImageAccounts(rootfs string) imageAccounts {
	acc := imageAccounts{groups: map[string]int{}}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return acc
	}
	defer root.Close()
	read := func(name string) []string {
		f, err := root.Open(name)
		if err != nil {
			return nil
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return nil
		}
		buf := make([]byte, maxAccountFile)
		n, _ := readFull(f, buf)
		return strings.Split(string(buf[:n]), "\n")
	}
	for _, line := range read("etc/passwd") {
		f := strings.Split(line, ":")
		if len(f) < 7 || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			continue
		}
		acc.users = append(acc.users, accountEntry{name: f[0], uid: uid, gid: gid, home: f[5]})
	}
	for _, line := range read("etc/group") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if gid, err := strconv.Atoi(f[2]); err == nil && gid >= 0 {
			if _, dup := acc.groups[f[0]]; !dup {
				acc.groups[f[0]] = gid
			}
		}
	}
	return acc
}

func readFull(f *os.File, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// imageEnv returns the image's environment as a map, without the
// variables the backend owns (AGENTBOX_*) and malformed entries.
func imageEnv(cfg sandbox.ImageConfig) map[string]string {
	env := map[string]string{}
	for _, kv := range cfg.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(k, 0) || strings.HasPrefix(k, "AGENTBOX_") {
			continue
		}
		env[k] = v
	}
	return env
}

// imageWorkdir is the default working directory of an image sandbox's
// processes: the image's WORKDIR, else /workspace.
func imageWorkdir(cfg sandbox.ImageConfig) string {
	if w := cfg.WorkingDir; w != "" && filepath.IsAbs(w) && !strings.ContainsRune(w, 0) {
		return filepath.Clean(w)
	}
	return workspaceInSandbox
}

// prepareImageRoot makes, in an image sandbox's root filesystem, what the
// sandbox needs and the image may lack: regular files under the
// per-sandbox /etc bind mounts (an image's /etc/resolv.conf is often a
// symlink into /run, which would move the mount elsewhere), /workspace,
// and the home of the user processes run as. It runs as the sandbox's
// root (host id ids.base, keeping the daemon's capabilities), so what it
// creates in the upper layer belongs to the sandbox, not to the host's
// root — and would carry the right owner into a snapshot.
func prepareImageRoot(rootfs string, u imageUser, ids idMap) error {
	return asHostUser(ids.base, ids.gidBase, func() error {
		root, err := os.OpenRoot(rootfs)
		if err != nil {
			return fmt.Errorf("open root filesystem: %w", err)
		}
		defer root.Close()
		if err := root.MkdirAll("etc", 0o755); err != nil {
			return fmt.Errorf("create /etc: %w", err)
		}
		for _, name := range perSandboxEtcFiles {
			rel := "etc/" + name
			if st, err := root.Lstat(rel); err == nil && st.Mode().IsRegular() {
				continue
			} else if err == nil {
				if err := root.RemoveAll(rel); err != nil {
					return fmt.Errorf("replace /%s: %w", rel, err)
				}
			}
			f, err := root.OpenFile(rel, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("create /%s: %w", rel, err)
			}
			f.Close()
		}
		if err := root.MkdirAll(strings.TrimPrefix(workspaceInSandbox, "/"), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", workspaceInSandbox, err)
		}
		home := strings.TrimPrefix(filepath.Clean(u.home), "/")
		if home == "" || home == "." {
			return nil
		}
		if _, err := root.Lstat(home); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil // a home behind a dangling link or such: the agent falls back
		}
		if err := root.MkdirAll(home, 0o750); err != nil {
			return fmt.Errorf("create home %s: %w", u.home, err)
		}
		return root.Lchown(home, ids.host(u.uid), int(ids.gidBase)+u.gid)
	})
}

// giveWorkspace hands the sandbox disk's /workspace to the user an image
// sandbox's processes run as, when the image's USER is not the default
// sandbox user: /workspace is where callers (agentscope, E2B) write, so
// it must be writable by who runs there. Only the default owner is
// changed, so a workspace already handed over (a restarted sandbox) or
// chosen otherwise is left alone.
//
// A gVisor sandbox (no user namespace: ids.host is the identity) gets the
// same, with the ids gVisor's kernel names.
func giveWorkspace(dir string, u imageUser, ids idMap) error {
	if u.uid == 0 || u.uid == sandboxUID {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("stat workspace: %w", err)
	}
	if int(st.Uid) != ids.host(sandboxUID) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	if err := unix.Lchown(dir, ids.host(u.uid), int(ids.gidBase)+u.gid); err != nil {
		return fmt.Errorf("give workspace to the image's user: %w", err)
	}
	return nil
}
