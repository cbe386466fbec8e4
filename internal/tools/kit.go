// Package tools is the agent tool kit: the sandbox tools a model uses
// (run code, shell, files, git, packages, HTTP, environment, processes,
// previews), each described once with a JSON schema and a description
// written for a model, and implemented over the Go SDK (client). The same
// kit serves MCP over stdio (agentbox mcp), MCP over streamable HTTP on
// the daemon, and HTTP function calling.
//
// A Session is one caller's view: an MCP session (which gets a sandbox of
// its own, created on first use and destroyed when the session ends), or
// a call bound to one sandbox (the per-sandbox MCP endpoint, function
// calling). Tool failures a model can act on are results with IsError set,
// never Go errors; Session.Call returns an error only for an unknown tool.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentbox/agentbox/client"
)

// Content is one item of a tool result: text, or an image (base64 data).
type Content struct {
	Type     string `json:"type"` // "text" or "image"
	Text     string `json:"text,omitempty"`
	Data     string `json:"data,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

// Result is what a tool returns to the model.
type Result struct {
	Content []Content `json:"content"`
	// IsError marks a failed call; the text says what went wrong and what
	// to do about it.
	IsError bool `json:"is_error"`
}

// Text joins the result's text items, for callers that take one string
// (function-calling tool messages).
func (r *Result) Text() string {
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func textResult(format string, args ...any) *Result {
	return &Result{Content: []Content{{Type: "text", Text: fmt.Sprintf(format, args...)}}}
}

// toolError is a failure the model should read: message says what to do.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

// fail returns a tool error with a formatted message.
func fail(format string, args ...any) error { return &toolError{fmt.Sprintf(format, args...)} }

// Tool is one tool of the kit.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON schema of the arguments (an object).
	Schema map[string]any
	// Global tools manage sandboxes and take no sandbox; the others act
	// in one sandbox.
	Global bool

	run      func(ctx context.Context, s *Session, sb string, args json.RawMessage) (*Result, error)
	resolved map[bool]*jsonschema.Resolved // by "with sandbox_id"
}

// ErrUnknownTool is returned by Session.Call for a name the kit does not
// have (in that session's mode).
var ErrUnknownTool = errors.New("unknown tool")

// Kit is the set of tools and the state that outlives one call
// (terminals, named code contexts, persisted environment), kept per
// caller and sandbox. Create one with New; it is safe for concurrent use.
type Kit struct {
	tools  []*Tool
	byName map[string]*Tool

	mu     sync.Mutex
	states map[stateKey]*sandboxState
}

// New returns the kit.
func New() *Kit {
	k := &Kit{byName: map[string]*Tool{}, states: map[stateKey]*sandboxState{}}
	for _, t := range allTools() {
		k.tools = append(k.tools, t)
		k.byName[t.Name] = t
	}
	for _, t := range k.tools {
		t.resolved = map[bool]*jsonschema.Resolved{}
		for _, withID := range []bool{false, true} {
			if t.Global && withID {
				continue
			}
			raw, _ := json.Marshal(t.schemaFor(withID))
			var js jsonschema.Schema
			if err := json.Unmarshal(raw, &js); err != nil {
				panic(fmt.Sprintf("tool %s: schema: %v", t.Name, err))
			}
			r, err := js.Resolve(nil)
			if err != nil {
				panic(fmt.Sprintf("tool %s: schema: %v", t.Name, err))
			}
			t.resolved[withID] = r
		}
	}
	return k
}

// sandboxIDProp is the argument every sandbox tool takes in session mode.
var sandboxIDProp = str("The sandbox to act on, as returned by sandbox_create or sandbox_list. Omit it to use this session's own sandbox (created automatically on first use).")

// schemaFor returns the tool's schema, with the sandbox_id argument when
// withID.
func (t *Tool) schemaFor(withID bool) map[string]any {
	if !withID {
		return t.Schema
	}
	s := map[string]any{}
	for k, v := range t.Schema {
		s[k] = v
	}
	props := map[string]any{}
	for k, v := range t.Schema["properties"].(map[string]any) {
		props[k] = v
	}
	props["sandbox_id"] = sandboxIDProp
	s["properties"] = props
	return s
}

// Def is a tool's definition as a client sees it.
type Def struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
}

// Mode says which tools a session offers.
type Mode int

const (
	// SessionMode: sandbox tools take an optional sandbox_id (default:
	// the session's sandbox), and the sandbox_* tools are offered.
	SessionMode Mode = iota
	// BoundMode: every tool acts on one sandbox fixed by the endpoint;
	// no sandbox_id, no sandbox_* tools.
	BoundMode
)

// Defs returns the definitions of the tools offered in mode, sorted by
// name.
func (k *Kit) Defs(mode Mode) []Def {
	var out []Def
	for _, t := range k.tools {
		if mode == BoundMode && t.Global {
			continue
		}
		out = append(out, Def{Name: t.Name, Description: t.Description, InputSchema: t.schemaFor(mode == SessionMode && !t.Global)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Has reports whether the kit offers name in mode.
func (k *Kit) Has(mode Mode, name string) bool {
	t := k.byName[name]
	return t != nil && !(mode == BoundMode && t.Global)
}

// validate checks args against the tool's schema and returns them as a
// JSON object ("{}" for none).
func (t *Tool) validate(args json.RawMessage, withID bool) (json.RawMessage, error) {
	if len(strings.TrimSpace(string(args))) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var v map[string]any
	if err := json.Unmarshal(args, &v); err != nil {
		return nil, fail("arguments of %s must be a JSON object: %v", t.Name, err)
	}
	if v == nil {
		v = map[string]any{}
	}
	if err := t.resolved[withID].Validate(v); err != nil {
		return nil, fail("invalid arguments for %s: %v. Check the tool's input schema.", t.Name, err)
	}
	return args, nil
}

// decode unmarshals validated arguments into v.
func decode(args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return fail("invalid arguments: %v", err)
	}
	return nil
}

// asResult turns a tool's error into a result the model can act on.
func asResult(err error, sb string) *Result {
	msg := err.Error()
	var te *toolError
	var ce *client.Error
	switch {
	case errors.As(err, &te):
	case errors.As(err, &ce):
		switch ce.Code {
		case client.CodeNotFound:
			if sb != "" && strings.Contains(ce.Message, "sandbox") {
				msg = fmt.Sprintf("sandbox %s not found: it may have timed out or been killed. Call sandbox_list to see the sandboxes you have, or omit sandbox_id to use this session's sandbox. (%s)", sb, ce.Message)
			} else {
				msg = "not found: " + ce.Message
			}
		case client.CodeQuotaExceeded:
			msg = "quota exceeded: " + ce.Message + ". Kill sandboxes you no longer need (sandbox_list, sandbox_kill) and try again."
		case client.CodeDeadlineExceeded:
			msg = "timed out: " + ce.Message + ". Try a longer timeout or a smaller task."
		case client.CodePermissionDenied:
			msg = "permission denied: " + ce.Message
		case client.CodeInvalidArgument:
			msg = "invalid argument: " + ce.Message
		default:
			msg = ce.Code + ": " + ce.Message
		}
	case errors.Is(err, context.DeadlineExceeded):
		msg = "timed out: " + msg
	case errors.Is(err, context.Canceled):
		msg = "cancelled: " + msg
	}
	return &Result{IsError: true, Content: []Content{{Type: "text", Text: "Error: " + msg}}}
}
