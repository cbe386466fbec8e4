package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A sandbox's init runs as its user namespace's root, a host id of the
// sandbox's private range, and its capabilities there do not cover the
// host's files: before it pivots into its root filesystem it resolves that
// directory's path (libcontainer's prepareRoot remounts it private, then
// binds it), so it must be allowed to search every directory on the way,
// as "others". Everything below the backend's root is 0711 (see New); the
// directories above it are the operator's, and one of them without o+x
// (a data dir under /root, a home directory of mode 0750, a umask 077
// install) would fail every sandbox's start with "permission denied".
// Bind mount sources need no such search: libcontainer opens those the
// init cannot reach from the host side.

// checkSandboxesCanTraverse returns an error naming each directory above
// root, on its path as given and as symlinks resolve it, that others may
// not search.
func checkSandboxesCanTraverse(root string) error {
	paths := []string{root}
	if real, err := filepath.EvalSymlinks(root); err == nil && real != root {
		paths = append(paths, real)
	}
	seen := map[string]bool{}
	var closed []string
	for _, p := range paths {
		for dir := filepath.Dir(p); !seen[dir]; dir = filepath.Dir(dir) {
			seen[dir] = true
			// A symlink's own mode means nothing: where it leads is
			// checked on the resolved path.
			st, err := os.Lstat(dir)
			if err != nil {
				return fmt.Errorf("native: data dir ancestor %s: %w", dir, err)
			}
			if st.Mode()&os.ModeSymlink == 0 && st.Mode().Perm()&0o001 == 0 {
				closed = append(closed, dir)
			}
			if dir == "/" {
				break
			}
		}
	}
	if len(closed) == 0 {
		return nil
	}
	return fmt.Errorf("native: sandboxes cannot reach their root filesystems under %s: they run as unprivileged host ids, which may not search %s (no execute permission for others); "+
		"run `chmod o+x %s` (others may then pass through, not list) or use a data dir whose parents are searchable, such as /var/lib/agentbox",
		root, strings.Join(closed, ", "), strings.Join(closed, " "))
}
