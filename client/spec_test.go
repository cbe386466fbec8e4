package client

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentbox/agentbox/api"
)

// The SDK keeps its own copies of the API's wire types. TestTypesMatchSpec
// holds each named one against its schema in api/openapi.yaml: every JSON
// field of the type is a property of the schema, of a compatible JSON type
// (nested structs checked the same way), and every property of the schema
// is a field of the type unless it is listed below as deliberately left
// out. Request bodies the SDK builds as anonymous structs inside its
// methods are not reached here; the e2e tests send them through the
// daemon's spec check (api/spectest), which refuses what the document
// does not allow.

// specType is one SDK type and its schema.
type specType struct {
	name   string
	v      any
	schema func(doc *openapi3.T) *openapi3.Schema
	// without are the schema's properties the type does not carry
	// (dotted for nested objects), and why.
	without map[string]string
}

func component(name string) func(*openapi3.T) *openapi3.Schema {
	return func(doc *openapi3.T) *openapi3.Schema {
		if s := doc.Components.Schemas[name]; s != nil {
			return s.Value
		}
		return nil
	}
}

// opSchema is the JSON schema of an operation's request body (status "")
// or of a response.
func opSchema(path, method, status string) func(*openapi3.T) *openapi3.Schema {
	return func(doc *openapi3.T) *openapi3.Schema {
		item := doc.Paths.Value(path)
		if item == nil {
			return nil
		}
		op := item.GetOperation(method)
		if op == nil {
			return nil
		}
		var content openapi3.Content
		if status == "" {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				return nil
			}
			content = op.RequestBody.Value.Content
		} else {
			r := op.Responses.Value(status)
			if r == nil || r.Value == nil {
				return nil
			}
			content = r.Value.Content
		}
		mt := content.Get("application/json")
		if mt == nil || mt.Schema == nil {
			return nil
		}
		return mt.Schema.Value
	}
}

var specTypes = []specType{
	// Responses.
	{name: "Sandbox", v: Sandbox{}, schema: component("Sandbox")},
	{name: "Network", v: Network{}, schema: component("Network")},
	{name: "SandboxPage", v: SandboxPage{}, schema: component("SandboxList")},
	{name: "Session", v: Session{}, schema: component("Session")},
	{name: "Stats", v: Stats{}, schema: component("Stats")},
	{name: "LogEntry", v: LogEntry{}, schema: component("LogEntry")},
	{name: "ServerInfo", v: ServerInfo{}, schema: component("ServerInfo")},
	{name: "Entry", v: Entry{}, schema: component("Entry")},
	{name: "ExecResult", v: ExecResult{}, schema: component("ExecResult")},
	{name: "ExecRecord", v: ExecRecord{}, schema: component("ExecRecord")},
	{name: "ExecEvent", v: ExecEvent{}, schema: component("ExecEvent")},
	{name: "CodeContext", v: CodeContext{}, schema: component("CodeContext")},
	{name: "codeEvent", v: codeEvent{}, schema: component("CodeEvent"), without: map[string]string{
		"timestamp":  "the SDK gathers an execution's output, not its timing",
		"pdf":        "CodeOutput carries the formats the SDK renders",
		"javascript": "CodeOutput carries the formats the SDK renders",
		"data":       "CodeOutput carries the formats the SDK renders",
		"chart":      "CodeOutput carries the formats the SDK renders",
		"extra":      "CodeOutput carries the formats the SDK renders",
	}},
	{name: "Template", v: Template{}, schema: component("Template"), without: map[string]string{
		"resources": "the template's default resources are for the operator's CLI, not the SDK",
	}},
	{name: "ImageConfig", v: ImageConfig{}, schema: component("ImageConfig"), without: map[string]string{
		"stop_signal": "nothing in a sandbox acts on it",
		"healthcheck": "nothing in a sandbox acts on it",
	}},
	{name: "TemplateProgress", v: TemplateProgress{}, schema: component("TemplateEvent"), without: map[string]string{
		"type":     "PullTemplate reads the event type itself",
		"template": "PullTemplate returns the template",
		"error":    "PullTemplate returns the error",
	}},
	{name: "Node", v: Node{}, schema: component("Node")},
	{name: "PreviewToken", v: PreviewToken{}, schema: opSchema("/v1/sandboxes/{id}/preview-tokens", "POST", "201"), without: map[string]string{
		"host": "URL carries the browser origin",
	}},
	{name: "ToolResult", v: ToolResult{}, schema: component("ToolResult")},
	{name: "ComputerResult", v: ComputerResult{}, schema: opSchema("/v1/sandboxes/{id}/computer", "POST", "200"), without: map[string]string{
		"ok": "a nil error says it",
	}},
	{name: "DesktopLink", v: DesktopLink{}, schema: opSchema("/v1/sandboxes/{id}/desktop/links", "POST", "201")},
	{name: "Recording", v: Recording{}, schema: component("Recording")},
	{name: "BuildEvent", v: BuildEvent{}, schema: component("BuildEvent")},
	{name: "BootstrapEvent", v: BootstrapEvent{}, schema: component("BootstrapEvent")},
	{name: "Error", v: Error{}, schema: component("Error")},
	// Requests.
	{name: "createBody", v: createBody{}, schema: component("CreateSandbox")},
	{name: "Resources", v: Resources{}, schema: component("Resources")},
	{name: "execBody", v: execBody{}, schema: component("ExecRequest")},
	{name: "PullRequest", v: PullRequest{}, schema: component("PullRequest")},
	{name: "BuildRequest", v: BuildRequest{}, schema: component("BuildOptions")},
	{name: "BootstrapRequest", v: BootstrapRequest{}, schema: component("BootstrapRequest")},
	{name: "RecordOptions", v: RecordOptions{}, schema: opSchema("/v1/sandboxes/{id}/desktop/record", "POST", ""), without: map[string]string{
		"action": "StartRecording and StopRecording set it",
	}},
}

