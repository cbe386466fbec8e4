package client_test

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// readUntil reads terminal output until it contains want (5 s at most).
func readUntil(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("terminal closed before %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %q", want)
		}
	}
}

func TestPTY(t *testing.T) {
	fs, c, ctx := setup(t, client.WithAPIKey("k"))
	fs.SetAPIKey("k")
	sb := mustCreate(t, ctx, c)
	p, err := c.PTY(ctx, sb.ID, client.PTYOptions{Cols: 100, Rows: 30, Cmd: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	lines := make(chan string, 100)
	readDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(p)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		readDone <- sc.Err()
	}()

	readUntil(t, lines, "pty 100x30 sh")
	if _, err := p.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, lines, "hello")
	if err := p.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	readUntil(t, lines, "resized 120x40")
	if got := fs.Resizes(); !slices.Equal(got, [][2]int{{120, 40}}) {
		t.Errorf("server saw resizes %v", got)
	}
	if _, err := p.Write([]byte("exit 7\n")); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil || code != 7 {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	select {
	case err := <-readDone:
		if err != nil {
			t.Errorf("output ended with %v, want EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("output did not end after exit")
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close after exit: %v", err)
	}
}

func TestPTYErrors(t *testing.T) {
	fs, c, ctx := setup(t)
	if _, err := c.PTY(ctx, "missing", client.PTYOptions{}); !client.IsNotFound(err) {
		t.Fatalf("PTY on missing sandbox: %v", err)
	}
	fs.SetAPIKey("k")
	if _, err := c.PTY(ctx, "missing", client.PTYOptions{}); !client.IsUnauthenticated(err) {
		t.Fatalf("PTY without key: %v", err)
	}
}

// Cancelling the context ends the session: Wait returns, Read ends.
func TestPTYCancel(t *testing.T) {
	_, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	pctx, cancel := context.WithCancel(ctx)
	p, err := c.PTY(pctx, sb.ID, client.PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	go io.Copy(io.Discard, p)
	cancel()
	done := make(chan struct{})
	go func() {
		code, err := p.Wait()
		if code != -1 || err == nil {
			t.Errorf("Wait after cancel = %d, %v", code, err)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after cancel")
	}
	if _, err := p.Write([]byte("x")); err == nil {
		t.Errorf("Write after cancel: %v", err)
	}
}

// A caller that never reads output still gets the exit status.
func TestPTYWaitWithoutReading(t *testing.T) {
	_, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	p, err := c.PTY(ctx, sb.ID, client.PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// More output than the client buffers, then the exit.
	if _, err := p.Write([]byte("flood 3145728")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("exit 4")); err != nil {
		t.Fatal(err)
	}
	code, err := waitBounded(t, p)
	if err != nil || code != 4 {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	// What was buffered is still readable, then EOF.
	n, err := io.Copy(io.Discard, p)
	if err != nil || n < 1<<20 || n >= 3<<20 {
		t.Errorf("read %d bytes after Wait (%v), want the 1 MiB buffer and the greeting", n, err)
	}
}

// A full buffer does not keep cancellation from ending the session.
func TestPTYCancelWithFullBuffer(t *testing.T) {
	_, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	pctx, cancel := context.WithCancel(ctx)
	p, err := c.PTY(pctx, sb.ID, client.PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Write([]byte("flood 3145728")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the buffer fill
	cancel()
	if code, err := waitBounded(t, p); code != -1 || err == nil {
		t.Fatalf("Wait after cancel = %d, %v", code, err)
	}
}

// waitBounded calls Wait, failing the test if it takes over 5 s.
func waitBounded(t *testing.T, p *client.PTYConn) (int, error) {
	t.Helper()
	type result struct {
		code int
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		code, err := p.Wait()
		ch <- result{code, err}
	}()
	select {
	case r := <-ch:
		return r.code, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return")
		return 0, nil
	}
}
