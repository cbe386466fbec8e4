// Package layer converts between OCI/Docker layer tarballs and directories
// in overlayfs form, treating every tarball as hostile: nothing it contains
// can write outside the destination, create devices, keep setuid bits, or
// grow past the limits given.
package layer

import (
	"context"
	"io"
)

// Defaults for Options' zero values. 64 GiB is far above any real image
// layer (the largest common ones, CUDA and ML stacks, are a few GiB) while
// still bounding a tar bomb; 2,000,000 entries is several times a full
// distribution with toolchains and keeps the per-directory bookkeeping of
// an unpack (about 100 bytes a directory) well under a few hundred MiB.
const (
	DefaultMaxBytes   int64 = 64 << 30
	DefaultMaxEntries       = 2_000_000
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
//
// Details (see unpack.go): errors wrap ErrInvalid or ErrLimit when the
// layer is at fault. Names are refused, not cleaned, when absolute or
// holding "..". An entry whose parent goes through a symlink of this layer
// is resolved inside dst as if dst were the root (openat2
// RESOLVE_IN_ROOT), the way the image's own root would see it. Only user.*
// extended attributes from PAX records are kept (see keepXattr). Sticky is
// kept on directories. Zero-filled blocks are written as holes. The layer
// root entry ("./") is accepted but its metadata is not applied: dst's own
// mode and owner are the caller's. Unpack needs root (mknod for whiteouts,
// chown). It stops at the tar end-of-archive marker: a caller hashing the
// whole stream drains the rest itself.
func Unpack(ctx context.Context, r io.Reader, dst string, opts Options) (Stats, error) {
	return unpack(ctx, r, dst, opts)
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
//
// Details (see diff.go): the walk is fd-relative and never follows a
// symlink, so a sandbox still running cannot make Diff read a host file.
// Entries come in a deterministic order (each directory's names sorted
// bytewise, parents first) with no atime, ctime or user/group names, so
// identical uppers give identical tars. Hard links inside the upper become
// tar links to the first path in that order. Owners outside
// [base, base+65536) are an error naming the file (Diff cannot guess the
// sandbox's id for them); whiteouts are written 0/0. Only user.* extended
// attributes are kept; setuid/setgid bits (and sticky on files) are
// dropped, as Unpack would, so that a Diff of a tree Unpack made gives its
// tar again. Fifos, sockets and devices other than whiteouts are left out.
// Our mounts use neither redirect_dir nor metacopy; an upper carrying
// trusted.overlay.redirect or trusted.overlay.metacopy is refused, since
// its tar would not give the merged view.
func Diff(ctx context.Context, upper string, w io.Writer, opts DiffOptions) error {
	return diff(ctx, upper, w, opts)
}
