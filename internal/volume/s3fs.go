package volume

import (
	"context"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/minio/minio-go/v7"
)

// s3FS is one s3 volume served over FUSE on this replica. What it is and
// is not (docs/volumes.md):
//
//   - an open reads the object whole into an unlinked spool file of the
//     daemon's and serves reads and writes from it; the flush of a close
//     (or an fsync) of a written file uploads it whole, as one object.
//     Two writers of one file: the last close wins, whole.
//   - no attribute or entry cache: lookups, stats and listings ask the
//     bucket each time, so what a close uploaded anywhere is what the
//     next open reads.
//   - files and directories only: no symlinks, hard links or special
//     files; a directory's rename is refused with EXDEV (mv then copies);
//     a file's rename is a server-side copy and a delete.
//   - every file belongs to the sandbox user (uid and gid 1000); the
//     permission bits of files are kept (object metadata), of
//     directories are 0755.
//   - the volume's size is enforced here, against what this replica
//     knows the volume holds (counted at mount, then kept by its own
//     writes): ENOSPC for a writer past it. Writers on two replicas at
//     once can together exceed it by what they write meanwhile.
type s3FS struct {
	d      *S3
	v      Volume
	prefix string
	used   atomic.Int64
}

// recount sets used from the bucket.
func (f *s3FS) recount(ctx context.Context) error {
	n, err := f.d.used(ctx, f.v)
	if err != nil {
		return err
	}
	f.used.Store(n)
	return nil
}

// reserve takes n more bytes of the volume's size (n < 0 gives back).
func (f *s3FS) reserve(n int64) bool {
	for {
		cur := f.used.Load()
		if n > 0 && cur+n > f.v.SizeBytes {
			return false
		}
		if f.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (f *s3FS) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.d.timeout())
}

// errno turns a bucket error into the errno a file operation returns: a
// missing object is ENOENT, anything else (the bucket down, refused) EIO.
func (f *s3FS) errno(op, key string, err error) syscall.Errno {
	if isNotFound(err) {
		return syscall.ENOENT
	}
	f.d.Log.Warn("s3 volume: bucket request failed", "volume", f.v.ID, "op", op, "key", key, "err", err)
	return syscall.EIO
}

func isNotFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.StatusCode == http.StatusNotFound
}

const modeMeta = "Mode" // user metadata of a file's permission bits

// s3Node is a file or directory of the volume; its path is its place in
// the kernel's tree (Inode.Path), so a rename needs no bookkeeping here.
type s3Node struct {
	fs.Inode
	fsys *s3FS
	dir  bool

	mu   sync.Mutex
	open map[*s3Handle]struct{}
}

var (
	_ fs.NodeLookuper  = (*s3Node)(nil)
	_ fs.NodeGetattrer = (*s3Node)(nil)
	_ fs.NodeSetattrer = (*s3Node)(nil)
	_ fs.NodeReaddirer = (*s3Node)(nil)
	_ fs.NodeOpener    = (*s3Node)(nil)
	_ fs.NodeCreater   = (*s3Node)(nil)
	_ fs.NodeMkdirer   = (*s3Node)(nil)
	_ fs.NodeUnlinker  = (*s3Node)(nil)
	_ fs.NodeRmdirer   = (*s3Node)(nil)
	_ fs.NodeRenamer   = (*s3Node)(nil)
	_ fs.NodeStatfser  = (*s3Node)(nil)
)

func (n *s3Node) rel() string { return n.Path(nil) }

// key is a file's object; dirPrefix a directory's prefix ("" rel: the
// volume's root).
func (f *s3FS) key(rel string) string { return f.prefix + rel }
func (f *s3FS) dirPrefix(rel string) string {
	if rel == "" {
		return f.prefix
	}
	return f.prefix + rel + "/"
}

