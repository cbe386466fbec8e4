package layer

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Everything below works relative to directory file descriptors so that
// no path string is ever resolved by the kernel through a symlink a layer
// planted: names handed to the *at calls are single components, used with
// AT_SYMLINK_NOFOLLOW / O_NOFOLLOW, and multi-component paths only go
// through openat2 with RESOLVE_IN_ROOT.

// inRoot resolves path (components already validated) below root as if
// root were "/": symlinks, absolute or "..", cannot leave it, magic links
// are refused and no mount point is crossed.
func inRoot(root int, path string, flags uint64) (int, error) {
	how := unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	// EAGAIN means a concurrent rename raced the lookup; nothing else
	// writes into an unpack directory, so a few tries are plenty.
	for range 8 {
		fd, err := unix.Openat2(root, path, &how)
		if !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	return -1, fmt.Errorf("openat2 %q: %w", path, unix.EAGAIN)
}

// openChild opens the directory name in dirfd without following a symlink.
func openChild(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// lstatAt is fstatat(AT_SYMLINK_NOFOLLOW); ok is false when name is absent.
func lstatAt(dirfd int, name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	return st, err == nil, err
}

// readNames lists a directory's entries by fd (dirfd stays open).
func readNames(dirfd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(dirfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup: %w", err)
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	// The duplicate shares dirfd's offset: rewind so every call lists all.
	if _, err := unix.Seek(dup, 0, 0); err != nil {
		return nil, fmt.Errorf("rewind: %w", err)
	}
	return f.Readdirnames(-1)
}

// removeAt removes name in dirfd, recursively if it is a directory, never
// following a symlink. Depth is bounded by maxPathLen (names are checked).
func removeAt(dirfd int, name string) error {
	st, ok, err := lstatAt(dirfd, name)
	if err != nil || !ok {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(dirfd, name, 0)
	}
	fd, err := openChild(dirfd, name)
	if err != nil {
		return err
	}
	names, err := readNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// timespec converts without the overflow of UnixNano outside 1678..2262;
// a zero time (no mtime in the header) becomes the epoch.
func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{}
	}
	return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}

// setTimes sets name's atime and mtime without following a symlink.
func setTimes(dirfd int, name string, atime, mtime time.Time) error {
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{timespec(atime), timespec(mtime)}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}
