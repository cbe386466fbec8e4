package native

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"github.com/opencontainers/cgroups"

	"golang.org/x/sys/unix"
)

// Sandbox disks are mounted outside the daemon's mount namespace.
//
// Mounted in the daemon's namespace, every sandbox's disk (and its overlay
// root and sysfs) added to the daemon's mount table, and that table is what
// each new sandbox's mount namespace starts as a copy of: runc's init then
// read a mountinfo of N lines several times and detached N mounts after
// pivot_root, and every mount, unmount and mountinfo walk of the daemon got
// slower — a create cost that grew with the number of sandboxes.
//
// Instead, the steps of a create that mount (disk, overlay, netns sysfs)
// and the start of the sandbox's init run on a dedicated OS thread that
// has left the daemon's namespace for a private copy of it. The init is
// forked from that thread, so its own namespace is a copy of the small
// private one. The thread then exits and its namespace goes with it; the
// sandbox's namespace keeps its mounts. The daemon keeps one O_PATH
// descriptor of the disk's root (bx.disk) and reaches the disk's files
// through /proc/self/fd/N, which resolves into that mount whatever
// namespace it lives in. Closing the descriptor and killing the sandbox is
// what unmounts the disk; the revoke check (revokeImage) still proves the
// disk's loop device is released afterwards.

// inPrivateMountNS runs fn on a new OS thread in a new mount namespace, a
// private copy of the daemon's: mounts fn makes stay in it (and in the
// namespaces of processes it forks), never in the daemon's. The thread is
// never handed back to the Go scheduler: it exits when fn returns.
// Goroutines fn starts run on other threads, in the daemon's namespace.
func inPrivateMountNS(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the runtime then ends this thread when the
		// goroutine returns, so no other goroutine ever runs in the
		// private namespace.
		runtime.LockOSThread()
		if err := enterPrivateMountNS(); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// enterPrivateMountNS moves the calling thread, which must be locked and
// never handed back, into a private copy of its mount namespace.
func enterPrivateMountNS() error {
	// A thread shares its root and cwd (fs_struct) with the others,
	// which setns and unshare of a mount namespace refuse: unshare it.
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("private mount namespace: %w", err)
	}
	// The copy's mounts are peers of the host's where those are shared:
	// a mount made under one would propagate back into the daemon's
	// namespace. Cut every propagation first.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mount namespace: make mounts private: %w", err)
	}
	return nil
}

// openDiskRoot opens the root of the sandbox's mounted disk for the daemon
// (O_PATH: a handle for path walks, no read or write access by itself). Call
// it in the namespace the disk is mounted in.
func openDiskRoot(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open sandbox disk: %w", err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// diskPath is the daemon's path of elem on the sandbox's disk: through the
// disk descriptor when the disk is mounted in a private namespace, else the
// host path (rootless: a plain directory; a sandbox whose disk an earlier
// daemon version mounted in the daemon's namespace).
func (bx *box) diskPath(elem ...string) string {
	root := bx.paths.disk
	if bx.disk != nil {
		root = "/proc/self/fd/" + strconv.Itoa(int(bx.disk.Fd()))
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// diskMounted reports whether the daemon can reach the sandbox's disk.
func (bx *box) diskMounted() bool {
	return bx.disk != nil || isMountPoint(bx.paths.disk)
}

// closeDisk drops the daemon's hold on the sandbox's disk.
func (bx *box) closeDisk() {
	if bx.disk != nil {
		bx.disk.Close()
		bx.disk = nil
	}
}

// privately runs fn in a private mount namespace (inPrivateMountNS), or
// as it is when rootless: without CAP_SYS_ADMIN there is no namespace to
// make, and no mount either (the disk is a plain directory).
func (b *Backend) privately(fn func() error) error {
	if b.rootless {
		return fn()
	}
	primeHandles.Do(primeProcessHandles)
	return inPrivateMountNS(fn)
}

var primeHandles sync.Once

// primeProcessHandles opens, from the daemon's namespace, the descriptors
// libraries open once per process and reuse: opened first on a private
// namespace's thread they would point into a namespace that is gone once
// that thread exits. The cgroups package resolves every cgroup file
// beneath one handle of /sys/fs/cgroup; in a dead namespace copy the
// controllers' mounts under it are gone.
func primeProcessHandles() {
	if f, err := cgroups.OpenFile("/sys/fs/cgroup", "cgroup.procs", os.O_RDONLY); err == nil {
		f.Close()
	}
}

// reopenDisk gives the daemon back its hold on the disk of a running
// sandbox it reattached after a restart: the descriptor died with the old
// daemon process, the disk's filesystem lives on in the sandbox's own
// namespace. Mounting the loop device that still serves the disk image
// again, in a private namespace, hands back that live filesystem (the
// kernel keeps one superblock per block device), whose root is then held
// as at a create. Sandboxes whose disk an earlier daemon version mounted
// in the daemon's namespace keep that mount.
func (b *Backend) reopenDisk(bx *box) error {
	if b.rootless || bx.disk != nil || isMountPoint(bx.paths.disk) {
		return nil
	}
	dev := loopInUse(bx.paths.image)
	if dev == "" {
		return fmt.Errorf("no loop device serves the disk image %s", bx.paths.image)
	}
	return inPrivateMountNS(func() error {
		// The running sandbox holds the device: it cannot be cleared and
		// given to another image meanwhile. Checked again after the mount
		// all the same: the daemon must never hold another sandbox's disk.
		if err := unix.Mount(dev, bx.paths.disk, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
			return fmt.Errorf("mount %s again: %w", dev, err)
		}
		if !loopHolds(dev, bx.paths.image) {
			return fmt.Errorf("%s no longer serves %s", dev, bx.paths.image)
		}
		f, err := openDiskRoot(bx.paths.disk)
		if err != nil {
			return err
		}
		bx.disk, bx.loopDev = f, dev
		return nil
	})
}
