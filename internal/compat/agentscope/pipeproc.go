package agentscope

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
)

// pipeProc is a long-running process inside a sandbox with its stdin kept
// open: its stdout is an io.Reader and its stdin an io.Writer, for line
// protocols (stdio MCP servers). It lives until Close,
// the end of the lifetime context given to startPipeProc, or its exit.
type pipeProc struct {
	proc   *dataplane.Process
	cancel context.CancelFunc
	out    *io.PipeReader

	mu     sync.Mutex
	stderr []byte // the last stderrKeep bytes, for error messages
	done   chan struct{}
	closed bool
}

const stderrKeep = 4096

// startPipeProc starts opts (with stdin) in the sandbox of dr. life
// bounds the process: when it ends the process is killed.
func startPipeProc(life context.Context, dr *dataplane.Request, opts dataplane.StartOptions) (*pipeProc, error) {
	opts.Stdin = true
	ctx, cancel := context.WithCancel(life)
	proc, err := dr.Start(ctx, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	pr, pw := io.Pipe()
	p := &pipeProc{proc: proc, cancel: cancel, out: pr, done: make(chan struct{})}
	go p.pump(pw)
	go func() {
		select {
		case <-ctx.Done():
			p.Close()
		case <-p.done:
		}
	}()
	return p, nil
}

// pump moves the process's output: stdout into the pipe (blocking while
// nobody reads, which is the back-pressure we want), stderr into a small
// ring kept for diagnostics.
func (p *pipeProc) pump(pw *io.PipeWriter) {
	defer close(p.done)
	for {
		ev, err := p.proc.Next()
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		switch ev.Kind {
		case dataplane.EventStdout, dataplane.EventPTY:
			if _, err := pw.Write(ev.Data); err != nil {
				return // reader closed: the process is being closed too
			}
		case dataplane.EventStderr:
			p.mu.Lock()
			p.stderr = append(p.stderr, ev.Data...)
			if n := len(p.stderr); n > stderrKeep {
				p.stderr = append([]byte(nil), p.stderr[n-stderrKeep:]...)
			}
			p.mu.Unlock()
		case dataplane.EventEnd:
			pw.CloseWithError(io.EOF)
			return
		}
	}
}

// Read reads the process's stdout.
func (p *pipeProc) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write sends b to the process's stdin.
func (p *pipeProc) Write(b []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.proc.SendStdin(ctx, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Stderr returns the tail of what the process wrote to stderr.
func (p *pipeProc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.stderr)
}

// Exited reports whether the process has ended.
func (p *pipeProc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Close kills the process (its whole process group) and releases the
// stream. It is idempotent.
func (p *pipeProc) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = p.proc.Kill(ctx)
	cancel()
	p.cancel()
	p.out.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	p.proc.Close()
	return nil
}

// stdinCloser is the process's stdin as an io.WriteCloser whose Close
// closes the whole process (what MCP's IO transport expects).
type stdinCloser struct{ p *pipeProc }

func (w stdinCloser) Write(b []byte) (int, error) { return w.p.Write(b) }
func (w stdinCloser) Close() error                { return w.p.Close() }

// stdoutCloser is the process's stdout as an io.ReadCloser.
type stdoutCloser struct{ p *pipeProc }

func (r stdoutCloser) Read(b []byte) (int, error) { return r.p.Read(b) }
func (r stdoutCloser) Close() error               { return r.p.Close() }
