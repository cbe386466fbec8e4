package builder

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// rootView reads the merged view of a template's layer directories
// (overlayfs form, lowest first) the way overlayfs would show it, without
// mounting anything: the topmost layer holding a name wins, a whiteout
// (0/0 character device) hides it, an opaque directory hides the layers
// below. Host-level symlinks are never followed: every host path it opens
// has only real directories as its components.
type rootView struct {
	layers []string // topmost first
}

func newRootView(t sandbox.Template) *rootView {
	v := &rootView{}
	switch {
	case len(t.Layers) > 0:
		for i := len(t.Layers) - 1; i >= 0; i-- {
			v.layers = append(v.layers, t.Layers[i])
		}
	case t.Kind == sandbox.TemplateDir && t.Dir != "":
		v.layers = []string{t.Dir}
	}
	return v
}

// maxSymlinks bounds symlink resolution, as the kernel does.
const maxSymlinks = 40

// entry is one name in the merged view.
type entry struct {
	info fs.FileInfo
	host string // host path in the layer that provides it
	// dirs are the layers' host directories merged into this directory
	// (topmost first); only for directories.
	dirs []string
}

var errNotExist = fs.ErrNotExist

func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(dir string) bool {
	buf := make([]byte, 2)
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// rootEntry is the merged root directory.
func (v *rootView) rootEntry() (*entry, error) {
	e := &entry{}
	if len(v.layers) == 0 {
		// scratch: an empty root directory.
		e.info = emptyDir{}
		return e, nil
	}
	for _, l := range v.layers {
		fi, err := os.Lstat(l)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("layer %s: not a directory", l)
		}
		if e.info == nil {
			e.info, e.host = fi, l
		}
		e.dirs = append(e.dirs, l)
		if isOpaque(l) {
			break
		}
	}
	return e, nil
}

// child looks name up in the merged directory dir.
func (v *rootView) child(dir *entry, name string) (*entry, error) {
	var e *entry
	for _, d := range dir.dirs {
		hp := filepath.Join(d, name)
		fi, err := os.Lstat(hp)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if e == nil {
			if isWhiteout(fi) {
				return nil, errNotExist
			}
			e = &entry{info: fi, host: hp}
			if !fi.IsDir() {
				return e, nil
			}
		}
		// Lower layers merge into a directory until a non-directory, a
		// whiteout or an opaque directory.
		if !fi.IsDir() {
			break
		}
		e.dirs = append(e.dirs, hp)
		if isOpaque(hp) {
			break
		}
	}
	if e == nil {
		return nil, errNotExist
	}
	return e, nil
}

// resolve returns the entry at p (absolute in the view), following
// symlinks in every component (and the last one when follow is set)
// scoped to the view's root, and the path it resolved to.
func (v *rootView) resolve(p string, follow bool) (*entry, string, error) {
	root, err := v.rootEntry()
	if err != nil {
		return nil, "", err
	}
	hops := 0
	cur, curPath := root, "/"
	rest := splitPath(p)
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			curPath = path.Dir(curPath)
			cur, _, err = v.resolve(curPath, true)
			if err != nil {
				return nil, "", err
			}
			continue
		}
		if !cur.info.IsDir() {
			return nil, "", fmt.Errorf("%s: %w", curPath, syscall.ENOTDIR)
		}
		e, err := v.child(cur, name)
		if err != nil {
			return nil, "", err
		}
		next := path.Join(curPath, name)
		if e.info.Mode()&fs.ModeSymlink != 0 && (len(rest) > 0 || follow) {
			if hops++; hops > maxSymlinks {
				return nil, "", fmt.Errorf("%s: %w", p, syscall.ELOOP)
			}
			target, err := os.Readlink(e.host)
			if err != nil {
				return nil, "", err
			}
			if strings.HasPrefix(target, "/") {
				cur, curPath = root, "/"
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		cur, curPath = e, next
	}
	return cur, curPath, nil
}

func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// readDir lists a merged directory, sorted by name.
func (v *rootView) readDir(dir *entry) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	for _, d := range dir.dirs {
		des, err := os.ReadDir(d)
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			if seen[de.Name()] {
				continue
			}
			seen[de.Name()] = true
			names = append(names, de.Name())
		}
	}
	// Whiteouts hide their names: child() says which really exist.
	out := names[:0]
	for _, n := range names {
		if _, err := v.child(dir, n); err == nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// readFile reads a regular file of the view, at most limit bytes.
func (v *rootView) readFile(p string, limit int64) ([]byte, error) {
	e, _, err := v.resolve(p, true)
	if err != nil {
		return nil, err
	}
	if !e.info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	f, err := openNoFollow(e.host)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", p, limit)
	}
	return data, nil
}

// openNoFollow opens a host file refusing a symlink as its last component
// (its parents were checked to be real directories).
func openNoFollow(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
}

// emptyDir is the root of an image with no layers.
type emptyDir struct{}

func (emptyDir) Name() string       { return "/" }
func (emptyDir) Size() int64        { return 0 }
func (emptyDir) Mode() fs.FileMode  { return fs.ModeDir | 0o755 }
func (emptyDir) ModTime() time.Time { return time.Unix(0, 0) }
func (emptyDir) IsDir() bool        { return true }
func (emptyDir) Sys() any           { return nil }
