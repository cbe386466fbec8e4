package agent

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// File metadata, as E2B's SDKs write it (files.write with metadata: one
// X-Metadata-<key> header each) and read it (EntryInfo.metadata), is kept
// in the file's own "user.<key>" extended attributes: it moves with the
// file, and what a program in the sandbox sets as a user.* attribute
// (setfattr, os.setxattr) is metadata too. Keys are lower-cased (HTTP
// header names carry no case).

const (
	metadataHeaderPrefix = "X-Metadata-"
	xattrUserPrefix      = "user."
	// maxMetadataKeys, maxMetadataKey and maxMetadataValue bound what one
	// upload may attach (the kernel allows 255-byte names and 64 KiB
	// values; a file's attributes share one filesystem block on ext4).
	maxMetadataKeys  = 64
	maxMetadataKey   = 128
	maxMetadataValue = 2048
)

// metadataFromHeader returns the metadata an upload carries, nil when
// none; invalid_argument when it is over the bounds.
func metadataFromHeader(h http.Header) (map[string]string, error) {
	var md map[string]string
	for name, vals := range h {
		key, ok := strings.CutPrefix(name, metadataHeaderPrefix)
		if !ok || len(vals) == 0 {
			continue
		}
		key = strings.ToLower(key)
		switch {
		case key == "" || len(key) > maxMetadataKey:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("metadata key %q: 1 to %d characters", key, maxMetadataKey))
		case len(vals[0]) > maxMetadataValue:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("metadata value of %q is over %d bytes", key, maxMetadataValue))
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = vals[0]
	}
	if len(md) > maxMetadataKeys {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%d metadata keys; at most %d", len(md), maxMetadataKeys))
	}
	return md, nil
}

// setMetadata stores md on the open file fd.
func setMetadata(fd int, path string, md map[string]string) error {
	for k, v := range md {
		if err := unix.Fsetxattr(fd, xattrUserPrefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("metadata for %q: the filesystem keeps no user extended attributes", path))
			}
			return fsError(fmt.Sprintf("set metadata %q of %q", k, path), err)
		}
	}
	return nil
}

// readMetadata returns the user.* extended attributes of path (not
// following a final link), nil when it has none or they cannot be read.
func readMetadata(path string) map[string]string {
	buf := make([]byte, 1024)
	n, err := unix.Llistxattr(path, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(path, nil); err == nil && n > 0 && n <= 64<<10 {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(path, buf)
		}
	}
	if err != nil || n <= 0 {
		return nil
	}
	var md map[string]string
	val := make([]byte, maxMetadataValue)
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		key, ok := strings.CutPrefix(name, xattrUserPrefix)
		if !ok || key == "" {
			continue
		}
		vn, err := unix.Lgetxattr(path, name, val)
		if err != nil {
			continue // removed meanwhile, or larger than metadata may be
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = string(val[:vn])
		if len(md) == maxMetadataKeys {
			break
		}
	}
	return md
}
