package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/loopdev"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/units"
)

// Local volumes live on the data disk, each an ext4 image of its size
// attached to a loop device and mounted under Dir/<id>/mnt — the
// mechanism of the native backend's sandbox disks (internal/loopdev), so a
// full volume is ENOSPC for its writer, from the kernel, and never a full
// host disk. The image's blocks are allocated when it is made
// (fallocate), so a volume's size is reserved on the data disk: filling
// every volume cannot fill the disk under them.
//
// Files carry the sandbox's own ids (uid 1000 is the sandbox user); a
// sandbox mounts its volumes idmapped through its user namespace.

// Local is the driver of local volumes.
type Local struct {
	// Dir holds the volumes' images and mounts.
	Dir string
	// Reserve is space of Dir's filesystem a new volume leaves free.
	Reserve int64
	mu      sync.Mutex // serialises mounts
}

var _ Driver = (*Local)(nil)

func (l *Local) dir(v Volume) string   { return filepath.Join(l.Dir, v.ID) }
func (l *Local) image(v Volume) string { return filepath.Join(l.dir(v), "data.img") }
func (l *Local) mnt(v Volume) string   { return filepath.Join(l.dir(v), "mnt") }

// sandboxUser is the sandbox user's uid and gid in every sandbox.
const sandboxUser = 1000

// Create implements Driver.
func (l *Local) Create(ctx context.Context, v Volume) (err error) {
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return fmt.Errorf("volumes dir: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(l.Dir, &st); err != nil {
		return fmt.Errorf("volumes dir: %w", err)
	}
	if free := int64(st.Bavail) * st.Bsize; free-v.SizeBytes < l.Reserve {
		return sandbox.Errorf(sandbox.ClassNoSpace, "the server's data disk has %s free, not enough for a volume of %s (DISK_RESERVE keeps %s free); nothing was created",
			units.FormatBytes(free), units.FormatBytes(v.SizeBytes), units.FormatBytes(l.Reserve))
	}
	dir := l.dir(v)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("volume dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	img := l.image(v)
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create volume image: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, v.SizeBytes)
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = f.Truncate(v.SizeBytes) // a filesystem without fallocate: sparse
	}
	f.Close()
	if errors.Is(err, unix.ENOSPC) {
		return sandbox.Errorf(sandbox.ClassNoSpace, "the server's data disk has no room for a volume of %s; nothing was created", units.FormatBytes(v.SizeBytes))
	}
	if err != nil {
		return fmt.Errorf("allocate volume image: %w", err)
	}
	// A journal: a volume's files outlive any sandbox and a host crash.
	// No reserved blocks: the sandboxes get the whole size.
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner="+fmt.Sprint(sandboxUser)+":"+fmt.Sprint(sandboxUser),
		"-L", "agentbox-vol", img).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4 (install e2fsprogs): %v: %s", err, out)
	}
	mnt, err := l.Path(ctx, v)
	if err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(mnt, "lost+found"))
	return os.Chmod(mnt, 0o755)
}

// Path implements Driver.
func (l *Local) Path(_ context.Context, v Volume) (string, error) {
	mnt := l.mnt(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	if mounted, err := mountinfo.Mounted(mnt); err == nil && mounted {
		return mnt, nil
	}
	if _, err := os.Stat(l.image(v)); err != nil {
		return "", sandbox.Errorf(sandbox.ClassUnavailable, "volume %q has no storage on this node (%v)", v.Name, err)
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return "", err
	}
	dev, err := loopdev.Attach(l.image(v))
	if err != nil {
		return "", err
	}
	defer dev.Close() // autoclear: the mount holds the device now
	deadline := time.Now().Add(time.Second)
	for {
		err = unix.Mount(dev.Name(), mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "")
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // see native's mountImage
	}
	if err != nil {
		return "", fmt.Errorf("mount volume %q: %w", v.Name, err)
	}
	return mnt, nil
}

// Usage implements Driver.
func (l *Local) Usage(ctx context.Context, v Volume) (Usage, error) {
	mnt, err := l.Path(ctx, v)
	if err != nil {
		return Usage{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		return Usage{}, fmt.Errorf("volume usage: %w", err)
	}
	total := int64(st.Blocks) * st.Bsize
	return Usage{UsedBytes: total - int64(st.Bfree)*st.Bsize, TotalBytes: total}, nil
}

// ext4's FS_IOC_SHUTDOWN and its "do not flush" flag (linux/ext4.h).
const (
	ext4IocShutdown          = 0x8004587d
	ext4GoingFlagsNoLogFlush = 0x2
)

// Remove implements Driver: the filesystem is shut down first, so every
// mount of it — a sandbox's too — fails with EIO from then on, then it
// is unmounted and its image deleted (the loop device goes with the last
// mount).
func (l *Local) Remove(_ context.Context, v Volume) error {
	mnt := l.mnt(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	if mounted, err := mountinfo.Mounted(mnt); err == nil && mounted {
		if fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.IoctlSetPointerInt(fd, ext4IocShutdown, ext4GoingFlagsNoLogFlush)
			unix.Close(fd)
		}
		if err := unix.Unmount(mnt, 0); err != nil {
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount volume %q: %w", v.Name, err)
			}
		}
	}
	if err := os.RemoveAll(l.dir(v)); err != nil {
		return fmt.Errorf("remove volume %q: %w", v.Name, err)
	}
	return nil
}

// UnmountAll unmounts every volume mounted under Dir that no sandbox
// holds (the daemon's graceful shutdown with AUTO_CLEANUP: nothing runs
// any more); a volume still held is detached lazily.
func (l *Local) UnmountAll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ents, err := os.ReadDir(l.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var first error
	for _, e := range ents {
		for _, p := range []string{filepath.Join(l.Dir, e.Name(), "mnt")} {
			if mounted, err := mountinfo.Mounted(p); err != nil || !mounted {
				continue
			}
			if err := unix.Unmount(p, 0); err != nil {
				if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && first == nil {
					first = err
				}
			}
		}
	}
	return first
}
