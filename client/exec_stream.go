package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
)

// Event types of an exec stream.
const (
	EventStart  = "start"  // the process started; PID is set
	EventStdout = "stdout" // Data is output on stdout
	EventStderr = "stderr" // Data is output on stderr
	EventExit   = "exit"   // the process ended; the ExitInfo fields are set
)

// ExecEvent is one event of an exec stream (one NDJSON line on the wire).
// Events of types not listed above may appear in later server versions;
// skip what you do not know.
type ExecEvent struct {
	Type string `json:"type"`
	PID  int    `json:"pid,omitempty"`
	// Data is a chunk of output, UTF-8 (invalid bytes were replaced by the
	// server). Chunks do not follow line boundaries.
	Data string `json:"data,omitempty"`
	// ExitInfo is set on the exit event.
	ExitInfo
}

// maxEventLine bounds one NDJSON line, so a broken server cannot make the
// client buffer without limit.
const maxEventLine = 16 << 20

// ExecStream reads the events of a running command. It is not safe for
// concurrent use.
type ExecStream struct {
	body io.ReadCloser
	r    *bufio.Reader
	exit *ExitInfo
	err  error // sticky: returned by every Next after the first failure
}

func newExecStream(body io.ReadCloser) *ExecStream {
	return &ExecStream{body: body, r: bufio.NewReaderSize(body, 64<<10)}
}

// Next returns the next event. After the exit event it returns io.EOF. A
// stream that ends without an exit event (server or connection lost)
// returns an error wrapping io.ErrUnexpectedEOF; a cancelled context
// returns an error wrapping the context's error.
func (s *ExecStream) Next() (ExecEvent, error) {
	if s.err != nil {
		return ExecEvent{}, s.err
	}
	for {
		line, err := s.readLine()
		if len(bytes.TrimSpace(line)) > 0 {
			var ev ExecEvent
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				s.err = fmt.Errorf("exec stream: bad event %.80q: %w", line, jerr)
				return ExecEvent{}, s.err
			}
			if ev.Type == EventExit {
				x := ev.ExitInfo
				s.exit = &x
				s.err = io.EOF
			}
			return ev, nil
		}
		if err == nil {
			continue // blank line
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		s.err = fmt.Errorf("exec stream ended before the command's exit: %w", err)
		return ExecEvent{}, s.err
	}
}

// readLine returns the next line without its newline. A last line without
// a newline is returned together with io.EOF.
func (s *ExecStream) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxEventLine {
			return nil, fmt.Errorf("event longer than %d bytes", maxEventLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}

// Events iterates over the remaining events. The iteration ends after the
// exit event; a failure is yielded once, as the last pair.
func (s *ExecStream) Events() iter.Seq2[ExecEvent, error] {
	return func(yield func(ExecEvent, error) bool) {
		for {
			ev, err := s.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Exit returns how the command ended, once the exit event has been read.
func (s *ExecStream) Exit() (ExitInfo, bool) {
	if s.exit == nil {
		return ExitInfo{}, false
	}
	return *s.exit, true
}

// Close ends the stream. If the exit event has not been read yet, the
// server kills the command.
func (s *ExecStream) Close() error { return s.body.Close() }
