package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisServer is a real redis-server (Debian's package) run by a test on a
// free loopback port, with its files in a temp dir: no snapshots and no
// append-only file while it runs, one save when Stop shuts it down (so a
// Start after a Stop has the data back, as a production Redis would).
type RedisServer struct {
	Port int
	dir  string
	cmd  *exec.Cmd
	t    testing.TB
	args []string // more server settings (StartRedisACL)
	auth string   // the default user's password, for SHUTDOWN
}

// Addr is host:port of the server.
func (r *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// StartRedis starts a redis-server for the test and stops it at the end.
// A missing redis-server fails the test (scripts/install-deps.sh installs
// it): a scale-out test that skipped would prove nothing.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	return startRedis(t, "")
}

// StartRedisACL is StartRedis with authentication: the default user needs
// defaultPassword, and user (password) may use every key and command.
func StartRedisACL(t testing.TB, user, password, defaultPassword string) *RedisServer {
	t.Helper()
	return startRedis(t, defaultPassword, "--requirepass", defaultPassword, "--user", user, "on", ">"+password, "~*", "&*", "+@all")
}

// startRedis starts a server on a free loopback port with extra args;
// auth is the default user's password ("" for none).
func startRedis(t testing.TB, auth string, args ...string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found (scripts/install-deps.sh installs it): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &RedisServer{Port: port, dir: t.TempDir(), t: t, auth: auth, args: args}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Start (re)starts the server on its port; it returns once it answers PING.
func (r *RedisServer) Start() {
	r.t.Helper()
	if r.cmd != nil {
		r.t.Fatal("redis-server already running")
	}
	cmd := exec.Command("redis-server", append([]string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}, r.args...)...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 200; i++ {
		if err := ping(r.Addr()); err == nil {
			return
		} else if time.Now().After(deadline) {
			r.Stop()
			r.t.Fatalf("redis-server on %s did not answer: %v", r.Addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.Stop()
	r.t.Fatalf("redis-server on %s did not answer", r.Addr())
}

// Stop shuts the server down, saving its data to the temp dir so a later
// Start has it back (like a Redis restarted by its operator); a server that
// does not stop in time is killed.
func (r *RedisServer) Stop() {
	if r.cmd == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	if c, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if r.auth != "" {
			_, _ = c.Write([]byte("AUTH " + r.auth + "\r\n"))
		}
		_, _ = c.Write([]byte("SHUTDOWN SAVE\r\n"))
		_, _ = bufio.NewReader(c).ReadString('\n') // the server closes the connection
		c.Close()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	r.cmd = nil
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("unexpected answer %q", line)
	}
	return nil
}
