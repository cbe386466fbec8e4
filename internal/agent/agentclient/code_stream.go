package agentclient

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/internal/agent/codeinterp"
)

// maxCodeEventLine bounds one event line (a result with its images).
const maxCodeEventLine = 256 << 20

// ExecutionStream reads the events of one execution.
type ExecutionStream struct {
	body io.ReadCloser
	br   *bufio.Reader
	done bool
}

// NewExecutionStream parses an NDJSON execution stream (as returned by
// ExecuteRaw, or relayed by the daemon's API).
func NewExecutionStream(body io.ReadCloser) *ExecutionStream {
	return &ExecutionStream{body: body, br: bufio.NewReaderSize(body, 64<<10)}
}

// Next returns the next event, keepalives included. After
// end_of_execution (which it returns) it returns io.EOF. A stream that
// ends without end_of_execution is an error (io.ErrUnexpectedEOF).
func (s *ExecutionStream) Next() (CodeEvent, error) {
	if s.done {
		return CodeEvent{}, io.EOF
	}
	for {
		line, err := readEventLine(s.br)
		if len(line) > 0 {
			var ev CodeEvent
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				return CodeEvent{}, mapError("execute", fmt.Errorf("bad event line: %w", jerr))
			}
			if ev.Type == codeinterp.TypeEndOfExecution {
				s.done = true
			}
			return ev, nil
		}
		if errors.Is(err, io.EOF) {
			return CodeEvent{}, mapError("execute", fmt.Errorf("stream ended before end_of_execution: %w", io.ErrUnexpectedEOF))
		}
		if err != nil {
			return CodeEvent{}, mapError("execute", err)
		}
	}
}

func readEventLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxCodeEventLine {
			return nil, fmt.Errorf("event line over %d bytes", maxCodeEventLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			line = line[:len(line)-1]
			if len(line) == 0 {
				continue // blank line
			}
			return line, nil
		}
		if err == nil {
			continue
		}
		return line, err
	}
}

// Close ends the stream; an execution still running is interrupted.
func (s *ExecutionStream) Close() error { return s.body.Close() }

// ExecutionError is the error an execution ended with.
type ExecutionError struct {
	Name      string
	Value     string
	Traceback string
}

func (e *ExecutionError) Error() string { return e.Name + ": " + e.Value }

// Execution is a whole execution, collected.
type Execution struct {
	Results        []CodeEvent // result events, in order
	Stdout, Stderr []string    // output chunks, in order
	Error          *ExecutionError
	ExecutionCount int
}

// Text is the main result's text (like the E2B SDKs' execution.text).
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult != nil && *r.IsMainResult && r.Text != nil {
			return *r.Text
		}
	}
	return ""
}

// Collect reads the rest of the stream into an Execution, calling
// onEvent (when not nil) for each event as it arrives.
func (s *ExecutionStream) Collect(onEvent func(CodeEvent)) (*Execution, error) {
	x := &Execution{}
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return x, nil
		}
		if err != nil {
			return x, err
		}
		if onEvent != nil {
			onEvent(ev)
		}
		switch ev.Type {
		case codeinterp.TypeStdout:
			x.Stdout = append(x.Stdout, deref(ev.Text))
		case codeinterp.TypeStderr:
			x.Stderr = append(x.Stderr, deref(ev.Text))
		case codeinterp.TypeResult:
			x.Results = append(x.Results, ev)
		case codeinterp.TypeError:
			x.Error = &ExecutionError{Name: deref(ev.Name), Value: deref(ev.Value), Traceback: deref(ev.Traceback)}
		case codeinterp.TypeNumberOfExecutions:
			if ev.ExecutionCount != nil {
				x.ExecutionCount = *ev.ExecutionCount
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
