package agentclient

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// dialUnix connects to the unix socket at path without following a
// symbolic link in its last component, and only to a socket. A backend
// whose agent creates its socket in a directory the sandbox can write (the
// Docker backend) would otherwise let sandbox code point the daemon, which
// dials as root on the host, at any host socket (the engine's, the init
// system's) by replacing the socket with a symlink. The path's directories
// are the backend's own and not writable by the sandbox.
//
// With pid set, the socket must be one that process listens on (the peer
// credentials the kernel took at listen): sandbox code that removes its
// agent's socket and listens there itself is refused too.
func dialUnix(ctx context.Context, d *net.Dialer, path string, pid int) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("open %s: %w", path, err)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("stat %s: %w", path, err)}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("%s is not a socket", path)}
	}
	// The descriptor's magic link names exactly the inode checked above.
	conn, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil || pid == 0 {
		return conn, err
	}
	if err := checkPeer(conn, pid); err != nil {
		conn.Close()
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("%s: %w", path, err)}
	}
	return conn, nil
}

// checkPeer verifies that conn's listening peer is process pid.
func checkPeer(conn net.Conn, pid int) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if gerr != nil {
		return fmt.Errorf("peer credentials: %w", gerr)
	}
	if int(cred.Pid) != pid {
		return fmt.Errorf("the socket's listener is pid %d, not the agent (pid %d)", cred.Pid, pid)
	}
	return nil
}
