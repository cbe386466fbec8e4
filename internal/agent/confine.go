package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
)

// Confinement keeps every path of a filesystem request inside directories
// the caller names, resolved here in the sandbox in one round trip, so a
// front end (agentscope's /workspace routes, the file tools) need not walk
// paths component by component from the daemon, and sandbox code cannot
// swap a directory for a symbolic link between a check and an act.
//
// A request is confined when it carries one or more RootHeader headers,
// each one root: an absolute, clean path of an existing directory (one
// path per header line; values are never split at commas). Every
// filesystem path of the request — the Filesystem RPCs Stat, ListDir,
// MakeDir, Move (both ends), Remove, WatchDir and CreateWatcher, GET and
// POST /files (every part of a multipart upload) and POST /fs/edit — is
// then resolved as follows:
//
//   - a relative path is relative to the first root (not the user's home,
//     and "~" is not expanded); the path is cleaned lexically and must be
//     a root or below one;
//   - each root is opened without following links (openat2 with
//     RESOLVE_NO_SYMLINKS, or component by component from "/"), so a
//     root is a real directory, not a link to one;
//   - the path's components are opened one by one from the root's
//     descriptor (openat O_PATH|O_NOFOLLOW; a run of directories with no
//     link among them in one openat2 with RESOLVE_BENEATH and
//     RESOLVE_NO_SYMLINKS); a symbolic link is read from the descriptor
//     just opened, its target (absolute, or relative to the link's
//     directory) is cleaned lexically and must be inside a root, and the
//     walk starts over from that root's descriptor with the target's
//     components; at most 40 links per path;
//   - the operation then acts through the descriptor of the final
//     component's directory with *at system calls, never by resolving a
//     path string again: a directory swapped for a link meanwhile is
//     either not seen at all or refused (O_NOFOLLOW), never followed out.
//
// The final component keeps each operation's semantics: Stat, Remove and
// Move act on a link itself (and a link's type is only looked up when its
// target is inside the roots); ListDir, WatchDir, downloads, uploads and
// edits go through a final link whose target is inside the roots. Missing
// parents of MakeDir, Move's destination and uploads are made one by one
// below the root. Recursive listings and watches never descend into
// links. Everything runs with the requested user's permissions, as
// unconfined requests do; paths in answers are the request's paths made
// absolute, as without confinement.
//
// A path that leads outside the roots is refused with permission_denied
// (REST routes: 403) and the response header ErrorHeader: ErrorOutsideRoot
// (on WatchDir also in the end-of-stream metadata); the message names the
// path and, for a link, the link and its target. Invalid roots are
// invalid_argument. Requests without RootHeader keep E2B's semantics.
const (
	// RootHeader names one root of a confined request (repeatable).
	RootHeader = "X-Agentbox-Root"
	// ErrorHeader qualifies an error answer for clients that must not
	// parse messages.
	ErrorHeader = "X-Agentbox-Error"
	// ErrorOutsideRoot is ErrorHeader's value when a path leads outside
	// the request's roots.
	ErrorOutsideRoot = "outside-root"
	// DialectHeader names the conventions of the front end a request
	// comes from. DialectE2B (set by the E2B front end): a process
	// started without a cwd runs in its user's home, the directory
	// relative file paths resolve against, as in E2B, instead of the
	// agent's --workdir (agentbox's /workspace). It changes defaults,
	// never what a request may do.
	DialectHeader = "X-Agentbox-Dialect"
	DialectE2B    = "e2b"
)

// e2bDialect reports whether h asks for E2B's conventions.
func e2bDialect(h http.Header) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get(DialectHeader)), DialectE2B)
}

const (
	// maxRoots bounds the roots of one request (each is opened per call).
	maxRoots = 16
	// maxLinks bounds the links followed for one path, as the kernel's
	// ELOOP limit does.
	maxLinks = 40
	// maxMkdirRetries bounds the attempts to make one missing parent, so
	// that a directory removed again by a concurrent process each time it
	// is made cannot keep a walk going forever.
	maxMkdirRetries = 8
)

