package native

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once process pid has exited (it stays a zombie for its
// parent to reap), without holding an OS thread while it waits: its pidfd
// is polled through the Go netpoller. If no pidfd can be opened (the
// process is already gone), it returns at once.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	awaitPidfd(fd)
}

// awaitPidfd waits until the process of pidfd has exited and closes pidfd.
// A pidfd is readable once its process is gone; a non-blocking one given
// to os.NewFile is registered with the netpoller, so the waiting goroutine
// is parked, not its thread (unix.Poll would block a thread per sandbox).
func awaitPidfd(pidfd int) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	exited := func(timeout int) bool {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		return (err != nil && !errors.Is(err, unix.EINTR)) || (n > 0 && fds[0].Revents != 0)
	}
	if rc, err := f.SyscallConn(); err == nil {
		if rc.Read(func(uintptr) bool { return exited(0) }) == nil {
			return
		}
	}
	// Not pollable after all: wait the blocking way.
	for !exited(-1) {
	}
}
