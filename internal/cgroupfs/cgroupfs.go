// Package cgroupfs reads the counters and limits backends take from cgroup
// files (cgroup v1 and v2 alike). A file that cannot be read counts as 0:
// callers read optional counters of controllers a host may not have.
package cgroupfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadInt returns the single number in path; "max" (no limit) is -1.
func ReadInt(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return -1
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// ReadKey returns the value of "key N" in a flat-keyed cgroup file
// (memory.stat, memory.events, pids.events ...).
func ReadKey(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == key {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			return n
		}
	}
	return 0
}

// File is a flat-keyed cgroup file kept open and read again from its
// start, for counters read on a hot path (twice per exec): opening the
// file each time walks the cgroup path, registers the descriptor with the
// netpoller and allocates a scanner, about 15 µs a file where a pread of
// the open file costs about 1 µs. A cgroup file reads fresh values at
// every read from offset 0.
type File struct {
	fd int
}

// Open opens path for Key. It never follows a symbolic link in the last
// component (cgroup files are never links).
func Open(path string) (*File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &File{fd: fd}, nil
}

// fileBuf bounds one read of a File: the counter files it is meant for
// (memory.events, memory.oom_control, pids.events) are under 200 bytes.
const fileBuf = 1024

// Key returns the value of "key N" in the file's current content, 0 when
// the key is absent. An error means the file is no longer readable (its
// cgroup was removed: ENODEV) and should be opened again.
func (f *File) Key(key string) (int64, error) {
	var buf [fileBuf]byte
	n, err := unix.Pread(f.fd, buf[:], 0)
	if err != nil {
		return 0, fmt.Errorf("read cgroup file: %w", err)
	}
	if n == len(buf) {
		return 0, fmt.Errorf("read cgroup file: larger than %d bytes", fileBuf)
	}
	return parseKey(buf[:n], key), nil
}

// Close releases the descriptor.
func (f *File) Close() error {
	return unix.Close(f.fd)
}

// parseKey finds "key N" among the lines of data.
func parseKey(data []byte, key string) int64 {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if ok && string(k) == key {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}