// confinement is the validated roots of a confined request.
type confinement struct {
	roots []string
}

// confinementOf returns the request's roots, or nil when it carries none.
func confinementOf(h http.Header) (*confinement, error) {
	vals := h.Values(RootHeader)
	if len(vals) == 0 {
		return nil, nil
	}
	if len(vals) > maxRoots {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%d %s headers; at most %d", len(vals), RootHeader, maxRoots))
	}
	c := &confinement{roots: make([]string, 0, len(vals))}
	for _, v := range vals {
		if v == "" || strings.IndexByte(v, 0) >= 0 || !filepath.IsAbs(v) || filepath.Clean(v) != v {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s %q: a root is an absolute, clean directory path", RootHeader, v))
		}
		if !slices.Contains(c.roots, v) {
			c.roots = append(c.roots, v)
		}
	}
	return c, nil
}

// abs makes p absolute and clean: relative paths are relative to the
// first root. It does not check that the result is inside a root.
func (c *confinement) abs(p string) (string, error) {
	if p == "" {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("path is empty"))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q contains a NUL byte", p))
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(c.roots[0], p)
	}
	return filepath.Clean(p), nil
}

// do opens the roots as u and runs fn with them (all in u.do).
func (c *confinement) do(u *User, fn func(rs *rootSet) error) error {
	return u.do(func() error {
		rs, err := c.open()
		if err != nil {
			return err
		}
		defer rs.close()
		return fn(rs)
	})
}

// open opens every root (as the calling thread's user).
func (c *confinement) open() (*rootSet, error) {
	rs := &rootSet{paths: c.roots, fds: make([]int, 0, len(c.roots))}
	for _, r := range c.roots {
		fd, err := openRoot(r)
		if err != nil {
			rs.close()
			return nil, err
		}
		rs.fds = append(rs.fds, fd)
	}
	return rs, nil
}

// openRoot opens the directory root (absolute, clean) following no link:
// a root is what its path says.
func openRoot(root string) (int, error) {
	if fd, ok := openNoLinks(unix.AT_FDCWD, root, 0); ok {
		return fd, nil
	}
	// One component at a time from "/", which also says what is wrong.
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fsError("open /", err)
	}
	for _, c := range components(root, "/") {
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			return -1, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("%s %q is not a directory (links in a root's path are not followed): %w", RootHeader, root, err))
		case err != nil:
			return -1, fsError(fmt.Sprintf("open root %q", root), err)
		}
		fd = next
	}
	return fd, nil
}

// noOpenat2 is set once openat2 turned out to be missing (before Linux
// 5.6, some gVisor versions) or refused by a seccomp profile.
var noOpenat2 atomic.Bool

// openNoLinks opens path (relative to dirfd) as an O_PATH directory in one
// call when none of its components is a symbolic link, which is most
// paths: walking them one component at a time costs three system calls
// each. ok is false on any failure; the caller then walks the components
// itself, which says what is wrong.
func openNoLinks(dirfd int, path string, resolve uint64) (fd int, ok bool) {
	if noOpenat2.Load() {
		return -1, false
	}
	fd, err := unix.Openat2(dirfd, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | resolve,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		noOpenat2.Store(true)
	}
	return fd, err == nil
}

// rootSet is a confinement with its roots open: paths[i] is held as fds[i]
// (O_PATH descriptors).
type rootSet struct {
	paths []string
	fds   []int
}

func (rs *rootSet) close() {
	for _, fd := range rs.fds {
		unix.Close(fd)
	}
	rs.fds = nil
}

// rootOf returns the index of the innermost root that is p (clean,
// absolute) or contains it, or -1.
func (rs *rootSet) rootOf(p string) int {
	best := -1
	for i, r := range rs.paths {
		if (p == r || r == "/" || strings.HasPrefix(p, r+"/")) && (best < 0 || len(r) > len(rs.paths[best])) {
			best = i
		}
	}
	return best
}