func ino(dir bool, rel string) uint64 {
	h := fnv.New64a()
	if dir {
		h.Write([]byte{'d'})
	} else {
		h.Write([]byte{'f'})
	}
	h.Write([]byte(rel))
	return h.Sum64() | 2 // never the root's 1
}

func (n *s3Node) child(ctx context.Context, name string, dir bool) *fs.Inode {
	rel := path.Join(n.rel(), name)
	mode := uint32(fuse.S_IFREG)
	if dir {
		mode = fuse.S_IFDIR
	}
	return n.NewInode(ctx, &s3Node{fsys: n.fsys, dir: dir}, fs.StableAttr{Mode: mode, Ino: ino(dir, rel)})
}

func dirAttr(a *fuse.Attr) {
	a.Mode = fuse.S_IFDIR | 0o755
	a.Nlink = 2
	a.Uid, a.Gid = sandboxUser, sandboxUser
	a.Blksize = 1 << 17
}

func fileAttr(a *fuse.Attr, size int64, perm uint32, mtime time.Time) {
	a.Mode = fuse.S_IFREG | perm
	a.Nlink = 1
	a.Size = uint64(size)
	a.Blocks = uint64(size+511) / 512
	a.Uid, a.Gid = sandboxUser, sandboxUser
	a.Blksize = 1 << 17
	a.SetTimes(nil, &mtime, &mtime)
}

func permOf(o minio.ObjectInfo) uint32 {
	if m, err := strconv.ParseUint(o.UserMetadata[modeMeta], 8, 32); err == nil {
		return uint32(m) & 0o7777
	}
	return 0o644
}

// Lookup implements fs.NodeLookuper: an object of the name is a file, a
// prefix of it a directory.
func (n *s3Node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	rel := path.Join(n.rel(), name)
	c, cancel := f.ctx(ctx)
	defer cancel()
	o, err := f.d.Client.StatObject(c, f.d.Bucket, f.key(rel), minio.StatObjectOptions{})
	if err == nil {
		fileAttr(&out.Attr, o.Size, permOf(o), o.LastModified)
		return n.child(ctx, name, false), 0
	}
	if !isNotFound(err) {
		return nil, f.errno("stat", f.key(rel), err)
	}
	ok, errno := f.isDir(c, rel)
	if errno != 0 {
		return nil, errno
	}
	if !ok {
		return nil, syscall.ENOENT
	}
	dirAttr(&out.Attr)
	return n.child(ctx, name, true), 0
}

// isDir reports whether any object is under rel's prefix.
func (f *s3FS) isDir(ctx context.Context, rel string) (bool, syscall.Errno) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o, ok := <-f.d.Client.ListObjects(ctx, f.d.Bucket, minio.ListObjectsOptions{Prefix: f.dirPrefix(rel), MaxKeys: 1})
	if ok && o.Err != nil {
		return false, f.errno("list", f.dirPrefix(rel), o.Err)
	}
	return ok, 0
}

// Getattr implements fs.NodeGetattrer: a file open here for writing is
// what its handle holds, any other file what the bucket has.
func (n *s3Node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if n.dir {
		dirAttr(&out.Attr)
		return 0
	}
	if h, ok := fh.(*s3Handle); ok {
		h.attr(&out.Attr)
		return 0
	}
	if h := n.writer(); h != nil {
		h.attr(&out.Attr)
		return 0
	}
	f := n.fsys
	c, cancel := f.ctx(ctx)
	defer cancel()
	o, err := f.d.Client.StatObject(c, f.d.Bucket, f.key(n.rel()), minio.StatObjectOptions{})
	if err != nil {
		return f.errno("stat", f.key(n.rel()), err)
	}
	fileAttr(&out.Attr, o.Size, permOf(o), o.LastModified)
	return 0
}

// writer is a handle of n with unsaved writes, if any.
func (n *s3Node) writer() *s3Handle {
	n.mu.Lock()
	defer n.mu.Unlock()
	for h := range n.open {
		if h.isDirty() {
			return h
		}
	}
	return nil
}

