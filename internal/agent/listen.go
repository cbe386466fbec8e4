package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ParseListenAddress splits "unix:///path/to.sock" or "tcp://host:port"
// into a network and an address for net.Listen / net.Dial.
func ParseListenAddress(addr string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		network, address = "unix", strings.TrimPrefix(addr, "unix://")
	case strings.HasPrefix(addr, "tcp://"):
		network, address = "tcp", strings.TrimPrefix(addr, "tcp://")
	default:
		return "", "", fmt.Errorf("listen address %q: want unix:///path or tcp://host:port", addr)
	}
	if address == "" {
		return "", "", fmt.Errorf("listen address %q has no path or host", addr)
	}
	return network, address, nil
}

// Listen opens the listener for addr (see ParseListenAddress). For a unix
// socket the parent directory is created and a stale socket left by a
// previous run is removed; any other existing file is an error.
//
// "fd://N" serves on an inherited listening socket: the native backend
// creates the socket where only the host daemon can reach it and passes
// it in, so sandbox processes never see it.
func Listen(addr string) (net.Listener, error) {
	if v, ok := strings.CutPrefix(addr, "fd://"); ok {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return nil, fmt.Errorf("listen address %q: want fd://N with N >= 3", addr)
		}
		f := os.NewFile(uintptr(fd), "listen-fd")
		ln, err := net.FileListener(f)
		f.Close() // FileListener holds its own duplicate
		if err != nil {
			return nil, fmt.Errorf("listen on inherited fd %d: %w", fd, err)
		}
		return ln, nil
	}
	network, address, err := ParseListenAddress(addr)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(address), 0o755); err != nil {
			return nil, fmt.Errorf("create socket directory: %w", err)
		}
		if fi, err := os.Lstat(address); err == nil {
			if fi.Mode().Type() != fs.ModeSocket {
				return nil, fmt.Errorf("listen %s: exists and is not a socket", address)
			}
			if err := os.Remove(address); err != nil {
				return nil, fmt.Errorf("remove stale socket: %w", err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("stat socket path: %w", err)
		}
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// NotifyReady writes one byte to the inherited file descriptor fd and
// closes it: the backend that started the agent waits for it instead of
// polling the socket.
func NotifyReady(fd int) error {
	f := os.NewFile(uintptr(fd), "ready-fd")
	if f == nil {
		return fmt.Errorf("ready fd %d is not valid", fd)
	}
	defer f.Close()
	if _, err := f.Write([]byte{1}); err != nil {
		return fmt.Errorf("write ready fd %d: %w", fd, err)
	}
	return nil
}