func (rs *rootSet) describe() string { return strings.Join(rs.paths, ", ") }

// components splits p (clean, absolute, inside root) into the names below
// root; none for root itself.
func components(p, root string) []string {
	rel := strings.Trim(strings.TrimPrefix(p, root), "/")
	if rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

// resolved is where a confined path leads: the directory holding its
// final component, held open, and that component's name.
type resolved struct {
	abs     string // the path as requested, absolute and clean
	dir     int    // O_PATH descriptor of the directory (owned)
	dirReal string // that directory's path, with no link on it
	name    string // the final component; "." when the path is a root
}

func (r *resolved) close() {
	if r != nil && r.dir >= 0 {
		unix.Close(r.dir)
		r.dir = -1
	}
}

// isRoot reports whether the path named a root itself (or a link to one).
func (r *resolved) isRoot() bool { return r.name == "." }

// real is the link-free path of the final component.
func (r *resolved) real() string {
	if r.isRoot() {
		return r.dirReal
	}
	return filepath.Join(r.dirReal, r.name)
}

// walk flags.
const (
	// followFinal follows a final symbolic link (inside the roots); the
	// result then names the link's target.
	followFinal = 1 << iota
	// makeParents creates missing directories before the final component
	// (mode 0755, one mkdirat at a time below the held directory).
	makeParents
)

// resolve resolves abs (from confinement.abs) under the roots; see
// resolved. The final component need not exist; a missing directory
// before it is not_found unless makeParents is set.
func (rs *rootSet) resolve(abs string, flags int) (*resolved, error) {
	ri := rs.rootOf(abs)
	if ri < 0 {
		return nil, outsideRoot(fmt.Sprintf("path %q is outside the allowed roots (%s)", abs, rs.describe()))
	}
	return rs.walk(abs, rs.fds[ri], rs.paths[ri], components(abs, rs.paths[ri]), flags)
}

// walk resolves comps from the directory start (borrowed: walk never
// closes it), whose link-free path is startReal.
func (rs *rootSet) walk(abs string, start int, startReal string, comps []string, flags int) (*resolved, error) {
	// cur is the directory reached so far, owned unless it is start or
	// a root's descriptor (which the result then duplicates).
	cur, curReal, owned := start, startReal, false
	setCur := func(fd int, real string, own bool) {
		if owned {
			unix.Close(cur)
		}
		cur, curReal, owned = fd, real, own
	}
	fail := func(err error) (*resolved, error) {
		setCur(-1, "", false)
		return nil, err
	}
	done := func(name string) (*resolved, error) {
		dir := cur
		if !owned {
			var err error
			if dir, err = dupFd(cur); err != nil {
				return nil, err
			}
		}
		return &resolved{abs: abs, dir: dir, dirReal: curReal, name: name}, nil
	}
	// fresh: comps were just set (the start, or a link's target), so
	// the directories before the final component may be opened at once.
	fresh, links := true, 0
	for i, retries := 0, 0; i < len(comps); {
		if fresh && len(comps)-i > 1 {
			fresh = false
			if fd, ok := openNoLinks(cur, strings.Join(comps[i:len(comps)-1], "/"), unix.RESOLVE_BENEATH); ok {
				setCur(fd, filepath.Join(append([]string{curReal}, comps[i:len(comps)-1]...)...), true)
				i = len(comps) - 1
			}
		}
		c, last := comps[i], i == len(comps)-1
		if last && flags&followFinal == 0 {
			return done(c)
		}
		fd, err := unix.Openat(cur, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if last {
				return done(c)
			}
			if flags&makeParents == 0 {
				return fail(fsError(fmt.Sprintf("path %q", abs), &fs.PathError{Op: "open", Path: filepath.Join(curReal, c), Err: err}))
			}
			if retries++; retries > maxMkdirRetries {
				return fail(connect.NewError(connect.CodeAborted, fmt.Errorf("path %q: %s kept disappearing while it was made", abs, filepath.Join(curReal, c))))
			}
			// Made here, or by someone else meanwhile (EEXIST): either
			// way the next round opens and checks what is there now.
			if err := unix.Mkdirat(cur, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return fail(fsError(fmt.Sprintf("create parent %q of %q", filepath.Join(curReal, c), abs), err))
			}
			continue
		}
		if err != nil {
			return fail(fsError(fmt.Sprintf("path %q", abs), &fs.PathError{Op: "open", Path: filepath.Join(curReal, c), Err: err}))
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fail(fsError(fmt.Sprintf("stat %q", filepath.Join(curReal, c)), err))
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			// Read from the descriptor: the very link just opened, not
			// whatever has its name by now.
			target, err := readlinkFd(fd)
			unix.Close(fd)
			if err != nil {
				return fail(fsError(fmt.Sprintf("read link %q", filepath.Join(curReal, c)), err))
			}
			if links++; links > maxLinks {
				return fail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q: too many levels of symbolic links: %w", abs, unix.ELOOP)))
			}
			t := target
			if !filepath.IsAbs(t) {
				t = filepath.Join(curReal, t)
			}
			t = filepath.Clean(t)
			ri := rs.rootOf(t)
			if ri < 0 {
				return fail(outsideRoot(fmt.Sprintf("path %q leads outside the allowed roots (%s) through the symbolic link %s -> %s",
					abs, rs.describe(), filepath.Join(curReal, c), target)))
			}
			// Start over from that root with the target in the link's
			// place: ".." in it was resolved lexically above, and the
			// root's descriptor is where the walk stands now.
			setCur(rs.fds[ri], rs.paths[ri], false)
			comps = append(components(t, rs.paths[ri]), comps[i+1:]...)
			i, fresh = 0, true
		case unix.S_IFDIR:
			if last {
				// Name the directory by its parent, like any final
				// component: operations act on (parent, name).
				unix.Close(fd)
				return done(c)
			}
			setCur(fd, filepath.Join(curReal, c), true)
			i, retries = i+1, 0
		default:
			unix.Close(fd)
			if last {
				return done(c)
			}
			return fail(fsError(fmt.Sprintf("path %q", abs), &fs.PathError{Op: "open", Path: filepath.Join(curReal, c, comps[i+1]), Err: unix.ENOTDIR}))
		}
	}
	// No component left: the path is a root (or a link led to one).
	return done(".")
}

// follow resolves the link (or anything) named by r again with
// followFinal, from r's directory: r itself stays as it was.
func (rs *rootSet) follow(r *resolved) (*resolved, error) {
	if r.isRoot() {
		return rs.resolve(r.abs, followFinal)
	}
	return rs.walk(r.abs, r.dir, r.dirReal, []string{r.name}, followFinal)
}

// outsideRoot is the refusal of a path leading outside the roots.
func outsideRoot(msg string) error {
	err := connect.NewError(connect.CodePermissionDenied, errors.New(msg))
	err.Meta().Set(ErrorHeader, ErrorOutsideRoot)
	return err
}

// isOutsideRoot reports whether err is outsideRoot's refusal.
func isOutsideRoot(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Meta().Get(ErrorHeader) == ErrorOutsideRoot
}

func dupFd(fd int) (int, error) {
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("duplicate a descriptor: %w", err))
	}
	return n, nil
}

