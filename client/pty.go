package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"
)

// PTYOptions configure an interactive terminal.
type PTYOptions struct {
	Cols, Rows int    // terminal size; zero means the server's default (80x24)
	Cmd        string // command line to run; empty means a login bash
	Cwd        string // working directory; empty means the user's home
}

// PTYConn is an interactive terminal in a sandbox, over a websocket. Read
// returns terminal output and Write sends keyboard input; Read, Write,
// Resize and Wait may be used from different goroutines.
//
// Up to 1 MiB of unread output is buffered; beyond that the connection is
// not read until Read makes room, which slows the terminal down. While
// Wait is waiting, output beyond that buffer is dropped instead, so the
// exit status behind it still arrives: read output concurrently if you
// need all of it.
type PTYConn struct {
	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	out    *outputBuffer // terminal output, fed by readLoop

	exited chan struct{} // closed when the exit message arrives
	done   chan struct{} // closed when readLoop ends
	mu     sync.Mutex
	code   int   // exit code, once exited is closed
	err    error // why the connection ended, once done is closed (nil: closed normally)
}

// ptyReadLimit bounds one websocket message from the server.
const ptyReadLimit = 1 << 20

// PTY opens an interactive terminal in sandbox id. ctx bounds the whole
// session: cancelling it closes the connection, and the server then ends
// the command. The caller must Close the PTYConn.
func (c *Client) PTY(ctx context.Context, id string, opts PTYOptions) (*PTYConn, error) {
	op := "terminal in sandbox " + id
	q := url.Values{}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(opts.Cols))
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(opts.Rows))
	}
	if opts.Cmd != "" {
		q.Set("cmd", opts.Cmd)
	}
	if opts.Cwd != "" {
		q.Set("cwd", opts.Cwd)
	}
	ws, resp, err := websocket.Dial(ctx, c.endpoint(sandboxPath(id, "/pty"), q).String(), &websocket.DialOptions{
		HTTPClient: c.http,
		HTTPHeader: c.header(),
	})
	if err != nil {
		// A refused upgrade carries the API's error body (the websocket
		// library keeps its first KiB).
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			return nil, errorFromResponse(resp)
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	ws.SetReadLimit(ptyReadLimit)
	pctx, cancel := context.WithCancel(ctx)
	p := &PTYConn{ws: ws, ctx: pctx, cancel: cancel, out: newOutputBuffer(),
		exited: make(chan struct{}), done: make(chan struct{})}
	go p.readLoop()
	return p, nil
}

// controlMessage is a JSON text message of the PTY protocol.
type controlMessage struct {
	Type     string `json:"type"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

// readLoop moves terminal output into the buffer Read drains and handles
// control messages. Reading continuously also keeps the websocket's ping
// and close handshakes working.
func (p *PTYConn) readLoop() {
	var end error
	defer func() {
		p.mu.Lock()
		p.err = end
		p.mu.Unlock()
		p.out.close(end)
		close(p.done)
	}()
	for {
		typ, data, err := p.ws.Read(p.ctx)
		if err != nil {
			switch websocket.CloseStatus(err) {
			case websocket.StatusNormalClosure, websocket.StatusGoingAway:
			default:
				// After the exit message, however the server hangs up
				// is a normal end of output.
				if !isClosed(p.exited) {
					end = fmt.Errorf("terminal connection: %w", err)
				}
			}
			return
		}
		switch typ {
		case websocket.MessageBinary:
			if err := p.out.put(p.ctx, data); err != nil {
				end = fmt.Errorf("terminal connection: %w", err)
				return
			}
		case websocket.MessageText:
			var m controlMessage
			if json.Unmarshal(data, &m) != nil || m.Type != "exit" || m.ExitCode == nil {
				continue // unknown control messages are for newer clients
			}
			p.mu.Lock()
			if !isClosed(p.exited) {
				p.code = *m.ExitCode
				close(p.exited)
			}
			p.mu.Unlock()
		}
	}
}

// Read reads terminal output. It returns io.EOF once the server closed
// the connection normally and all output has been read.
func (p *PTYConn) Read(b []byte) (int, error) { return p.out.Read(b) }

// errClosed reports why the connection can no longer send, or nil.
func (p *PTYConn) errClosed() error {
	if err := p.ctx.Err(); err != nil {
		return fmt.Errorf("terminal closed: %w", err)
	}
	if isClosed(p.done) {
		return errors.New("terminal closed")
	}
	return nil
}

// Write sends keyboard input (one binary message per call).
func (p *PTYConn) Write(b []byte) (int, error) {
	if err := p.errClosed(); err != nil {
		return 0, err
	}
	if err := p.ws.Write(p.ctx, websocket.MessageBinary, b); err != nil {
		return 0, fmt.Errorf("terminal input: %w", err)
	}
	return len(b), nil
}

// Resize tells the server the terminal's new size.
func (p *PTYConn) Resize(cols, rows int) error {
	if err := p.errClosed(); err != nil {
		return err
	}
	b, err := json.Marshal(controlMessage{Type: "resize", Cols: cols, Rows: rows})
	if err != nil {
		return err
	}
	if err := p.ws.Write(p.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("terminal resize: %w", err)
	}
	return nil
}

// Wait blocks until the command's exit status arrives and returns it, or
// until the connection ends without one (then it returns -1 and an error).
func (p *PTYConn) Wait() (exitCode int, err error) {
	p.out.drain()
	select {
	case <-p.exited:
	case <-p.done:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if isClosed(p.exited) {
		return p.code, nil
	}
	if p.err != nil {
		return -1, p.err
	}
	return -1, errors.New("terminal closed without an exit status")
}

// Close ends the session (the server kills the command if it still runs)
// and releases the connection. It is safe to call more than once, and
// after the server closed the connection.
func (p *PTYConn) Close() error {
	// Unblock readLoop first if it waits for a Read that will not come,
	// so it can take part in the close handshake.
	p.out.closeReader()
	// The close handshake's error is not actionable: whether the peer
	// answered or had already gone, the connection is released.
	_ = p.ws.Close(websocket.StatusNormalClosure, "")
	p.cancel()
	<-p.done
	return nil
}

// isClosed reports whether ch is closed (it is only ever closed, never
// sent on).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
