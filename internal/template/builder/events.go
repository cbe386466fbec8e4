package builder

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Event types.
const (
	EventStep    = "step"    // a step starts: Step/Steps, Instruction
	EventCached  = "cached"  // the step's result came from the cache
	EventRunning = "running" // a RUN step's sandbox started: Sandbox
	EventOutput  = "output"  // RUN output: Output
	EventResult  = "result"  // a step finished: ID, Duration
	EventWarning = "warning" // Message
	EventDone    = "done"    // the build succeeded: Digest, Tags
	EventError   = "error"   // the build failed: Message, Line
)

// Event is one build event, as the API streams it (NDJSON).
type Event struct {
	Type        string   `json:"type"`
	Step        int      `json:"step,omitempty"`
	Steps       int      `json:"steps,omitempty"`
	Stage       string   `json:"stage,omitempty"`
	Instruction string   `json:"instruction,omitempty"`
	Line        int      `json:"line,omitempty"`
	Sandbox     string   `json:"sandbox,omitempty"`
	Output      string   `json:"output,omitempty"`
	ID          string   `json:"id,omitempty"` // short id of the step's result
	DurationMS  int64    `json:"duration_ms,omitempty"`
	Message     string   `json:"message,omitempty"`
	Digest      string   `json:"digest,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// reporter writes events as docker-build text and as values.
type reporter struct {
	out  io.Writer
	emit func(Event)
}

func (r *reporter) event(e Event) {
	if r.emit != nil {
		r.emit(e)
	}
	if r.out == nil {
		return
	}
	switch e.Type {
	case EventStep:
		fmt.Fprintf(r.out, "Step %d/%d : %s\n", e.Step, e.Steps, e.Instruction)
	case EventCached:
		fmt.Fprintf(r.out, " ---> Using cache\n")
	case EventRunning:
		fmt.Fprintf(r.out, " ---> Running in %s\n", e.Sandbox)
	case EventOutput:
		_, _ = io.WriteString(r.out, e.Output)
	case EventResult:
		fmt.Fprintf(r.out, " ---> %s (%s)\n", e.ID, (time.Duration(e.DurationMS) * time.Millisecond).String())
	case EventWarning:
		fmt.Fprintf(r.out, "[Warning] %s\n", e.Message)
	case EventDone:
		fmt.Fprintf(r.out, "Successfully built %s\n", short(e.Digest))
		for _, t := range e.Tags {
			fmt.Fprintf(r.out, "Successfully tagged %s\n", t)
		}
	case EventError:
		fmt.Fprintf(r.out, "ERROR: %s\n", e.Message)
	}
}

func (r *reporter) warn(format string, args ...any) {
	r.event(Event{Type: EventWarning, Message: fmt.Sprintf(format, args...)})
}

// outputWriter turns RUN output into output events. Each write is one
// event, so the stream stays live; writes are copied.
type outputWriter struct{ r *reporter }

func (w outputWriter) Write(p []byte) (int, error) {
	w.r.event(Event{Type: EventOutput, Output: strings.Clone(string(p))})
	return len(p), nil
}
