package client

import (
	"context"
	"io"
	"sync"
)

// ptyBufferSize is how much unread terminal output a PTYConn holds before
// it stops reading from the connection (flow control).
const ptyBufferSize = 1 << 20

// outputBuffer carries terminal output from the connection's read loop to
// Read. It is bounded: when full, put waits for Read to make room, so a
// slow reader slows the terminal down instead of growing memory. Once
// drain is called (someone waits for the exit status and may never read
// again), put no longer waits: output beyond the bound is dropped so the
// messages behind it, the exit status among them, still arrive.
type outputBuffer struct {
	mu       sync.Mutex
	buf      []byte
	end      error // set by close: io.EOF or why the connection failed
	dropped  bool  // reader closed: discard everything
	draining bool
	data     chan struct{} // signalled when buf grows or end is set
	space    chan struct{} // signalled when buf shrinks, draining starts or the reader closes
}

func newOutputBuffer() *outputBuffer {
	return &outputBuffer{data: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// notify wakes the waiter on ch, if any, without blocking; one pending
// wake-up is enough since waiters re-check the state.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// put appends p, waiting for room while the buffer is full. It returns
// early with ctx's error when ctx ends.
func (b *outputBuffer) put(ctx context.Context, p []byte) error {
	for {
		b.mu.Lock()
		switch {
		case b.dropped:
			b.mu.Unlock()
			return nil
		case len(b.buf) < ptyBufferSize || b.draining:
			room := max(ptyBufferSize-len(b.buf), 0)
			b.buf = append(b.buf, p[:min(len(p), room)]...)
			b.mu.Unlock()
			notify(b.data)
			if len(p) > room && !b.draining {
				p = p[room:] // the rest waits for room
				continue
			}
			return nil
		}
		b.mu.Unlock()
		select {
		case <-b.space:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Read returns buffered output, waiting for some; after close it returns
// what is left, then the end error (io.EOF for a normal end).
func (b *outputBuffer) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if len(b.buf) > 0 {
			n := copy(p, b.buf)
			b.buf = b.buf[n:]
			if len(b.buf) == 0 {
				b.buf = nil // let a large backing array go
			}
			b.mu.Unlock()
			notify(b.space)
			return n, nil
		}
		if b.end != nil || b.dropped {
			err := b.end
			if b.dropped {
				err = io.ErrClosedPipe
			}
			b.mu.Unlock()
			return 0, err
		}
		b.mu.Unlock()
		<-b.data
	}
}

// close ends the output with err (nil means io.EOF).
func (b *outputBuffer) close(err error) {
	if err == nil {
		err = io.EOF
	}
	b.mu.Lock()
	if b.end == nil {
		b.end = err
	}
	b.mu.Unlock()
	notify(b.data)
}

// drain stops put from waiting for room.
func (b *outputBuffer) drain() {
	b.mu.Lock()
	b.draining = true
	b.mu.Unlock()
	notify(b.space)
}

// closeReader discards all output from now on: nobody will read it.
func (b *outputBuffer) closeReader() {
	b.mu.Lock()
	b.dropped, b.buf = true, nil
	b.mu.Unlock()
	notify(b.space)
	notify(b.data)
}
