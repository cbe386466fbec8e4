package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/agentbox/agentbox/internal/loopdev"

	"golang.org/x/sys/unix"
)

// A sandbox's disk is a sparse ext4 image on the host, attached to a loop
// device and mounted under the sandbox's directory. Everything a sandbox can
// write that is not tmpfs (/workspace, the home directory, a writable root
// layer) lives on it, so a full disk is ENOSPC inside one sandbox and never a
// full host disk.
//
// mkfs is slow and the same for every sandbox of one size, so each size is
// formatted once into a cached template image; a sandbox gets a sparse copy
// (a few hundred KiB of metadata, about a millisecond).

// diskLayout is what every fresh disk contains. The directories are created
// in the template image so a sandbox pays nothing for them.
var diskDirs = []struct {
	path string
	mode os.FileMode
	user bool // owned by the sandbox user rather than root
}{
	{"workspace", 0o755, true},
	{"home", 0o750, true},
	{"roothome", 0o700, false},
	{"upper", 0o755, false}, // overlay upper layer for dir: templates
	{"work", 0o700, false},  // overlay work dir
	{"rootfs", 0o755, false},
}

// diskBucket rounds a requested disk size up to the next of a small set of
// sizes — four steps per doubling (1, 1.25, 1.5, 1.75 × 2^n MiB), so at
// most 25% more than asked — which keeps the formatted-image cache to a few
// entries whatever sizes callers ask for. The sandbox gets the bucket's
// size as its disk cap.
func diskBucket(size int64) int64 {
	const mib = 1 << 20
	if size < minDiskBytes {
		size = minDiskBytes
	}
	pow := int64(mib) // the largest power of two MiB not above size
	for pow<<1 <= size {
		pow <<= 1
	}
	step := max(pow/4, mib)
	return (size + step - 1) / step * step
}

// maxCachedTemplates bounds the formatted-image cache; the least recently
// used images beyond it are deleted.
const maxCachedTemplates = 8

// diskCache creates and caches formatted template images by size.
type diskCache struct {
	dir string
	mu  sync.Mutex // serialises template creation
}

func (c *diskCache) templatePath(size int64) string {
	return filepath.Join(c.dir, "ext4-"+strconv.FormatInt(size, 10)+".img")
}

// template returns the path of a formatted image of the given size, creating
// it on first use. skeleton populates the image's rootfs directory.
func (c *diskCache) template(size int64, skeleton func(rootfs string) error) (string, error) {
	path := c.templatePath(size)
	if c.touch(path) {
		return path, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.touch(path) {
		return path, nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return "", fmt.Errorf("create disk cache dir: %w", err)
	}
	// A unique temporary name: another process sharing the cache may be
	// building the same template; whoever renames first wins, both are valid.
	f, err := os.CreateTemp(c.dir, "ext4-*.tmp")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	f.Close()
	os.Remove(tmp)
	if err := makeTemplateImage(tmp, size, skeleton); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("install disk template: %w", err)
	}
	c.evict(maxCachedTemplates)
	return path, nil
}

// touch marks a cached image as used now (its mtime is the LRU clock) and
// reports whether it exists.
func (c *diskCache) touch(path string) bool {
	now := time.Now()
	return os.Chtimes(path, now, now) == nil
}

// evict deletes the least recently used images beyond keep. A sandbox
// being created from an evicted image is not harmed: its copy already
// has the image open, or it builds the image again.
func (c *diskCache) evict(keep int) {
	paths, _ := filepath.Glob(filepath.Join(c.dir, "ext4-*.img"))
	if len(paths) <= keep {
		return
	}
	type cached struct {
		path string
		used time.Time
	}
	all := make([]cached, 0, len(paths))
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			all = append(all, cached{p, st.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.After(all[j].used) })
	for _, e := range all[min(keep, len(all)):] {
		_ = os.Remove(e.path)
	}
}

