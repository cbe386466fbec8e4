package agentscope

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxMethodBody bounds the JSON body of a manager route.
const maxMethodBody = 8 << 20

// method is one manager route: POST /<name> with the method's keyword
// arguments as a JSON object.
type method struct {
	name     string
	params   []string // in Python's positional order
	required int      // how many leading params are required
	anyKeys  bool     // accepts **kwargs
	fn       func(ctx context.Context, c *call) (any, error)
}

// async returns the _async twin: same body and result, but errors name
// the twin, as Python's method.__name__ does.
func (m method) async() method {
	m.name += "_async"
	return m
}

// call is one invocation: the caller and its arguments.
type call struct {
	owner   string
	baseURL string
	port    int
	args    map[string]json.RawMessage

	req   *http.Request // the request, for a method served by another replica (peers.go)
	body  []byte        // its body as read
	local bool          // serve here even when the sandbox runs elsewhere
}

func (s *Server) methods() []method {
	return []method{
		{name: "create", params: []string{"sandbox_type", "mount_dir", "storage_path", "environment", "meta"}, fn: s.apiCreate},
		{name: "create_from_pool", params: []string{"sandbox_type", "meta"}, fn: s.apiCreateFromPool},
		{name: "release", params: []string{"identity"}, required: 1, fn: s.apiRelease},
		{name: "start", params: []string{"identity"}, required: 1, fn: s.apiStart},
		{name: "stop", params: []string{"identity"}, required: 1, fn: s.apiStop},
		{name: "get_status", params: []string{"identity"}, required: 1, fn: s.apiGetStatus},
		{name: "get_info", params: []string{"identity"}, required: 1, fn: s.apiGetInfo},
		{name: "check_health", params: []string{"identity"}, required: 1, fn: s.apiCheckHealth},
		{name: "list_tools", params: []string{"identity", "tool_type"}, required: 1, anyKeys: true, fn: s.apiListTools},
		{name: "call_tool", params: []string{"identity", "tool_name", "arguments"}, required: 1, fn: s.apiCallTool},
		{name: "add_mcp_servers", params: []string{"identity", "server_configs", "overwrite"}, required: 2, fn: s.apiAddMCPServers},
		{name: "get_session_mapping", params: []string{"session_ctx_id"}, required: 1, fn: s.apiGetSessionMapping},
		{name: "list_session_keys", fn: s.apiListSessionKeys},
		{name: "cleanup", fn: s.apiCleanup},
	}
}

// methodHandler authenticates, decodes the arguments, runs the method and
// answers 200 {"data": result} or 500 {"detail": "Error in <name>: ..."}.
func (s *Server) methodHandler(m method) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		// A heavy method's data-plane request (admission.go) ends once the
		// answer, which its reservations cover, is written.
		ctx, ends := withEnds(r.Context())
		defer ends.run()
		args, body, err := decodeArgs(w, r, m)
		if err == nil {
			c := &call{owner: owner, baseURL: baseURL(r), port: hostPort(r), args: args, req: r, body: body}
			var result any
			result, err = m.fn(ctx, c)
			var ee errElsewhere
			if errors.As(err, &ee) {
				if s.serveElsewhere(w, r, c, ee.id) {
					return
				}
				result, err = m.fn(ctx, c)
			}
			if err == nil {
				writeJSON(w, http.StatusOK, map[string]any{"data": result})
				return
			}
		}
		s.writeMethodError(w, m, err)
	})
}

// writeMethodError answers a failed method: 500 {"detail": "Error in
// <name>: ..."}, or 429 with Retry-After when the caller is over its
// request limits.
func (s *Server) writeMethodError(w http.ResponseWriter, m method, err error) {
	status, quota := quotaStatus(w, err)
	if !quota {
		status = http.StatusInternalServerError
		s.log.Warn("agentscope method failed", "method", m.name, "err", err)
	}
	writeDetail(w, status, "Error in "+m.name+": "+errorText(err))
}

// errorText is the message a caller sees: the class message of agentbox
// errors (no host details), else the error text.
func errorText(err error) string {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return se.Msg
	}
	return err.Error()
}

// decodeArgs reads the JSON object of keyword arguments. A positional
// argument sent as "args" (some async client wrappers do) is the first
// parameter, or the leading ones when it is a list; "kwargs" sent as an
// object is merged.
func decodeArgs(w http.ResponseWriter, r *http.Request, m method) (map[string]json.RawMessage, []byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMethodBody))
	if err != nil {
		return nil, nil, fmt.Errorf("request body: %w", err)
	}
	args, err := parseArgs(body, m)
	return args, body, err
}

// parseArgs decodes a method's JSON body.
func parseArgs(body []byte, m method) (map[string]json.RawMessage, error) {
	args := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, fmt.Errorf("the request body must be a JSON object: %v", err)
		}
	}
	if raw, ok := args["args"]; ok {
		delete(args, "args")
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			list = []json.RawMessage{raw}
		}
		if len(list) > len(m.params) {
			return nil, fmt.Errorf("%s() takes %d positional arguments but %d were given", m.name, len(m.params), len(list))
		}
		for i, v := range list {
			args[m.params[i]] = v
		}
	}
	if raw, ok := args["kwargs"]; ok {
		var kw map[string]json.RawMessage
		if json.Unmarshal(raw, &kw) == nil {
			delete(args, "kwargs")
			for k, v := range kw {
				args[k] = v
			}
		}
	}
	if !m.anyKeys {
		for k := range args {
			if !contains(m.params, k) {
				return nil, fmt.Errorf("%s() got an unexpected keyword argument '%s'", m.name, k)
			}
		}
	}
	var missing []string
	for _, p := range m.params[:m.required] {
		if v, ok := args[p]; !ok || len(v) == 0 {
			missing = append(missing, "'"+p+"'")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s() missing %d required positional argument%s: %s",
			m.name, len(missing), plural(len(missing)), strings.Join(missing, " and "))
	}
	return args, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// str returns a string argument; absent or null is "". Numbers are
// accepted in their JSON text (Python clients sometimes send ints).
func (c *call) str(name string) (string, error) {
	raw, ok := c.args[name]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			return n.String(), nil
		}
		return "", fmt.Errorf("argument %s must be a string", name)
	}
	return s, nil
}

// object returns an object argument; absent or null is nil.
func (c *call) object(name string) (map[string]any, error) {
	raw, ok := c.args[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("argument %s must be an object", name)
	}
	return m, nil
}

// boolean returns a bool argument; absent or null is false.
func (c *call) boolean(name string) (bool, error) {
	raw, ok := c.args[name]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("argument %s must be a boolean", name)
	}
	return b, nil
}