// readlinkFd reads the link an O_PATH|O_NOFOLLOW descriptor holds (the
// very link that was opened, not whatever has its name now).
func readlinkFd(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// statInfo is an fs.FileInfo of an fstatat result.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (fi *statInfo) Name() string       { return fi.name }
func (fi *statInfo) Size() int64        { return fi.st.Size }
func (fi *statInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *statInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *statInfo) Sys() any           { return &fi.st }

// Mode converts st_mode the way package os does.
func (fi *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if fi.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if fi.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if fi.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// statAt is fstatat(dir, name) without following a final link.
func statAt(dir int, name string) (*statInfo, error) {
	fi := &statInfo{name: name}
	if err := unix.Fstatat(dir, name, &fi.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return fi, nil
}

// entryAt describes (dir, name), whose link-free directory is dirReal, as
// path. A link's type is that of its target when the target is inside the
// roots and exists; FILE_TYPE_SYMLINK otherwise (nothing outside the roots
// is looked at).
func (s *Server) entryAt(rs *rootSet, dir int, dirReal, name, path string) (*fspb.EntryInfo, error) {
	fi, err := statAt(dir, name)
	if err != nil {
		return nil, fsError(fmt.Sprintf("stat %q", path), err)
	}
	return s.entryOfStat(rs, dir, dirReal, name, path, fi), nil
}

// entryOfStat is entryAt for a known fstatat result.
func (s *Server) entryOfStat(rs *rootSet, dir int, dirReal, name, path string, fi *statInfo) *fspb.EntryInfo {
	e := s.baseEntry(path, fi)
	if fi.Mode()&fs.ModeSymlink == 0 {
		return e
	}
	e.IsSymlink = true
	buf := make([]byte, unix.PathMax)
	if n, err := unix.Readlinkat(dir, name, buf); err == nil && n < len(buf) {
		target := string(buf[:n])
		e.SymlinkTarget = &target
	}
	t, err := rs.walk(path, dir, dirReal, []string{name}, followFinal)
	if err != nil {
		return e
	}
	defer t.close()
	if tfi, err := statAt(t.dir, t.name); err == nil {
		e.Type = fileType(tfi.Mode())
	}
	return e
}

// openDirAt opens the directory (dir, name) for reading without following
// a link in name; what names it for messages.
func openDirAt(dir int, name, what string) (*os.File, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is not a directory", what))
	}
	if err != nil {
		return nil, fsError(fmt.Sprintf("open %q", what), err)
	}
	return os.NewFile(uintptr(fd), what), nil
}

// fdOf is f's descriptor for *at calls. SyscallConn, unlike Fd, leaves
// the file's blocking mode alone.
func fdOf(f *os.File) int {
	fd := -1
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(p uintptr) { fd = int(p) })
	}
	return fd
}