func TestTypesMatchSpec(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range specTypes {
		s := st.schema(doc)
		if s == nil {
			t.Errorf("%s: its schema is not in the document", st.name)
			continue
		}
		c := checker{t: t, without: st.without, used: map[string]bool{}, top: reflect.TypeOf(st.v)}
		c.object(st.name, "", reflect.TypeOf(st.v), s)
		for k := range st.without {
			if !c.used[k] {
				t.Errorf("%s: %q is listed as left out, but the schema has no such property or the type has it", st.name, k)
			}
		}
	}
}

type checker struct {
	t       interface{ Errorf(string, ...any) }
	without map[string]string
	used    map[string]bool
	top     reflect.Type
}

// ownEntry reports whether typ has an entry of its own in specTypes (its
// coverage of the schema is checked there, with its own list).
func ownEntry(typ reflect.Type) bool {
	for _, st := range specTypes {
		if reflect.TypeOf(st.v) == typ {
			return true
		}
	}
	return false
}

// object compares struct type typ with object schema s; prefix is the
// dotted path of nested objects.
func (c *checker) object(name, prefix string, typ reflect.Type, s *openapi3.Schema) {
	fields := jsonFields(typ)
	for fname, ft := range fields {
		p := s.Properties[fname]
		if p == nil || p.Value == nil {
			c.t.Errorf("%s: field %q is not a property of its schema", name, prefix+fname)
			continue
		}
		if !compatible(ft, p.Value) {
			c.t.Errorf("%s: field %q is a Go %s, its schema says %s", name, prefix+fname, ft, describe(p.Value))
			continue
		}
		if st := structOf(ft); st != nil && len(p.Value.Properties) > 0 {
			c.object(name, prefix+fname+".", st, p.Value)
		}
	}
	if typ != c.top && ownEntry(typ) {
		return
	}
	var props []string
	for p := range s.Properties {
		props = append(props, p)
	}
	sort.Strings(props)
	for _, p := range props {
		if _, ok := fields[p]; ok {
			continue
		}
		if _, ok := c.without[prefix+p]; ok {
			c.used[prefix+p] = true
			continue
		}
		c.t.Errorf("%s: the schema's property %q has no field in the SDK type (add it, or list it as left out with a reason)", name, prefix+p)
	}
}

// jsonFields returns the JSON names of typ's fields (embedded structs
// inlined, as encoding/json does) and their types.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			if st := structOf(f.Type); st != nil {
				for k, v := range jsonFields(st) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// structOf is the struct type t holds (through pointers and slices), nil
// for time.Time and non-structs.
func structOf(t reflect.Type) reflect.Type {
	t = deref(t)
	if t.Kind() == reflect.Slice {
		t = deref(t.Elem())
	}
	if t.Kind() != reflect.Struct || t == timeType {
		return nil
	}
	return t
}

// compatible reports whether values of Go type t encode (and decode) as
// s describes.
func compatible(t reflect.Type, s *openapi3.Schema) bool {
	t = deref(t)
	for _, alt := range slices.Concat(s.OneOf, s.AnyOf) {
		if alt.Value != nil && compatible(t, alt.Value) {
			return true
		}
	}
	if s.Type == nil || len(*s.Type) == 0 {
		return len(s.OneOf)+len(s.AnyOf) == 0 // any JSON value
	}
	if t == rawType || t.Kind() == reflect.Interface {
		return true
	}
	switch {
	case t == timeType:
		return s.Type.Is("string") && s.Format == "date-time"
	case t.Kind() == reflect.String:
		return s.Type.Is("string")
	case t.Kind() == reflect.Bool:
		return s.Type.Is("boolean")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return s.Type.Is("integer")
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return s.Type.Is("number") || s.Type.Is("integer")
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return s.Type.Is("string") && s.Format == "byte"
	case t.Kind() == reflect.Slice:
		return s.Type.Is("array") && (s.Items == nil || s.Items.Value == nil || compatible(t.Elem(), s.Items.Value))
	case t.Kind() == reflect.Map:
		if !s.Type.Is("object") {
			return false
		}
		if ap := s.AdditionalProperties.Schema; ap != nil && ap.Value != nil {
			return compatible(t.Elem(), ap.Value)
		}
		return true
	case t.Kind() == reflect.Struct:
		return s.Type.Is("object")
	}
	return false
}

func describe(s *openapi3.Schema) string {
	if s.Type == nil {
		return "any"
	}
	d := strings.Join(*s.Type, "|")
	if s.Format != "" {
		d += " (" + s.Format + ")"
	}
	return d
}

// recorder collects a checker's complaints.
type recorder []string

func (r *recorder) Errorf(format string, args ...any) { *r = append(*r, fmt.Sprintf(format, args...)) }

// TestTypesMatchSpecFindsDrift: the check finds a field the schema does
// not have, a field of the wrong JSON type, and a property the type lacks.
func TestTypesMatchSpecFindsDrift(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	type drifted struct {
		ID       int       `json:"id"`
		Template string    `json:"template"`
		State    string    `json:"state"`
		Created  time.Time `json:"created_at"`
		Colour   string    `json:"colour"`
	}
	var r recorder
	c := checker{t: &r, used: map[string]bool{}, top: reflect.TypeFor[drifted]()}
	c.object("drifted", "", reflect.TypeFor[drifted](), component("Sandbox")(doc))
	all := strings.Join(r, "\n")
	for _, want := range []string{`field "id" is a Go int`, `field "colour" is not a property`, `property "access_token" has no field`} {
		if !strings.Contains(all, want) {
			t.Errorf("not found: %s\nin:\n%s", want, all)
		}
	}
}
