// Package seccompload installs a precompiled seccomp BPF program into the
// calling process. It is pure Go (no libseccomp), so the static in-sandbox
// agent can use it: the daemon compiles the sandbox profile once, and each
// sandbox's init only loads the result instead of recompiling it (~20 ms).
package seccompload

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockFilterSize is the size of one classic BPF instruction.
const sockFilterSize = int(unsafe.Sizeof(unix.SockFilter{}))

// maxInstructions is the kernel's BPF_MAXINSNS.
const maxInstructions = 4096

// Parse decodes a BPF program in the kernel's native sock_filter layout, as
// libseccomp's seccomp_export_bpf writes it.
func Parse(raw []byte) ([]unix.SockFilter, error) {
	if len(raw) == 0 || len(raw)%sockFilterSize != 0 {
		return nil, fmt.Errorf("seccomp program has %d bytes, not a multiple of %d", len(raw), sockFilterSize)
	}
	n := len(raw) / sockFilterSize
	if n > maxInstructions {
		return nil, fmt.Errorf("seccomp program has %d instructions, more than %d", n, maxInstructions)
	}
	prog := make([]unix.SockFilter, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(raw)), raw)
	return prog, nil
}

// Install loads prog as a seccomp filter for every thread of the process.
// The process must already have no_new_privs set (or CAP_SYS_ADMIN).
func Install(prog []unix.SockFilter) error {
	if len(prog) == 0 {
		return errors.New("empty seccomp program")
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// TSYNC: a Go program has several threads before main runs; all of them
	// must be filtered, or a goroutine on an unfiltered thread escapes.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): thread %d could not be synchronised", r)
	}
	return nil
}

// InstallFromFd reads a BPF program from fd until EOF, closes fd, and installs it.
func InstallFromFd(fd int) error {
	f := os.NewFile(uintptr(fd), "seccomp-bpf")
	if f == nil {
		return fmt.Errorf("seccomp fd %d is not valid", fd)
	}
	raw, err := io.ReadAll(io.LimitReader(f, int64(maxInstructions*sockFilterSize+1)))
	f.Close()
	if err != nil {
		return fmt.Errorf("read seccomp program: %w", err)
	}
	prog, err := Parse(raw)
	if err != nil {
		return err
	}
	return Install(prog)
}
