package agentscope

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
)

// Tool groups. "generic" is in every sandbox; "filesystem" is the built-in
// group of filesystem sandboxes; MCP servers added to a sandbox are groups
// named after the server.
const (
	groupGeneric    = "generic"
	groupFilesystem = "filesystem"
)

// toolSpec is a tool's name, description and JSON Schema of its arguments.
type toolSpec struct {
	Name        string
	Description string
	Parameters  map[string]any // a JSON Schema object
}

// entry is the tool's list_tools entry: {"name", "json_schema"}.
func (t toolSpec) entry() map[string]any {
	return map[string]any{
		"name": t.Name,
		"json_schema": map[string]any{
			"type": "function",
			"function": map[string]any{
				"name": t.Name, "description": t.Description, "parameters": t.Parameters,
			},
		},
	}
}

// object builds a JSON Schema object from properties and required names.
func object(props map[string]any, required ...string) map[string]any {
	if required == nil {
		required = []string{}
	}
	return map[string]any{"type": "object", "properties": props, "required": required}
}

func stringProp(desc string) map[string]any {
	p := map[string]any{"type": "string"}
	if desc != "" {
		p["description"] = desc
	}
	return p
}

// genericTools are run_ipython_cell and run_shell_command, with the names,
// descriptions and schemas agentscope's client lists.
var genericTools = []toolSpec{
	{Name: "run_ipython_cell", Description: "Run an IPython cell.",
		Parameters: object(map[string]any{"code": stringProp("IPython code to execute")}, "code")},
	{Name: "run_shell_command", Description: "Run a shell command.",
		Parameters: object(map[string]any{"command": stringProp("Shell command to execute")}, "command")},
}

func groupOf(specs []toolSpec) map[string]any {
	g := make(map[string]any, len(specs))
	for _, t := range specs {
		g[t.Name] = t.entry()
	}
	return g
}

// builtinGroups are the tool groups a sandbox type has besides generic.
func builtinGroups(typ string) map[string][]toolSpec {
	switch {
	case typ == "filesystem":
		return map[string][]toolSpec{groupFilesystem: fsTools}
	case hasGUITools(typ):
		return map[string][]toolSpec{groupGUI: guiTools}
	}
	return map[string][]toolSpec{}
}

// mcpToolGroups lists the non-generic groups of r: its type's built-in
// ones and its MCP servers' (the sandbox's /mcp/list_tools).
func (s *Server) mcpToolGroups(ctx context.Context, r *record) (map[string]any, error) {
	out := map[string]any{}
	for name, specs := range builtinGroups(r.Type) {
		out[name] = groupOf(specs)
	}
	if hasBrowserTools(r.Type) {
		specs, err := s.browserToolSpecs(ctx, r)
		if err != nil {
			return nil, err
		}
		out[groupBrowser] = groupOf(specs)
	}
	if g := s.mcpGroupOf(r.ID); g != nil {
		servers, err := g.listTools(ctx)
		if err != nil {
			return nil, err
		}
		for name, specs := range servers {
			out[name] = groupOf(specs)
		}
	}
	return out, nil
}

// apiListTools is POST /list_tools: every group of the sandbox, or only
// tool_type's.
func (s *Server) apiListTools(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	toolType, err := c.str("tool_type")
	if err != nil {
		return nil, err
	}
	r, err := s.touch(ctx, c, identity)
	if err != nil {
		return nil, err
	}
	groups, err := s.mcpToolGroups(ctx, r)
	if err != nil {
		return nil, err
	}
	groups[groupGeneric] = groupOf(genericTools)
	if toolType != "" {
		g, ok := groups[toolType]
		if !ok {
			g = map[string]any{}
		}
		return map[string]any{toolType: g}, nil
	}
	return groups, nil
}

// apiCallTool is POST /call_tool.
func (s *Server) apiCallTool(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	name, err := c.str("tool_name")
	if err != nil {
		return nil, err
	}
	args, err := c.object("arguments")
	if err != nil {
		return nil, err
	}
	r, err := s.touch(ctx, c, identity)
	if err != nil {
		return nil, err
	}
	ctx, done, err := s.begin(ctx, r)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.callTool(ctx, r, name, args)
}

// errUnknownTool is a call of a tool the sandbox does not have.
type errUnknownTool struct{ name string }

func (e errUnknownTool) Error() string { return fmt.Sprintf("Tool '%s' not found", e.name) }

// callTool runs a tool of r and returns its CallToolResult. Failures of
// the tool itself are results with isError; an unknown tool is an error.
func (s *Server) callTool(ctx context.Context, r *record, name string, args map[string]any) (map[string]any, error) {
	if args == nil {
		args = map[string]any{}
	}
	switch name {
	case "run_shell_command":
		return s.runShellCommand(ctx, r, args), nil
	case "run_ipython_cell":
		return s.runIPythonCell(ctx, r, args), nil
	}
	if res, ok := s.callBrowserTool(ctx, r, name, args); ok {
		return res, nil
	}
	if res, ok := s.callGUITool(ctx, r, name, args); ok {
		return res, nil
	}
	for _, t := range builtinGroups(r.Type)[groupFilesystem] {
		if t.Name == name {
			return s.runFSTool(ctx, r, name, args)
		}
	}
	if g := s.mcpGroupOf(r.ID); g != nil {
		if res, ok, err := g.callTool(ctx, name, args); ok || err != nil {
			return res, err
		}
	}
	return nil, errUnknownTool{name}
}

// CallToolResult shapes, as agentscope's servers dump them.

func textContent(text string) map[string]any {
	return map[string]any{"type": "text", "text": text, "annotations": nil}
}

func describedText(text, desc string) map[string]any {
	c := textContent(text)
	c["description"] = desc
	return c
}

func toolResult(isError bool, content ...map[string]any) map[string]any {
	if content == nil {
		content = []map[string]any{}
	}
	return map[string]any{"meta": nil, "content": content, "isError": isError}
}

// toolError is a tool failure: {"content":[{"type":"text","text":"Error: ..."}],"isError":true}.
func toolError(format string, args ...any) map[string]any {
	return toolResult(true, textContent("Error: "+fmt.Sprintf(format, args...)))
}

// argString reads a required string argument of a tool.
func argString(args map[string]any, name string) (string, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return "", fmt.Errorf("missing required argument %q", name)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("argument %q must be a string", name)
	}
	return s, nil
}

// argStrings reads a list of strings; absent is nil.
func argStrings(args map[string]any, name string, required bool) ([]string, error) {
	v, ok := args[name]
	if !ok || v == nil {
		if required {
			return nil, fmt.Errorf("missing required argument %q", name)
		}
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("argument %q must be an array of strings", name)
	}
	out := make([]string, len(list))
	for i, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("argument %q must be an array of strings", name)
		}
		out[i] = s
	}
	return out, nil
}

// sortedKeys returns m's keys in order (stable listings).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var _ = json.Marshal