func makeTemplateImage(path string, size int64, skeleton func(string) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create disk image: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("size disk image: %w", err)
	}
	f.Close()
	// No journal: it would make every copy ~32 MiB of real blocks instead of a
	// sparse file. No reserved blocks: the sandbox user gets the whole cap.
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0",
		"-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard",
		"-L", "agentbox", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4 (install e2fsprogs): %v: %s", err, out)
	}
	mnt, err := os.MkdirTemp(filepath.Dir(path), "mnt-")
	if err != nil {
		return err
	}
	defer os.Remove(mnt)
	if _, err := mountImage(path, mnt, true); err != nil {
		return err
	}
	populateErr := func() error {
		for _, d := range diskDirs {
			p := filepath.Join(mnt, d.path)
			if err := os.Mkdir(p, d.mode); err != nil {
				return err
			}
			if err := os.Chmod(p, d.mode); err != nil { // umask
				return err
			}
			if d.user {
				if err := os.Chown(p, sandboxUID, sandboxGID); err != nil {
					return err
				}
			}
		}
		_ = os.RemoveAll(filepath.Join(mnt, "lost+found"))
		if skeleton != nil {
			return skeleton(filepath.Join(mnt, "rootfs"))
		}
		return nil
	}()
	if err := unix.Unmount(mnt, 0); err != nil && populateErr == nil {
		populateErr = fmt.Errorf("unmount template image: %w", err)
	}
	if populateErr != nil {
		return fmt.Errorf("populate disk template: %w", populateErr)
	}
	return nil
}