// removeAt removes (dir, name) and, for a directory, everything below it,
// never following a link: directories are opened with O_NOFOLLOW relative
// to their parent's descriptor, everything else is unlinked by name.
func removeAt(dir int, name string) error {
	for attempt := 0; ; attempt++ {
		err := unix.Unlinkat(dir, name, 0)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
			return &fs.PathError{Op: "unlinkat", Path: name, Err: err}
		}
		fd, oerr := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(oerr, unix.ENOENT) {
			return nil
		}
		if errors.Is(oerr, unix.ENOTDIR) || errors.Is(oerr, unix.ELOOP) {
			if errors.Is(err, unix.EPERM) {
				// Not a directory: the unlink itself was refused (a
				// sticky directory, an immutable file).
				return &fs.PathError{Op: "unlinkat", Path: name, Err: err}
			}
			if attempt < 3 {
				continue // replaced by a file or a link meanwhile: unlink that
			}
		}
		if oerr != nil {
			return &fs.PathError{Op: "openat", Path: name, Err: oerr}
		}
		f := os.NewFile(uintptr(fd), name)
		names, rerr := f.Readdirnames(-1)
		var first error
		if rerr != nil {
			first = &fs.PathError{Op: "readdirent", Path: name, Err: rerr}
		}
		for _, n := range names {
			if err := removeAt(fd, n); err != nil && first == nil {
				first = err
			}
		}
		f.Close()
		if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			if first != nil {
				return first
			}
			return &fs.PathError{Op: "unlinkat", Path: name, Err: err}
		}
		return nil
	}
}

// statfsFd is fstatfs on fd.
func statfsFd(fd int) (unix.Statfs_t, error) {
	var st unix.Statfs_t
	return st, unix.Fstatfs(fd, &st)
}

// procFdPath names fd through /proc/self/fd, for the few calls that take
// only a path (inotify_add_watch): the kernel resolves it to the
// descriptor's own file.
func procFdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }
