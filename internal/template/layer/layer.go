// Package layer converts between OCI/Docker layer tarballs and directories
// in overlayfs form, treating every tarball as hostile: nothing it contains
// can write outside the destination, create devices, keep setuid bits, or
// grow past the limits given.
package layer

import (
	"context"
	"errors"
	"io"
)

// Options bound what one layer may unpack. Zero values mean the defaults.
type Options struct {
	// MaxBytes caps the total size of regular file contents (sparse holes
	// count as their apparent size).
	MaxBytes int64
	// MaxEntries caps the number of tar entries.
	MaxEntries int
}

// Stats describe an unpacked layer.
type Stats struct {
	Bytes   int64 // regular file bytes written
	Entries int
}

// Unpack extracts the uncompressed layer tar r into dst, an existing empty
// directory, in overlayfs form: ".wh.NAME" entries become whiteouts (a 0/0
// character device NAME), ".wh..wh..opq" marks its directory opaque
// (trusted.overlay.opaque=y). Ownership is kept as in the tar (the image's
// ids), modes are kept without setuid/setgid bits, device nodes, fifos and
// sockets are skipped, symlinks are created as they are (never followed),
// hard links must point at a file of this layer, and no entry may resolve
// outside dst ("..", absolute paths, through an earlier symlink). It fails
// past opts' limits or when ctx ends; on failure dst may hold a partial
// layer that the caller removes.
func Unpack(ctx context.Context, r io.Reader, dst string, opts Options) (Stats, error) {
	return Stats{}, errors.New("layer.Unpack: not implemented")
}

// DiffOptions say how to read an overlayfs upper directory.
type DiffOptions struct {
	// UIDBase/GIDBase are the host ids of the sandbox's uid/gid 0: file
	// owners are shifted back by them so the layer carries image ids.
	UIDBase, GIDBase uint32
	// Exclude are paths (relative to upper, e.g. "tmp", "workspace") left
	// out of the layer.
	Exclude []string
}

// Diff writes the OCI layer tar of an overlayfs upper directory to w:
// whiteouts become ".wh.NAME" entries and opaque directories get a
// ".wh..wh..opq" entry, so that the tar applied on top of the lower layers
// gives the merged view the sandbox saw.
func Diff(ctx context.Context, upper string, w io.Writer, opts DiffOptions) error {
	return errors.New("layer.Diff: not implemented")
}
