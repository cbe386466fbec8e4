package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
)

// watchEventBuffer bounds the events a watcher holds for its consumer.
// When the consumer falls behind, newer events are dropped and counted
// (inotify itself drops on overflow too); watching never blocks the agent.
const watchEventBuffer = 4096

const inotifyMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// dirWatcher turns inotify events below root into FilesystemEvents whose
// name is relative to root. Recursive watchers add watches for directories
// created (or moved in) later.
type dirWatcher struct {
	root         string
	recursive    bool
	includeEntry bool
	user         *User
	s            *Server
	log          *slog.Logger

	// A confined watcher (newConfinedWatcher) holds the watched
	// directory open, its link-free path and the request's roots:
	// directories are found from rootDir, never by path.
	rootDir  *os.File
	rootReal string
	rs       *rootSet

	f       *os.File // the inotify descriptor, poller-backed
	mu      sync.Mutex
	wds     map[int]string // watch descriptor -> directory relative to root
	events  chan *fspb.FilesystemEvent
	dropped atomic.Int64
	done    chan struct{}
}

// newDirWatcher starts watching root (an existing directory) as user u.
func (s *Server) newDirWatcher(u *User, root string, recursive, includeEntry, allowNetwork bool) (*dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("inotify: %w", err))
	}
	w := &dirWatcher{
		root: root, recursive: recursive, includeEntry: includeEntry, user: u, s: s,
		log:    s.log.With("watch", root),
		f:      os.NewFile(uintptr(fd), "inotify"),
		wds:    make(map[int]string),
		events: make(chan *fspb.FilesystemEvent, watchEventBuffer),
		done:   make(chan struct{}),
	}
	err = u.do(func() error {
		fi, err := os.Stat(root)
		if err != nil {
			return fsError(fmt.Sprintf("watch %q", root), err)
		}
		if !fi.IsDir() {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is not a directory", root))
		}
		if !allowNetwork && onNetworkFS(root) {
			return connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("%q is on a network filesystem where change events are unreliable; set allowNetworkMounts to watch it anyway", root))
		}
		return w.addTree(root, "")
	})
	if err != nil {
		w.f.Close()
		return nil, err
	}
	go w.readLoop()
	return w, nil
}

// newConfinedWatcher is newDirWatcher for a confined request (see
// RootHeader): abs is resolved under the roots, the directory is held open
// and watched through its descriptor, and subdirectories are opened from
// their parent's descriptor without following links.
func (s *Server) newConfinedWatcher(u *User, conf *confinement, abs string, recursive, includeEntry, allowNetwork bool) (*dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("inotify: %w", err))
	}
	w := &dirWatcher{
		root: abs, recursive: recursive, includeEntry: includeEntry, user: u, s: s,
		log:    s.log.With("watch", abs),
		f:      os.NewFile(uintptr(fd), "inotify"),
		wds:    make(map[int]string),
		events: make(chan *fspb.FilesystemEvent, watchEventBuffer),
		done:   make(chan struct{}),
	}
	err = u.do(func() error {
		rs, err := conf.open()
		if err != nil {
			return err
		}
		w.rs = rs
		r, err := rs.resolve(abs, followFinal)
		if err != nil {
			return err
		}
		defer r.close()
		if _, err := statAt(r.dir, r.name); err != nil {
			return fsError(fmt.Sprintf("watch %q", abs), err)
		}
		if w.rootDir, err = openDirAt(r.dir, r.name, abs); err != nil {
			return err
		}
		w.rootReal = r.real()
		if st, err := statfsFd(fdOf(w.rootDir)); err == nil && !allowNetwork && networkFS(st) {
			return connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("%q is on a network filesystem where change events are unreliable; set allowNetworkMounts to watch it anyway", abs))
		}
		return w.addTreeAt(w.rootDir, "")
	})
	if err != nil {
		w.f.Close()
		w.closeConfined()
		return nil, err
	}
	go w.readLoop()
	return w, nil
}

