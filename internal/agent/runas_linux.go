package agent

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// do runs fn with u's filesystem permissions and returns its error.
//
// For the agent's own identity fn simply runs. Otherwise (the agent is
// root and acts for another user) fn runs on a dedicated OS thread whose
// filesystem uid/gid and supplementary groups are switched to u's. Linux
// keeps these credentials per thread, and a non-zero fsuid drops
// CAP_DAC_OVERRIDE and friends, so the kernel enforces u's permissions
// exactly and new files and directories are owned by u without chown.
// The goroutine exits while still locked to the thread, which makes the Go
// runtime destroy the thread instead of reusing it with foreign
// credentials.
//
// fn must do its path-based work itself (open, mkdir, rename, ...); file
// descriptors it returns stay usable from any goroutine afterwards.
func (u *User) do(fn func() error) error {
	if u.self {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see above.
		if err := setThreadCreds(u); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// setThreadCreds switches the calling thread's fs credentials to u. It uses
// raw syscalls because the syscall/unix wrappers apply set*id to every
// thread of the process.
func setThreadCreds(u *User) error {
	groups := u.Groups
	if len(groups) == 0 {
		groups = []uint32{u.GID}
	}
	if !setgroupsDenied() {
		_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0)
		if e != 0 {
			return fmt.Errorf("setgroups for %s: %w", u.Name, e)
		}
	}
	_, _, _ = unix.RawSyscall(unix.SYS_SETFSGID, uintptr(u.GID), 0, 0)
	_, _, _ = unix.RawSyscall(unix.SYS_SETFSUID, uintptr(u.UID), 0, 0)
	// setfsuid reports no errors; asking again returns the value in force.
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(u.UID), 0, 0); uint32(got) != u.UID {
		return fmt.Errorf("setfsuid %d failed (still %d)", u.UID, got)
	}
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, uintptr(u.GID), 0, 0); uint32(got) != u.GID {
		return fmt.Errorf("setfsgid %d failed (still %d)", u.GID, got)
	}
	return nil
}
