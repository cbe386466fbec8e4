package agent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
)

// entryInfo describes the entry at path without following a final
// symlink: for a link, the link's own size, mode and owner are reported,
// isSymlink and symlinkTarget are set, and type says what it points to
// (FILE_TYPE_SYMLINK when the target is missing).
func (s *Server) entryInfo(path string) (*fspb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fsError(fmt.Sprintf("stat %q", path), err)
	}
	return s.entryFromInfo(path, fi), nil
}

// entryFromInfo builds an EntryInfo from an Lstat result.
func (s *Server) entryFromInfo(path string, fi fs.FileInfo) *fspb.EntryInfo {
	e := s.baseEntry(path, fi)
	e.Metadata = readMetadata(path)
	if fi.Mode()&fs.ModeSymlink != 0 {
		e.IsSymlink = true
		if target, err := os.Readlink(path); err == nil {
			e.SymlinkTarget = &target
		}
		if t, err := os.Stat(path); err == nil {
			e.Type = fileType(t.Mode())
		}
	}
	return e
}

// baseEntry is what an EntryInfo says of fi itself; for a link, callers
// add its target and the target's type (following it by path or, in a
// confined request, under the roots: see entryAt).
func (s *Server) baseEntry(path string, fi fs.FileInfo) *fspb.EntryInfo {
	e := &fspb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  lsMode(fi.Mode()),
		ModifiedTime: timestamppb.New(fi.ModTime()),
		Type:         fileType(fi.Mode()),
	}
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		e.Owner = s.accounts.userName(st.Uid)
		e.Group = s.accounts.groupName(st.Gid)
	case *unix.Stat_t:
		e.Owner = s.accounts.userName(st.Uid)
		e.Group = s.accounts.groupName(st.Gid)
	}
	return e
}

func fileType(m fs.FileMode) fspb.FileType {
	switch {
	case m.IsDir():
		return fspb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return fspb.FileType_FILE_TYPE_SYMLINK
	default:
		// Devices, sockets and pipes are reported as files: the protocol
		// has no better type and clients treat them as non-directories.
		return fspb.FileType_FILE_TYPE_FILE
	}
}

// lsMode renders a mode the way ls -l does ("-rw-r--r--", "drwxr-sr-t",
// "lrwxrwxrwx"); Go's FileMode.String uses different type letters.
func lsMode(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special := func(pos int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[pos] == '-' {
			b[pos] = upper
		} else {
			b[pos] = lower
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b)
}
