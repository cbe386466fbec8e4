package codeinterp

import (
	"encoding/json"
	"strings"
	"time"
)

// Event types of the execution stream (E2B's code-interpreter names).
const (
	TypeStdout             = "stdout"
	TypeStderr             = "stderr"
	TypeNumberOfExecutions = "number_of_executions"
	TypeResult             = "result"
	TypeError              = "error"
	TypeKeepalive          = "keepalive"
	TypeEndOfExecution     = "end_of_execution"
)

// Event is one line of the NDJSON execution stream. Only the fields of
// its type are set, so it marshals to exactly E2B's shapes:
//
//	{"type":"stdout"|"stderr","text","timestamp"}
//	{"type":"number_of_executions","execution_count"}
//	{"type":"result","is_main_result", <present formats>...}
//	{"type":"error","name","value","traceback"}
//	{"type":"keepalive"}, {"type":"end_of_execution"}
//
// Results carry each available format under E2B's key: text, html,
// markdown, svg, png and jpeg (base64), pdf, latex, json, javascript,
// data (a DataFrame's columns), chart; other MIME types go to extra.
type Event struct {
	Type string `json:"type"`

	// Text is the output chunk (stdout, stderr) or a result's text/plain.
	Text      *string `json:"text,omitempty"`
	Timestamp string  `json:"timestamp,omitempty"`

	ExecutionCount *int `json:"execution_count,omitempty"`

	IsMainResult *bool                      `json:"is_main_result,omitempty"`
	HTML         string                     `json:"html,omitempty"`
	Markdown     string                     `json:"markdown,omitempty"`
	SVG          string                     `json:"svg,omitempty"`
	PNG          string                     `json:"png,omitempty"`
	JPEG         string                     `json:"jpeg,omitempty"`
	PDF          string                     `json:"pdf,omitempty"`
	LaTeX        string                     `json:"latex,omitempty"`
	JSON         json.RawMessage            `json:"json,omitempty"`
	JavaScript   string                     `json:"javascript,omitempty"`
	Data         json.RawMessage            `json:"data,omitempty"`
	Chart        json.RawMessage            `json:"chart,omitempty"`
	Extra        map[string]json.RawMessage `json:"extra,omitempty"`

	// Error fields are pointers: an error always carries all three, even
	// empty (bash reports an empty name), because E2B's Python SDK
	// indexes them unconditionally.
	Name      *string `json:"name,omitempty"`
	Value     *string `json:"value,omitempty"`
	Traceback *string `json:"traceback,omitempty"`
}

// Timestamp formats t the way the E2B server does (ISO 8601, UTC).
func Timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

// OutputEvent returns a stdout or stderr event stamped now.
func OutputEvent(stream, text string) Event {
	return Event{Type: stream, Text: &text, Timestamp: Timestamp(time.Now())}
}

// CountEvent returns the number_of_executions event.
func CountEvent(n int) Event {
	return Event{Type: TypeNumberOfExecutions, ExecutionCount: &n}
}

// ErrorEvent returns an error event.
func ErrorEvent(name, value, traceback string) Event {
	return Event{Type: TypeError, Name: &name, Value: &value, Traceback: &traceback}
}

// EndEvent returns the end_of_execution event.
func EndEvent() Event { return Event{Type: TypeEndOfExecution} }

// KeepaliveEvent returns a keepalive event.
func KeepaliveEvent() Event { return Event{Type: TypeKeepalive} }

// ResultEvent converts a MIME bundle (as produced by IPython's display
// formatters) into a result event. Like the E2B server, a text/plain
// value wrapped in single quotes (a Python or JavaScript string's repr)
// is unwrapped.
func ResultEvent(bundle map[string]json.RawMessage, main bool) Event {
	ev := Event{Type: TypeResult, IsMainResult: &main}
	for mime, raw := range bundle {
		if mime == "application/json" {
			ev.JSON = raw
			continue
		}
		if mime == "e2b/data" {
			ev.Data = raw
			continue
		}
		if mime == "e2b/chart" {
			ev.Chart = raw
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			// Not a string: only structured formats may be anything else.
			ev.extra(mime, raw)
			continue
		}
		switch mime {
		case "text/plain":
			if len(s) >= 2 && strings.HasPrefix(s, "'") && strings.HasSuffix(s, "'") {
				s = s[1 : len(s)-1]
			}
			ev.Text = &s
		case "text/html":
			ev.HTML = s
		case "text/markdown":
			ev.Markdown = s
		case "image/svg+xml":
			ev.SVG = s
		case "image/png":
			ev.PNG = s
		case "image/jpeg":
			ev.JPEG = s
		case "application/pdf":
			ev.PDF = s
		case "text/latex":
			ev.LaTeX = s
		case "application/javascript":
			ev.JavaScript = s
		default:
			ev.extra(mime, raw)
		}
	}
	return ev
}

func (ev *Event) extra(mime string, raw json.RawMessage) {
	if ev.Extra == nil {
		ev.Extra = map[string]json.RawMessage{}
	}
	ev.Extra[mime] = raw
}

// size approximates the bytes an event adds to the stream, for the
// per-execution budget of results.
func (ev *Event) size() int {
	n := len(ev.HTML) + len(ev.Markdown) + len(ev.SVG) + len(ev.PNG) + len(ev.JPEG) + len(ev.PDF) +
		len(ev.LaTeX) + len(ev.JSON) + len(ev.JavaScript) + len(ev.Data) + len(ev.Chart)
	if ev.Text != nil {
		n += len(*ev.Text)
	}
	for _, v := range ev.Extra {
		n += len(v)
	}
	return n
}
