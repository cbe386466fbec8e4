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
func dialUnix(ctx context.Context, d *net.Dialer, path string) (net.Conn, error) {
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
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}