// Setattr implements fs.NodeSetattrer: a file's size and permission
// bits; owners and times are the volume's own and are left as they are.
func (n *s3Node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.dir {
		dirAttr(&out.Attr)
		return 0
	}
	size, hasSize := in.GetSize()
	mode, hasMode := in.GetMode()
	if hasSize || hasMode {
		h, _ := fh.(*s3Handle)
		if h == nil && hasSize {
			// open(O_TRUNC) sends the truncate without its handle, after
			// the open: every open handle of the file is truncated.
			n.mu.Lock()
			for o := range n.open {
				if errno := o.truncate(int64(size)); errno != 0 {
					n.mu.Unlock()
					return errno
				}
			}
			n.mu.Unlock()
		}
		if h == nil {
			// truncate(2) or chmod(2) by path: through a handle of our own.
			var errno syscall.Errno
			if h, errno = n.openHandle(ctx, false, !hasSize || size != 0); errno != 0 {
				return errno
			}
			defer h.close()
		}
		if hasSize {
			if errno := h.truncate(int64(size)); errno != 0 {
				return errno
			}
		}
		if hasMode {
			h.setMode(mode & 0o7777)
		}
		if fh == nil {
			if errno := h.Flush(ctx); errno != 0 {
				return errno
			}
		}
	}
	return n.Getattr(ctx, fh, out)
}

// Readdir implements fs.NodeReaddirer: one level of the directory's
// prefix.
func (n *s3Node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	f := n.fsys
	rel := n.rel()
	prefix := f.dirPrefix(rel)
	c, cancel := f.ctx(ctx)
	defer cancel()
	seen := map[string]bool{}
	var out []fuse.DirEntry
	for o := range f.d.Client.ListObjects(c, f.d.Bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return nil, f.errno("list", prefix, o.Err)
		}
		name := strings.TrimPrefix(o.Key, prefix)
		dir := strings.HasSuffix(name, "/")
		name = strings.TrimSuffix(name, "/")
		if name == "" || strings.Contains(name, "/") || seen[name] {
			continue
		}
		if len(out) >= maxListEntries*10 {
			break
		}
		seen[name] = true
		mode := uint32(fuse.S_IFREG)
		if dir {
			mode = fuse.S_IFDIR
		}
		out = append(out, fuse.DirEntry{Name: name, Mode: mode, Ino: ino(dir, path.Join(rel, name))})
	}
	return fs.NewListDirStream(out), 0
}

// Open implements fs.NodeOpener. The kernel's page cache of the file is
// dropped (no FOPEN_KEEP_CACHE): the open reads what the bucket has.
func (n *s3Node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.dir {
		return nil, 0, syscall.EISDIR
	}
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	h, errno := n.openHandle(ctx, write, !(write && flags&syscall.O_TRUNC != 0))
	if errno != 0 {
		return nil, 0, errno
	}
	if write && flags&syscall.O_TRUNC != 0 {
		if errno := h.truncate(0); errno != 0 {
			h.close()
			return nil, 0, errno
		}
	}
	return h, 0, 0
}

// openHandle spools the file: its content when fetch, else only its
// size and bits (it is about to be truncated).
func (n *s3Node) openHandle(ctx context.Context, write, fetch bool) (*s3Handle, syscall.Errno) {
	return n.openKey(ctx, n.fsys.key(n.rel()), write, fetch)
}