// mountImage attaches image to a free loop device and mounts it at target;
// it returns the device. The loop device is configured with autoclear, so
// unmounting detaches it: there is no loop device to track or leak.
//
// fresh says image is a file this process has just created (O_EXCL): no
// loop device can serve it yet, so the wait for an old mount of it to
// drain — a scan of every loop device the host ever made, which grows
// with the number of sandboxes — is skipped.
func mountImage(image, target string, fresh bool) (string, error) {
	if !fresh {
		if err := waitImageReleased(image, 5*time.Second); err != nil {
			return "", err
		}
	}
	dev, err := attachLoop(image)
	if err != nil {
		return "", err
	}
	defer dev.Close() // autoclear: the mount now holds the device
	// A device another sandbox's teardown has just released can be handed
	// out (LOOP_CTL_GET_FREE) a moment before the kernel has let go of the
	// old filesystem's exclusive claim on it: the mount then fails with
	// EBUSY for a few milliseconds. Seen with parallel creates and
	// destroys; the claim is gone soon, so retry for up to a second.
	deadline := time.Now().Add(time.Second)
	for {
		err := unix.Mount(dev.Name(), target, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "")
		if err == nil {
			return dev.Name(), nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return "", fmt.Errorf("mount %s on %s: %w", dev.Name(), target, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitImageReleased waits until no filesystem is mounted from image any
// more (a lazily unmounted old mount of it may still be draining): two
// filesystems on one image would corrupt it. A loop device that still
// points at the image but holds no filesystem is harmless — the kernel
// detaches unused autoclear devices asynchronously.
func waitImageReleased(image string, timeout time.Duration) error {
	return waitReleased(image, func() string { return loopInUse(image) }, timeout)
}

// waitReleased polls held (the device still holding image, or "") until
// it returns "" or timeout passes.
func waitReleased(image string, held func() string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		dev := held()
		if dev == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("disk image %s is still mounted through %s", image, dev)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loopHolds reports whether loop device dev serves image and a filesystem
// still holds it (an exclusive open fails with EBUSY): loopInUse for one
// known device, without reading every loop device of the host.
func loopHolds(dev, image string) bool {
	var img unix.Stat_t
	if unix.Stat(image, &img) != nil {
		return false
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return false
	}
	if !errors.Is(err, unix.EBUSY) {
		return false
	}
	fd, err = unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	return err == nil && info.Inode == img.Ino && info.Device == img.Dev
}

// loopInUse returns a loop device backed by image that a filesystem still
// holds (an exclusive open fails with EBUSY), or "".
func loopInUse(image string) string {
	matches, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil || strings.TrimSpace(string(data)) != image {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(m)))
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if errors.Is(err, unix.EBUSY) {
			return dev
		}
	}
	return ""
}

// ext4's FS_IOC_SHUTDOWN ioctl and its "do not flush anything" flag
// (linux/ext4.h: _IOR('X', 125, __u32)).
const (
	ext4IocShutdown          = 0x8004587d
	ext4GoingFlagsNoLogFlush = 0x2
)

// revokeImage makes the filesystem of a destroyed sandbox's disk unusable
// when something outside the sandbox still holds it after its mount is gone
// (a bind or overlay mount of a directory on it in another mount
// namespace): that holder would otherwise keep reading — and the loop
// device keep serving — the deleted sandbox's files. The filesystem is
// reached again by mounting the still-attached loop device (the kernel
// hands back the live superblock) and shut down: every later access
// through any mount of it fails with EIO.
//
// Holders that go away by themselves are waited for first: a sandbox
// created at the same moment starts with a copy of the host's mounts
// (this disk's included) until its pivot_root drops them. And the loop
// device is pinned open and checked to still serve this very image before
// it is mounted: a device that was detached and attached to another
// sandbox's image meanwhile must never be shut down.
//
// dev is the loop device the sandbox's disk was mounted from when known:
// only it is checked. "" (a sandbox recovered after a restart) scans every
// loop device.
func revokeImage(image, scratch, dev string) error {
	held := func() string { return loopInUse(image) }
	if dev != "" {
		known := dev
		held = func() string {
			if loopHolds(known, image) {
				return known
			}
			return ""
		}
	}
	if waitReleased(image, held, revokeGrace) == nil {
		return nil
	}
	dev = held()
	if dev == "" {
		return nil
	}
	// While this descriptor is open the device cannot be auto-cleared,
	// so it cannot be re-attached to another file either.
	pin, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("revoke disk: %w", err)
	}
	defer pin.Close()
	var img unix.Stat_t
	if err := unix.Stat(image, &img); err != nil {
		return fmt.Errorf("revoke disk: %w", err)
	}
	info, err := unix.IoctlLoopGetStatus64(int(pin.Fd()))
	if err != nil || info.Inode != img.Ino {
		return nil // detached (and maybe re-used) meanwhile: nothing of ours to revoke
	}
	mnt, err := os.MkdirTemp(scratch, "revoke-")
	if err != nil {
		return fmt.Errorf("revoke disk: %w", err)
	}
	defer os.Remove(mnt)
	if err := unix.Mount(dev, mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("revoke disk: mount %s: %w", dev, err)
	}
	defer func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }()
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("revoke disk: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetPointerInt(fd, ext4IocShutdown, ext4GoingFlagsNoLogFlush); err != nil {
		return fmt.Errorf("revoke disk: shut down the filesystem on %s: %w", dev, err)
	}
	return nil
}

// revokeGrace is how long a destroyed sandbox's disk may stay held (by a
// sandbox being created at the same time) before it is revoked.
const revokeGrace = time.Second

// attachLoop attaches image to a free loop device with autoclear (see
// loopdev.Attach).
func attachLoop(image string) (*os.File, error) { return loopdev.Attach(image) }

// sparseCopy copies src to a new file dst, keeping holes as holes.
func sparseCopy(src, dst string) error { return sparseCopyRanges(src, dst, nil) }

// sparseCopyRanges is sparseCopy of the byte ranges of src in ranges
// (ordered; nil: all of it): the rest of dst is a hole.
func sparseCopyRanges(src, dst string, ranges [][2]int64) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	size := st.Size()
	if err := out.Truncate(size); err != nil {
		return err
	}
	if ranges == nil {
		ranges = [][2]int64{{0, size}}
	}
	inFd, outFd := int(in.Fd()), int(out.Fd())
	for _, r := range ranges {
		off, end := r[0], min(r[1], size)
		for off < end {
			data, err := unix.Seek(inFd, off, unix.SEEK_DATA)
			if errors.Is(err, unix.ENXIO) {
				return nil // only a hole is left
			}
			if err != nil {
				return fmt.Errorf("seek data: %w", err)
			}
			if data >= end {
				break
			}
			hole, err := unix.Seek(inFd, data, unix.SEEK_HOLE)
			if err != nil {
				return fmt.Errorf("seek hole: %w", err)
			}
			hole = min(hole, end)
			for pos := data; pos < hole; {
				roff, woff := pos, pos
				n, err := unix.CopyFileRange(inFd, &roff, outFd, &woff, int(hole-pos), 0)
				if err != nil {
					return fmt.Errorf("copy extent: %w", err)
				}
				if n == 0 {
					return io.ErrUnexpectedEOF
				}
				pos += int64(n)
			}
			off = hole
		}
	}
	return nil
}

// isMountPoint reports whether path is the root of a mount.
func isMountPoint(path string) bool {
	mounted, err := mountinfo.Mounted(path)
	return err == nil && mounted
}

// unmountAll unmounts path. A mount still busy is retried for a while
// (processes of a killed sandbox take a moment to release their files) and
// only then detached lazily: mounting the same disk image again while an
// old mount of it still lives would put two filesystems on one image.
func unmountAll(path string) error {
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; i < 1000 && isMountPoint(path); i++ {
		err := unix.Unmount(path, 0)
		switch {
		case err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT):
			continue
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond)
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("lazy unmount %s: %w", path, err)
			}
			return fmt.Errorf("unmount %s: still busy after 3s, detached lazily", path)
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return nil
}
