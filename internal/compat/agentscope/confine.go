package agentscope

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The /workspace-only routes and tools check a path lexically first
// (resolveWorkspacePath), then resolve its symlinks as the sandbox sees
// them, through the agent, and act on the link-free result: a link inside
// /workspace pointing out of it (to /etc, /home/user) is refused instead
// of followed. The agent acts on the resolved path with no link left to
// follow; a process inside the sandbox that swaps a directory for a link
// between the check and the act can still win the race, but such a
// process can already read and write all of it with the same user's
// rights, so the race gives nothing the sandbox does not have.

// maxSymlinks bounds the links followed for one path, as the kernel's
// ELOOP limit does.
const maxSymlinks = 40

// errOutside means a path leads out of /workspace.
type errOutside struct{ path string }

func (e errOutside) Error() string { return e.path + " is outside " + workspaceRoot }

// realWorkspacePath resolves the symlinks of abs (lexically inside
// /workspace) in the sandbox and returns the path with none left. With
// keepLast the final component is kept as it is (remove, move and stat act
// on a link itself). The part that does not exist yet is kept as given.
// errOutside when a link leads out of /workspace.
func realWorkspacePath(ctx context.Context, c *dataplane.Request, abs string, keepLast bool) (string, error) {
	rest := splitWorkspacePath(abs)
	done, links := workspaceRoot, 0
	for len(rest) > 0 {
		next := done + "/" + rest[0]
		rest = rest[1:]
		if keepLast && len(rest) == 0 {
			return next, nil
		}
		e, err := c.Stat(ctx, next, "")
		if sandbox.IsNotFound(err) {
			return path.Join(append([]string{next}, rest...)...), nil
		}
		if err != nil {
			return "", err
		}
		if !e.IsSymlink {
			if e.Type != dataplane.FileTypeDir && len(rest) > 0 {
				// A file with more after it: the act fails as it should.
				return path.Join(append([]string{next}, rest...)...), nil
			}
			done = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", sandbox.Errorf(sandbox.ClassInvalid, "too many levels of symbolic links: %s", abs)
		}
		target := e.SymlinkTarget
		if !path.IsAbs(target) {
			target = path.Join(done, target)
		}
		target = path.Clean(target)
		if target != workspaceRoot && !strings.HasPrefix(target, workspaceRoot+"/") {
			return "", errOutside{path: target}
		}
		// Start over from the root with the link's target in its place.
		rest = append(splitWorkspacePath(target), rest...)
		done = workspaceRoot
	}
	return done, nil
}

// splitWorkspacePath is the components of a clean path under /workspace.
func splitWorkspacePath(abs string) []string {
	rel := strings.Trim(strings.TrimPrefix(abs, workspaceRoot), "/")
	if rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

// wsReal resolves a workspace route's path (see realWorkspacePath); a
// path leading out of /workspace is the routes' 403.
func wsReal(r *http.Request, c *dataplane.Request, p string, keepLast bool) (string, error) {
	real, err := realWorkspacePath(r.Context(), c, p, keepLast)
	if _, ok := err.(errOutside); ok {
		return "", detailErr(http.StatusForbidden, detailOutside)
	}
	return real, err
}

// real resolves a filesystem tool's path (see realWorkspacePath), with
// the MCP filesystem server's refusal text for a link leading outside.
func (f *fsCtx) real(p string, keepLast bool) (string, error) {
	real, err := realWorkspacePath(f.ctx, f.dr, p, keepLast)
	if o, ok := err.(errOutside); ok {
		return "", fmt.Errorf("Access denied - symlink target outside allowed directories: %s not in %s", o.path, workspaceRoot) //nolint:staticcheck // exact text
	}
	if err != nil {
		return "", fsErr(err, "realpath", p)
	}
	return real, nil
}