// openKey is openHandle of the object key (a node Create just made is not
// in the tree yet: its path is not known from it).
func (n *s3Node) openKey(ctx context.Context, key string, write, fetch bool) (*s3Handle, syscall.Errno) {
	f := n.fsys
	spool, err := os.CreateTemp(f.d.spool(), "open-")
	if err != nil {
		f.d.Log.Warn("s3 volume: spool", "err", err)
		return nil, syscall.EIO
	}
	_ = os.Remove(spool.Name()) // the descriptor keeps it, a crash leaves nothing
	h := &s3Handle{node: n, key: key, spool: spool, write: write}
	c, cancel := f.ctx(ctx)
	defer cancel()
	o, err := f.d.Client.StatObject(c, f.d.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		spool.Close()
		return nil, f.errno("stat", key, err)
	}
	h.perm, h.mtime, h.size, h.stored = permOf(o), o.LastModified, o.Size, o.Size
	if fetch && o.Size > 0 {
		// The download may take longer than one request's bound: its
		// own, by its size (at least 1 MB/s).
		dc, dcancel := context.WithTimeout(ctx, f.d.timeout()+time.Duration(o.Size>>20)*time.Second)
		defer dcancel()
		obj, err := f.d.Client.GetObject(dc, f.d.Bucket, key, minio.GetObjectOptions{})
		if err == nil {
			var m int64
			m, err = io.Copy(spool, obj)
			obj.Close()
			h.size, h.stored = m, m
		}
		if err != nil {
			spool.Close()
			return nil, f.errno("get", key, err)
		}
	}
	n.mu.Lock()
	if n.open == nil {
		n.open = map[*s3Handle]struct{}{}
	}
	n.open[h] = struct{}{}
	n.mu.Unlock()
	return h, 0
}

// Create implements fs.NodeCreater: an empty object at once, so the file
// exists for lookups before its first close.
func (n *s3Node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := n.fsys
	rel := path.Join(n.rel(), name)
	perm := mode & 0o7777
	c, cancel := f.ctx(ctx)
	defer cancel()
	if flags&syscall.O_EXCL != 0 {
		if _, err := f.d.Client.StatObject(c, f.d.Bucket, f.key(rel), minio.StatObjectOptions{}); err == nil {
			return nil, nil, 0, syscall.EEXIST
		}
	}
	_, err := f.d.Client.PutObject(c, f.d.Bucket, f.key(rel), strings.NewReader(""), 0,
		minio.PutObjectOptions{UserMetadata: map[string]string{modeMeta: strconv.FormatUint(uint64(perm), 8)}})
	if err != nil {
		return nil, nil, 0, f.errno("put", f.key(rel), err)
	}
	ch := n.child(ctx, name, false)
	cn := ch.Operations().(*s3Node)
	h, errno := cn.openKey(ctx, f.key(rel), true, false)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h.attr(&out.Attr)
	return ch, h, 0, 0
}

// Mkdir implements fs.NodeMkdirer: the directory's marker object.
func (n *s3Node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	rel := path.Join(n.rel(), name)
	c, cancel := f.ctx(ctx)
	defer cancel()
	if _, err := f.d.Client.StatObject(c, f.d.Bucket, f.key(rel), minio.StatObjectOptions{}); err == nil {
		return nil, syscall.EEXIST
	}
	if ok, errno := f.isDir(c, rel); errno != 0 || ok {
		if errno == 0 {
			errno = syscall.EEXIST
		}
		return nil, errno
	}
	if _, err := f.d.Client.PutObject(c, f.d.Bucket, f.dirPrefix(rel), strings.NewReader(""), 0, minio.PutObjectOptions{}); err != nil {
		return nil, f.errno("put", f.dirPrefix(rel), err)
	}
	dirAttr(&out.Attr)
	return n.child(ctx, name, true), 0
}

// Unlink implements fs.NodeUnlinker. A handle still open on the file
// uploads nothing any more.
func (n *s3Node) Unlink(ctx context.Context, name string) syscall.Errno {
	f := n.fsys
	key := f.key(path.Join(n.rel(), name))
	c, cancel := f.ctx(ctx)
	defer cancel()
	o, err := f.d.Client.StatObject(c, f.d.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return f.errno("stat", key, err)
	}
	if err := f.d.Client.RemoveObject(c, f.d.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return f.errno("remove", key, err)
	}
	f.reserve(-o.Size)
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*s3Node); ok {
			cn.mu.Lock()
			for h := range cn.open {
				h.unlinked()
			}
			cn.mu.Unlock()
		}
	}
	return 0
}

