package agentclient

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestDialUnixRefusesSymlinks: the client dials a real socket, never one
// reached through a symlink in the last component, nor a non-socket.
func TestDialUnixRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &net.Dialer{}
	c, err := dialUnix(ctx, d, sock, 0)
	if err != nil {
		t.Fatalf("dial the socket: %v", err)
	}
	c.Close()
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	if c, err := dialUnix(ctx, d, link, 0); err == nil {
		c.Close()
		t.Fatal("dialled through a symlink")
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if c, err := dialUnix(ctx, d, file, 0); err == nil {
		c.Close()
		t.Fatal("dialled a regular file")
	}
	// The listener is this process: its pid passes, another does not.
	c, err = dialUnix(ctx, d, sock, os.Getpid())
	if err != nil {
		t.Fatalf("dial with the listener's pid: %v", err)
	}
	c.Close()
	if c, err := dialUnix(ctx, d, sock, os.Getpid()+1); err == nil {
		c.Close()
		t.Fatal("dialled a socket another process listens on")
	}
	time.Sleep(100 * time.Millisecond)
	if n := accepted.Load(); n != 3 {
		t.Fatalf("the socket accepted %d connections, want 3 (the direct dials)", n)
	}
}
