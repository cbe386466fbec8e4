package layer

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid marks a layer (or upper directory) that breaks the rules:
// an escaping or malformed name, a bad hard link, an unknown entry type.
var ErrInvalid = errors.New("invalid layer")

// ErrLimit marks a layer past Options' limits.
var ErrLimit = errors.New("layer too large")

const (
	whiteoutPrefix = ".wh."
	// whiteoutMeta prefixes AUFS bookkeeping entries (".wh..wh.plnk",
	// ".wh..wh.aufs"); the opaque marker is the only one with a meaning.
	whiteoutMeta = ".wh..wh."
	opaqueMarker = ".wh..wh..opq"

	opaqueXattr   = "trusted.overlay.opaque"
	redirectXattr = "trusted.overlay.redirect"
	metacopyXattr = "trusted.overlay.metacopy"

	// maxPathLen is Linux's PATH_MAX: a longer name could not be opened
	// in one call, and bounds the depth of the tree (and so of recursion).
	maxPathLen = 4096
	// maxNameLen is NAME_MAX, the longest single path component.
	maxNameLen = 255
)

// splitName turns a tar entry name into its path components relative to
// the layer root. It refuses instead of cleaning: an absolute name or a ".."
// component has no place in a layer, and silently rewriting it would hide
// a hostile tarball. "." components and a leading "./" are dropped (common
// and harmless). An empty result is the layer root itself.
func splitName(name string) ([]string, error) {
	if len(name) > maxPathLen {
		return nil, fmt.Errorf("%w: name longer than %d bytes", ErrInvalid, maxPathLen)
	}
	if strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("%w: absolute name %q", ErrInvalid, name)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("%w: NUL byte in name %q", ErrInvalid, name)
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch {
		case p == "" || p == ".":
			continue
		case p == "..":
			return nil, fmt.Errorf("%w: %q has a \"..\" component", ErrInvalid, name)
		case len(p) > maxNameLen:
			return nil, fmt.Errorf("%w: a component of %q is longer than %d bytes", ErrInvalid, name, maxNameLen)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// keepXattr says which extended attributes cross a layer boundary, in
// either direction: user.* only. trusted.* would let a tarball forge
// overlayfs' own metadata (opaque, redirect, metacopy) and security.*
// carries file capabilities and SELinux/IMA labels, which a sandbox (all
// capabilities dropped, no_new_privs) cannot use and a hostile image must
// not choose. user.overlay.* is overlayfs' metadata under the "userxattr"
// mount option; our mounts do not use it, but it is dropped all the same.
func keepXattr(name string) bool {
	return strings.HasPrefix(name, "user.") && !strings.HasPrefix(name, "user.overlay.")
}

// paxXattrPrefix is how PAX records carry extended attributes.
const paxXattrPrefix = "SCHILY.xattr."
