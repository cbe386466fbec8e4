package remote

import (
	"errors"
	"net"
	"sync"
)

// oneConn is a listener that accepts one connection, then waits until it
// is closed.
type oneConn struct {
	mu     sync.Mutex
	conn   net.Conn
	done   chan struct{}
	closed bool
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	return nil
}

func (l *oneConn) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "remote-preview" }

// closeBoth is the caller's end of the pipe; closing it stops the server
// of the other end.
type closeBoth struct {
	net.Conn
	once  sync.Once
	close func()
}

func (c *closeBoth) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.close)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
