package codeinterp

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// Emit receives the events of one execution, in order. It is never called
// concurrently. An error (the client went away) aborts the execution.
type Emit func(Event) error

const (
	streamStdout = 0
	streamStderr = 1
)

var streamTypes = [2]string{TypeStdout, TypeStderr}

// sink serialises the events of one execution from the output readers
// and the execution loop, enforces the output caps and keeps the text
// valid UTF-8 across chunk boundaries. After close it drops everything,
// so output arriving late (background processes) never follows
// end_of_execution.
type sink struct {
	mu     sync.Mutex
	emit   Emit
	onFail func() // called once when emit fails
	closed bool
	failed bool

	limit     int64 // bytes per stream
	written   [2]int64
	truncated [2]bool
	carry     [2][]byte // an incomplete UTF-8 sequence at a chunk's end

	resultLimit int64 // bytes of results per execution
	results     int64
	dropped     int

	// Output read before number_of_executions went out is held back so
	// the count comes first, as in E2B's stream (the count travels on the
	// event pipe, output on its own pipes, and they race).
	started   bool
	held      []heldChunk
	heldBytes int64
}

type heldChunk struct {
	stream int
	data   []byte
}

func newSink(emit Emit, limit, resultLimit int64, onFail func()) *sink {
	return &sink{emit: emit, limit: limit, resultLimit: resultLimit, onFail: onFail}
}

// send emits ev unless emitting failed before; s.mu is held. Callers
// check closed.
func (s *sink) send(ev Event) {
	if s.failed {
		return
	}
	if err := s.emit(ev); err != nil {
		s.failed = true
		if s.onFail != nil {
			go s.onFail()
		}
	}
}

// event emits a non-output event (count, result, error).
func (s *sink) event(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if ev.Type == TypeNumberOfExecutions {
		s.send(ev)
		s.releaseLocked()
		return
	}
	if ev.Type == TypeResult {
		size := int64(ev.size())
		if s.results+size > s.resultLimit {
			s.dropped++
			s.noticeLocked(fmt.Sprintf("[agentbox] a result of %d bytes was dropped: this execution's results exceed %d bytes\n", size, s.resultLimit))
			return
		}
		s.results += size
	}
	s.send(ev)
}

// output emits a chunk of stdout or stderr, capped at limit bytes per
// stream; the first overflow is reported once on stderr.
func (s *sink) output(stream int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.truncated[stream] {
		return
	}
	if !s.started {
		// Bounded: beyond the cap it would be truncated anyway.
		if s.heldBytes <= s.limit {
			s.held = append(s.held, heldChunk{stream, append([]byte(nil), p...)})
			s.heldBytes += int64(len(p))
		}
		return
	}
	s.outputLocked(stream, p)
}

// releaseLocked marks the execution started and emits held output.
func (s *sink) releaseLocked() {
	s.started = true
	held := s.held
	s.held = nil
	for _, h := range held {
		if !s.truncated[h.stream] {
			s.outputLocked(h.stream, h.data)
		}
	}
}

func (s *sink) outputLocked(stream int, p []byte) {
	if room := s.limit - s.written[stream]; int64(len(p)) > room {
		p = p[:max(room, 0)]
		s.truncated[stream] = true
	}
	s.written[stream] += int64(len(p))
	s.textLocked(stream, p, s.truncated[stream])
	if s.truncated[stream] {
		s.noticeLocked(fmt.Sprintf("[agentbox] %s of this execution exceeded %d bytes; the rest was discarded\n",
			streamTypes[stream], s.limit))
	}
}

// textLocked emits p as valid UTF-8, holding an incomplete trailing
// sequence back unless final.
func (s *sink) textLocked(stream int, p []byte, final bool) {
	buf := append(s.carry[stream], p...)
	s.carry[stream] = nil
	if !final {
		if cut := incompleteTail(buf); cut > 0 {
			s.carry[stream] = append([]byte(nil), buf[len(buf)-cut:]...)
			buf = buf[:len(buf)-cut]
		}
	}
	if len(buf) == 0 {
		return
	}
	s.send(OutputEvent(streamTypes[stream], strings.ToValidUTF8(string(buf), "\uFFFD")))
}

// noticeLocked reports something about the execution on stderr, outside
// the stderr cap.
func (s *sink) noticeLocked(msg string) {
	s.send(OutputEvent(TypeStderr, msg))
}

// notice is noticeLocked for callers without the lock.
func (s *sink) notice(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.noticeLocked(msg)
	}
}

// close flushes held-back bytes and stops all further output.
func (s *sink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.releaseLocked()
	}
	for i := range s.carry {
		if len(s.carry[i]) > 0 {
			s.textLocked(i, nil, true)
		}
	}
	s.closed = true
}

// finish emits the last events (the final error, end_of_execution) after
// close has shut out the output readers.
func (s *sink) finish(evs ...Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		s.send(ev)
	}
}

// incompleteTail returns how many bytes at the end of b form the start of
// a UTF-8 sequence that is not complete yet (0 to 3).
func incompleteTail(b []byte) int {
	for n := 1; n <= 3 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0 // ASCII: nothing pending
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}