// Rmdir implements fs.NodeRmdirer: only an empty directory (nothing but
// its marker under its prefix).
func (n *s3Node) Rmdir(ctx context.Context, name string) syscall.Errno {
	f := n.fsys
	rel := path.Join(n.rel(), name)
	prefix := f.dirPrefix(rel)
	c, cancel := f.ctx(ctx)
	defer cancel()
	lc, lcancel := context.WithCancel(c)
	found := false
	for o := range f.d.Client.ListObjects(lc, f.d.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true, MaxKeys: 2}) {
		if o.Err != nil {
			lcancel()
			return f.errno("list", prefix, o.Err)
		}
		if o.Key != prefix {
			lcancel()
			return syscall.ENOTEMPTY
		}
		found = true
	}
	lcancel()
	if !found {
		return syscall.ENOENT
	}
	if err := f.d.Client.RemoveObject(c, f.d.Bucket, prefix, minio.RemoveObjectOptions{}); err != nil {
		return f.errno("remove", prefix, err)
	}
	return 0
}

// Rename implements fs.NodeRenamer for files: a server-side copy, then
// the delete of the old name. A directory is a tree of objects, whose
// move could not be atomic: EXDEV, which mv and most tools answer with a
// copy.
func (n *s3Node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*s3Node)
	if !ok || flags&unixRenameExchange != 0 {
		return syscall.EINVAL
	}
	f := n.fsys
	src := f.key(path.Join(n.rel(), name))
	dst := f.key(path.Join(np.rel(), newName))
	c, cancel := f.ctx(ctx)
	defer cancel()
	if _, err := f.d.Client.StatObject(c, f.d.Bucket, src, minio.StatObjectOptions{}); err != nil {
		if isNotFound(err) {
			if ok, errno := f.isDir(c, path.Join(n.rel(), name)); errno == 0 && ok {
				return syscall.EXDEV
			}
		}
		return f.errno("stat", src, err)
	}
	old, err := f.d.Client.StatObject(c, f.d.Bucket, dst, minio.StatObjectOptions{})
	switch {
	case err == nil && flags&unixRenameNoReplace != 0:
		return syscall.EEXIST
	case err == nil:
		f.reserve(-old.Size)
	case !isNotFound(err):
		return f.errno("stat", dst, err)
	}
	if ok, errno := f.isDir(c, path.Join(np.rel(), newName)); errno != 0 || ok {
		if errno == 0 {
			errno = syscall.EISDIR
		}
		return errno
	}
	if _, err := f.d.Client.CopyObject(c, minio.CopyDestOptions{Bucket: f.d.Bucket, Object: dst}, minio.CopySrcOptions{Bucket: f.d.Bucket, Object: src}); err != nil {
		return f.errno("copy", src, err)
	}
	if err := f.d.Client.RemoveObject(c, f.d.Bucket, src, minio.RemoveObjectOptions{}); err != nil {
		return f.errno("remove", src, err)
	}
	return 0
}

// renameat2's flags (linux/fs.h).
const (
	unixRenameNoReplace = 1
	unixRenameExchange  = 2
)

// Statfs implements fs.NodeStatfser: the volume's size, and what this
// replica knows it holds.
func (n *s3Node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	const bs = 4096
	f := n.fsys
	total := uint64(f.v.SizeBytes) / bs
	used := uint64(max(f.used.Load(), 0)+bs-1) / bs
	free := uint64(0)
	if used < total {
		free = total - used
	}
	*out = fuse.StatfsOut{Blocks: total, Bfree: free, Bavail: free, Bsize: bs, Frsize: bs, NameLen: 255, Files: 1 << 20, Ffree: 1 << 20}
	return 0
}

