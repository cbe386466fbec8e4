package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// spareDisks keeps a few disk images of destroyed sandboxes, emptied, for
// the next creates of the same size.
//
// Why: a sandbox disk is preallocated in full (preallocate), so each
// create allocates its size in the data dir's filesystem and each destroy
// frees it again. On a filesystem mounted with online discard (common on
// cloud and VM disks), the free issues a discard for every extent, and
// the destroy waits for them: in a 2-hour soak the daemon spent a sixth
// of its time blocked in blkdev_issue_discard under unlink, a cost that
// grows as free space fragments. A spare image keeps its blocks: emptying
// it (FALLOC_FL_ZERO_RANGE) turns its extents back into unwritten ones
// without freeing a block, so nothing is discarded and the next create
// needs no allocation either.
//
// What makes reuse safe between tenants: an image becomes a spare only
// after its last filesystem let go of it in time (no revoke was needed,
// so no loop device can still write to it), and only once zeroed: every
// byte reads as zero from then on, exactly as a new sparse file, and the
// next create copies the template's data into it as into a new file (its
// content is then byte for byte a fresh disk's). A filesystem without
// ZERO_RANGE (or an image that is not fully allocated) is not kept.
//
// Spares are bounded in count and in the share of the filesystem they
// hold, are counted as free space by the disk admission (held), and do
// not outlive the process: Close removes them, New what an earlier
// process left.
type spareDisks struct {
	dir string
	mu  sync.Mutex
	// bySize lists the spares of each image size, newest last.
	bySize map[int64][]string
	count  int
	bytes  int64 // blocks the spares hold
	next   uint64
	// limit is the most bytes spares may hold (a share of the filesystem).
	limit int64
}

// maxSpareDisks bounds the spares; a handful covers the destroys that
// come just before creates under churn, and each holds a full disk.
const maxSpareDisks = 8

// spareShare is the most of the data dir's filesystem spares may hold
// (1/32: about 3%).
const spareShare = 32

// newSpareDisks empties dir (spares do not outlive their process) and
// returns the set for it.
func newSpareDisks(dir string) (*spareDisks, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove old spare disks: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spare disk dir: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return nil, fmt.Errorf("statfs spare disk dir: %w", err)
	}
	return &spareDisks{dir: dir, bySize: map[int64][]string{}, limit: int64(fs.Blocks) * fs.Bsize / spareShare}, nil
}

// put keeps image, a destroyed sandbox's disk of size bytes that nothing
// holds any more, as a spare: zeroed, then moved into the spare dir. It
// reports whether it did; when not, image is where it was, for the caller
// to remove.
func (s *spareDisks) put(image string, size int64) bool {
	if s == nil || size <= 0 {
		return false
	}
	s.mu.Lock()
	full := s.count >= maxSpareDisks || s.bytes+size > s.limit
	s.mu.Unlock()
	if full {
		return false
	}
	f, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Size != size || st.Blocks*512 < size {
		return false // not a fully allocated disk of that size: nothing to save
	}
	if unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 0, size) != nil {
		return false
	}
	// Zeroing must not have given blocks back (a filesystem whose
	// ZERO_RANGE punches them would discard after all).
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Blocks*512 < size {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count >= maxSpareDisks || s.bytes+size > s.limit {
		return false
	}
	s.next++
	spare := filepath.Join(s.dir, strconv.FormatInt(size, 10)+"-"+strconv.FormatUint(s.next, 10)+".img")
	if err := unix.Renameat2(unix.AT_FDCWD, image, unix.AT_FDCWD, spare, unix.RENAME_NOREPLACE); err != nil {
		return false
	}
	s.bySize[size] = append(s.bySize[size], spare)
	s.count++
	s.bytes += size
	return true
}

// take moves a spare of size bytes to dst (which must not exist) and
// reports whether there was one. dst then reads as zeroes throughout,
// every block allocated.
func (s *spareDisks) take(size int64, dst string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		list := s.bySize[size]
		if len(list) == 0 {
			return false
		}
		spare := list[len(list)-1]
		s.bySize[size] = list[:len(list)-1]
		s.count--
		s.bytes -= size
		err := unix.Renameat2(unix.AT_FDCWD, spare, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
		if err == nil {
			return true
		}
		if errors.Is(err, unix.EEXIST) {
			s.bySize[size] = append(s.bySize[size], spare)
			s.count++
			s.bytes += size
			return false
		}
		_ = os.Remove(spare) // gone or broken: try the next
	}
}

// clear removes every spare: they hold disk space for this process's
// creates only (Close).
func (s *spareDisks) clear() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, list := range s.bySize {
		for _, p := range list {
			_ = os.Remove(p)
		}
	}
	s.bySize, s.count, s.bytes = map[int64][]string{}, 0, 0
}

// held is how many bytes of the filesystem the spares hold: free space
// for the disk admission, since a create takes it back at once.
func (s *spareDisks) held() int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// copyTemplateInto writes the data of the formatted template image into
// dst, a zeroed spare of the same size, at the same offsets: dst's
// content is then the template's (its holes read as zero in both).
func copyTemplateInto(template, dst string) (err error) {
	in, err := os.Open(template)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	ost, err := out.Stat()
	if err != nil {
		return err
	}
	if ost.Size() != st.Size() {
		return fmt.Errorf("spare disk is %d bytes, the template %d", ost.Size(), st.Size())
	}
	return copyDataRanges(in, out, st.Size(), nil)
}