// addTreeAt is addTree for a confined watcher: d is the directory rel
// (open; the caller closes it), watched through its descriptor.
func (w *dirWatcher) addTreeAt(d *os.File, rel string) error {
	fd := fdOf(d)
	if err := w.add(procFdPath(fd), rel); err != nil {
		return err
	}
	if !w.recursive {
		return nil
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	for _, name := range names {
		if fi, err := statAt(fd, name); err != nil || !fi.IsDir() {
			continue
		}
		sub, err := openDirAt(fd, name, name)
		if err != nil {
			continue // gone, unreadable, or replaced by a link meanwhile
		}
		_ = w.addTreeAt(sub, filepath.Join(rel, name))
		sub.Close()
	}
	return nil
}

// openRel opens the directory rel below a confined watcher's directory
// from its descriptor, one component at a time, following no link; flags
// are the last component's open flags (O_PATH or O_RDONLY).
func (w *dirWatcher) openRel(rel string, flags int) (int, error) {
	base, cur := fdOf(w.rootDir), -1
	comps := components(filepath.Join("/", rel), "/")
	if len(comps) == 0 {
		return unix.Openat(base, ".", flags|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	for i, c := range comps {
		fl := unix.O_PATH
		if i == len(comps)-1 {
			fl = flags
		}
		next, err := unix.Openat(base, c, fl|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur >= 0 {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		base, cur = next, next
	}
	return cur, nil
}

// closeConfined releases what a confined watcher holds.
func (w *dirWatcher) closeConfined() {
	if w.rootDir != nil {
		w.rootDir.Close()
	}
	if w.rs != nil {
		w.rs.close()
	}
}

// addTree watches dir (rel to root) and, when recursive, every directory
// below it that is not a symlink. Subdirectories that vanish or cannot be
// read are skipped.
func (w *dirWatcher) addTree(dir, rel string) error {
	if err := w.add(dir, rel); err != nil {
		return err
	}
	if !w.recursive {
		return nil
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, de := range des {
		if de.IsDir() {
			_ = w.addTree(filepath.Join(dir, de.Name()), filepath.Join(rel, de.Name()))
		}
	}
	return nil
}

// add watches dir, the directory rel below root (for a confined watcher
// dir names its descriptor in /proc/self/fd).
func (w *dirWatcher) add(dir, rel string) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	var wd int
	var aerr error
	if err := rc.Control(func(fd uintptr) { wd, aerr = unix.InotifyAddWatch(int(fd), dir, inotifyMask) }); err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	if aerr != nil {
		what := filepath.Join(w.root, rel)
		if errors.Is(aerr, unix.ENOSPC) {
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %q: inotify watch limit reached: %w", what, aerr))
		}
		return fsError(fmt.Sprintf("watch %q", what), aerr)
	}
	w.mu.Lock()
	w.wds[wd] = rel
	w.mu.Unlock()
	return nil
}

// close stops the watcher; its events channel is closed once the read
// loop has exited.
func (w *dirWatcher) close() {
	w.f.Close() // wakes the read loop
	<-w.done
	w.closeConfined()
}

func (w *dirWatcher) readLoop() {
	defer close(w.done)
	defer close(w.events)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.log.Warn("inotify read failed", "err", err)
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			off += unix.SizeofInotifyEvent + int(raw.Len)
			w.handle(int(raw.Wd), raw.Mask, cString(nameBytes))
		}
	}
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// handle maps one inotify event. IN_MOVED_TO counts as a creation (the name
// appears), IN_MOVED_FROM as a rename (the name goes away), the way
// fsnotify and upstream envd report them.
func (w *dirWatcher) handle(wd int, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.log.Warn("inotify queue overflowed; events were lost")
		return
	}
	w.mu.Lock()
	dir, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.wds, wd)
	}
	w.mu.Unlock()
	if !ok || mask&unix.IN_IGNORED != 0 {
		return
	}
	rel := filepath.Join(dir, name)
	if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
		if dir != "" {
			return // reported by the parent directory's watch
		}
		rel = "."
	}
	isDir := mask&unix.IN_ISDIR != 0
	var typ fspb.EventType
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		typ = fspb.EventType_EVENT_TYPE_CREATE
		switch {
		case isDir && w.recursive && w.rootDir != nil:
			_ = w.user.do(func() error {
				fd, err := w.openRel(rel, unix.O_RDONLY)
				if err != nil {
					return nil // gone, or replaced by a link meanwhile
				}
				d := os.NewFile(uintptr(fd), rel)
				defer d.Close()
				return w.addTreeAt(d, rel)
			})
		case isDir && w.recursive:
			abs := filepath.Join(w.root, rel)
			_ = w.user.do(func() error { return w.addTree(abs, rel) })
		}
	case mask&unix.IN_MODIFY != 0:
		typ = fspb.EventType_EVENT_TYPE_WRITE
	case mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0:
		typ = fspb.EventType_EVENT_TYPE_REMOVE
	case mask&(unix.IN_MOVED_FROM|unix.IN_MOVE_SELF) != 0:
		typ = fspb.EventType_EVENT_TYPE_RENAME
	case mask&unix.IN_ATTRIB != 0:
		typ = fspb.EventType_EVENT_TYPE_CHMOD
	default:
		return
	}
	ev := &fspb.FilesystemEvent{Name: rel, Type: typ}
	if w.includeEntry && (typ == fspb.EventType_EVENT_TYPE_CREATE || typ == fspb.EventType_EVENT_TYPE_WRITE || typ == fspb.EventType_EVENT_TYPE_CHMOD) {
		abs := filepath.Join(w.root, rel)
		_ = w.user.do(func() error {
			if w.rootDir != nil {
				ev.Entry = w.confinedEntry(rel, abs)
			} else if e, err := w.s.entryInfo(abs); err == nil {
				ev.Entry = e
			}
			return nil
		})
	}
	select {
	case w.events <- ev:
	default:
		if w.dropped.Add(1) == 1 {
			w.log.Warn("watch consumer too slow; dropping events")
		}
	}
}

// confinedEntry describes rel (below a confined watcher's directory) as
// abs, or is nil when it cannot be reached without following a link.
func (w *dirWatcher) confinedEntry(rel, abs string) *fspb.EntryInfo {
	dir := filepath.Dir(rel)
	fd, err := w.openRel(dir, unix.O_PATH)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	e, err := w.s.entryAt(w.rs, fd, filepath.Join(w.rootReal, dir), filepath.Base(rel), abs)
	if err != nil {
		return nil
	}
	return e
}

// onNetworkFS reports whether path lives on NFS, SMB/CIFS or FUSE.
func onNetworkFS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return networkFS(st)
}

// networkFS reports whether st is that of NFS, SMB/CIFS or FUSE.
func networkFS(st unix.Statfs_t) bool {
	switch uint32(st.Type) {
	case unix.NFS_SUPER_MAGIC, unix.SMB_SUPER_MAGIC, 0xFF534D42 /* CIFS */, 0xFE534D42 /* SMB2 */, unix.FUSE_SUPER_MAGIC:
		return true
	}
	return false
}
