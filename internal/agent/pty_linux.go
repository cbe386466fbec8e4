package agent

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPTY allocates a pseudo-terminal of the given size. It returns the
// master as a non-blocking, poller-backed *os.File (so reads can be
// interrupted with deadlines and closing it wakes blocked readers) and
// the slave terminal for the child.
func openPTY(cols, rows uint16) (master, tty *os.File, err error) {
	m, t, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	defer m.Close()
	if err := pty.Setsize(t, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		t.Close()
		return nil, nil, fmt.Errorf("set pty size: %w", err)
	}
	// pty.Open's ioctls put the master in blocking mode; a non-blocking
	// duplicate is registered with the runtime poller by os.NewFile.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Close()
		return nil, nil, fmt.Errorf("dup pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		t.Close()
		return nil, nil, fmt.Errorf("pty master non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), "ptmx"), t, nil
}

// resizePTY sets the window size of the terminal behind master; the kernel
// sends SIGWINCH to the terminal's foreground process group.
func resizePTY(master *os.File, cols, rows uint16) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return fmt.Errorf("pty resize: %w", err)
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows})
	})
	if err == nil {
		err = ierr
	}
	if err != nil {
		return fmt.Errorf("pty resize: %w", err)
	}
	return nil
}
