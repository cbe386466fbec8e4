package netpolicy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Network namespaces are created and entered on a dedicated goroutine whose
// OS thread is locked and, if anything goes wrong restoring it, never
// unlocked: Go then terminates that thread instead of letting a goroutine of
// the daemon run in a sandbox's namespace.

// onThread runs fn on a fresh locked OS thread and returns its result.
// restore is called after fn; if it fails the thread is discarded.
func onThread(fn func() (restore func() error, err error)) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restore, err := fn()
		if restore != nil {
			if rerr := restore(); rerr != nil {
				// Leave the thread locked: it dies with this goroutine.
				errc <- errors.Join(err, fmt.Errorf("restore network namespace: %w", rerr))
				return
			}
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// inNetns runs fn with the calling OS thread in the network namespace at
// path. Only fn's own thread is in that namespace: goroutines fn starts are
// not. Sockets fn creates stay in the namespace after it returns.
func inNetns(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer target.Close()
	return onThread(func() (func() error, error) {
		orig, err := netns.Get()
		if err != nil {
			return nil, fmt.Errorf("open current network namespace: %w", err)
		}
		if err := netns.Set(target); err != nil {
			orig.Close()
			return nil, fmt.Errorf("enter network namespace %s: %w", path, err)
		}
		restore := func() error {
			defer orig.Close()
			return netns.Set(orig)
		}
		return restore, fn()
	})
}

// createNetns creates a new network namespace and bind-mounts it at path
// (which must not exist), the way `ip netns add` does.
func createNetns(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("create netns mount point: %w", err)
	}
	f.Close()
	err = onThread(func() (func() error, error) {
		orig, err := netns.Get()
		if err != nil {
			return nil, err
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			orig.Close()
			return nil, fmt.Errorf("unshare network namespace: %w", err)
		}
		restore := func() error {
			defer orig.Close()
			return netns.Set(orig)
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			return restore, fmt.Errorf("bind-mount network namespace: %w", err)
		}
		return restore, nil
	})
	if err != nil {
		_ = removeNetns(path)
		return err
	}
	return nil
}

// removeNetns unmounts and removes a namespace bind mount. The namespace
// itself goes away once nothing (process, socket, other mount) holds it.
// A missing path is not an error.
func removeNetns(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// prepareNetnsDir creates dir and makes it a shared mount (bind-mounting it
// on itself first if needed), as iproute2 does for /run/netns: namespace
// mounts made later then propagate to, and their unmounts reach, mount
// namespaces that copied the directory, so a copy elsewhere cannot keep a
// dead sandbox's namespace alive. It reports whether it made the bind mount.
func prepareNetnsDir(dir string) (bound bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create netns dir: %w", err)
	}
	// Changing propagation fails with EINVAL unless dir is a mount root.
	err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return false, fmt.Errorf("make %s shared: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return false, fmt.Errorf("bind-mount %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return false, fmt.Errorf("make %s shared: %w", dir, err)
	}
	return true, nil
}
