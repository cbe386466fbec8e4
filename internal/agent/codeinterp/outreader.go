package codeinterp

import (
	"io"
	"os"
	"sync"
	"time"
)

// readChunk is the largest output event.
const readChunk = 32 << 10

// outReader pumps one of an interpreter's output pipes into the current
// execution's sink, stripping end-of-execution markers and recording the
// highest one seen.
type outReader struct {
	k      *kernel
	stream int
	r      io.Reader
	scanMu sync.Mutex // guards scan, whose nonce changes per execution
	scan   *markerScanner

	mu   sync.Mutex
	seen uint64    // highest marker sequence number seen
	last time.Time // time of the last read
	// notify is poked on every marker and at EOF.
	notify chan struct{}
	done   chan struct{} // closed at EOF or error
}

func newOutReader(k *kernel, stream int, r io.Reader) *outReader {
	return &outReader{k: k, stream: stream, r: r, scan: newMarkerScanner(k.nonce),
		notify: make(chan struct{}, 1), done: make(chan struct{})}
}

func (o *outReader) run() {
	defer close(o.done)
	defer o.poke()
	buf := make([]byte, readChunk)
	for {
		n, err := o.r.Read(buf)
		if n > 0 {
			o.mu.Lock()
			o.last = time.Now()
			o.mu.Unlock()
			o.scanMu.Lock()
			o.scan.feed(buf[:n], o.data, o.mark)
			o.scanMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// setNonce makes the reader look for markers with nonce from now on.
// Bytes held back as a possible old marker are plain output after all.
func (o *outReader) setNonce(nonce string) {
	o.scanMu.Lock()
	defer o.scanMu.Unlock()
	if len(o.scan.pending) > 0 {
		o.data(o.scan.pending)
	}
	o.scan = newMarkerScanner(nonce)
}

func (o *outReader) data(p []byte) {
	if s := o.k.sink.Load(); s != nil {
		s.output(o.stream, p)
	}
}

func (o *outReader) mark(seq uint64) {
	o.mu.Lock()
	o.seen = max(o.seen, seq)
	o.mu.Unlock()
	o.poke()
}

func (o *outReader) poke() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// state reports whether the reader has seen marker seq (or ended), and
// when it last read anything.
func (o *outReader) state(seq uint64) (reached bool, last time.Time) {
	select {
	case <-o.done:
		return true, time.Time{}
	default:
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen >= seq, o.last
}

// syncOutput returns once both readers delivered everything the
// interpreter wrote before its last event on fd 4 (it flushes its streams
// before reporting a result or the end), bounded as awaitOutput is.
func (k *kernel) syncOutput() {
	k.marks++
	k.writeMarkers(k.marks)
	k.awaitOutput(k.marks, [2]bool{true, true})
}

// writeMarkers appends marker seq to both output pipes. The interpreter
// flushed its output before the event that made the agent write it, so
// the marker follows everything it wrote. The writes block only while the pipe is
// full (its reader busy), so they run on their own goroutine; closing the
// pipes at teardown ends them.
func (k *kernel) writeMarkers(seq uint64) {
	b := markerBytes(k.nonce, seq)
	for _, f := range []*os.File{k.pipes.StdoutMark, k.pipes.StderrMark} {
		go func() {
			if _, err := f.Write(b); err != nil && k.alive() {
				k.log.Debug("write output marker", "err", err)
			}
		}()
	}
}

// Waiting for markers: a marker normally arrives within microseconds of
// the done event. Waiting ends once the stream has been quiet for
// markerQuiet while the marker is missing (the reader is far behind), or
// after markerMax in any case.
const (
	markerQuiet = 100 * time.Millisecond
	markerMax   = 5 * time.Second
)

// awaitOutput waits until the readers in want have delivered everything
// up to marker seq (see above), so the execution's output precedes its
// end or its results.
func (k *kernel) awaitOutput(seq uint64, want [2]bool) {
	start := time.Now()
	for {
		pending, quiet := false, true
		for i, o := range k.readers {
			if !want[i] {
				continue
			}
			reached, last := o.state(seq)
			if !reached {
				pending = true
				if time.Since(last) < markerQuiet {
					quiet = false
				}
			}
		}
		if !pending {
			return
		}
		waited := time.Since(start)
		if (quiet && waited >= markerQuiet) || waited >= markerMax {
			k.log.Debug("output marker missing", "seq", seq)
			return
		}
		select {
		case <-k.readers[0].notify:
		case <-k.readers[1].notify:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// drainAfterExit gives the readers a moment to deliver what a dead
// interpreter wrote just before it died.
func (k *kernel) drainAfterExit() {
	start := time.Now()
	deadline := start.Add(markerMax)
	for time.Now().Before(deadline) {
		quiet := true
		for _, o := range k.readers {
			select {
			case <-o.done:
				continue
			default:
			}
			o.mu.Lock()
			last := o.last
			o.mu.Unlock()
			// Data may still sit unread in the pipe: count quiet time from
			// when waiting began at the earliest.
			if last.Before(start) {
				last = start
			}
			if time.Since(last) < 50*time.Millisecond {
				quiet = false
			}
		}
		if quiet {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