// s3Handle is an open file: its spool, uploaded by Flush when written.
type s3Handle struct {
	node  *s3Node
	key   string
	write bool

	mu     sync.Mutex
	spool  *os.File
	size   int64  // the spool's size
	stored int64  // the size the volume's count has for the file
	perm   uint32 // permission bits
	mtime  time.Time
	dirty  bool
	gone   bool // unlinked: nothing to upload
}

var (
	_ fs.FileReader    = (*s3Handle)(nil)
	_ fs.FileWriter    = (*s3Handle)(nil)
	_ fs.FileFlusher   = (*s3Handle)(nil)
	_ fs.FileFsyncer   = (*s3Handle)(nil)
	_ fs.FileReleaser  = (*s3Handle)(nil)
	_ fs.FileGetattrer = (*s3Handle)(nil)
)

func (h *s3Handle) isDirty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dirty
}

func (h *s3Handle) unlinked() {
	h.mu.Lock()
	h.gone = true
	h.mu.Unlock()
}

func (h *s3Handle) attr(a *fuse.Attr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fileAttr(a, h.size, h.perm, h.mtime)
}

func (h *s3Handle) setMode(perm uint32) {
	h.mu.Lock()
	h.perm = perm
	h.dirty = true
	h.mu.Unlock()
}

// resize sets the spool's size to n, against the volume's size.
func (h *s3Handle) resize(n int64) syscall.Errno {
	if grow := n - h.stored; grow > 0 {
		if !h.node.fsys.reserve(grow) {
			return syscall.ENOSPC
		}
		h.stored = n
	}
	return 0
}

func (h *s3Handle) truncate(n int64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if errno := h.resize(n); errno != 0 {
		return errno
	}
	if n < h.stored {
		h.node.fsys.reserve(n - h.stored)
		h.stored = n
	}
	if err := h.spool.Truncate(n); err != nil {
		return syscall.EIO
	}
	h.size, h.dirty, h.mtime = n, true, time.Now()
	return 0
}

// Getattr implements fs.FileGetattrer.
func (h *s3Handle) Getattr(_ context.Context, out *fuse.AttrOut) syscall.Errno {
	h.attr(&out.Attr)
	return 0
}

// Read implements fs.FileReader.
func (h *s3Handle) Read(_ context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, err := h.spool.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write implements fs.FileWriter.
func (h *s3Handle) Write(_ context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := off + int64(len(data))
	if end > h.size {
		if errno := h.resize(end); errno != 0 {
			return 0, errno
		}
	}
	n, err := h.spool.WriteAt(data, off)
	if err != nil {
		return uint32(n), syscall.EIO
	}
	h.size = max(h.size, end)
	h.dirty, h.mtime = true, time.Now()
	return uint32(n), 0
}

// Flush implements fs.FileFlusher: a written file's upload, on every
// close; its error is close(2)'s.
func (h *s3Handle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dirty || h.gone {
		return 0
	}
	f := h.node.fsys
	c, cancel := context.WithTimeout(ctx, f.d.timeout()+time.Duration(h.size>>20)*time.Second)
	defer cancel()
	_, err := f.d.Client.PutObject(c, f.d.Bucket, h.key, io.NewSectionReader(h.spool, 0, h.size), h.size,
		minio.PutObjectOptions{UserMetadata: map[string]string{modeMeta: strconv.FormatUint(uint64(h.perm), 8)}})
	if err != nil {
		return f.errno("put", h.key, err)
	}
	h.dirty = false
	return 0
}

// Fsync implements fs.FileFsyncer: the upload, now.
func (h *s3Handle) Fsync(ctx context.Context, _ uint32) syscall.Errno { return h.Flush(ctx) }

// Release implements fs.FileReleaser.
func (h *s3Handle) Release(_ context.Context) syscall.Errno {
	h.close()
	return 0
}

func (h *s3Handle) close() {
	h.node.mu.Lock()
	delete(h.node.open, h)
	h.node.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.spool != nil {
		h.spool.Close()
		h.spool = nil
	}
}
