package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentbox/agentbox/client"
)

// Function calling over HTTP (GET /v1/tools, POST
// /v1/sandboxes/{id}/tools/{name}) through the Go SDK and raw requests,
// and the per-sandbox MCP endpoint with an MCP server added to the
// sandbox through agentscope's add_mcp_servers.

// boundTools are the tools that act on one sandbox.
var boundTools = func() []string {
	var out []string
	for _, n := range kitTools {
		if !strings.HasPrefix(n, "sandbox_") {
			out = append(out, n)
		}
	}
	return out
}()

func TestToolsFunctionCalling(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice,"+mcpBobKey+":bob")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice := d.sdk(t, mcpAliceKey)

	defs, err := alice.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
		raw, _ := json.Marshal(d.InputSchema)
		var s jsonschema.Schema
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
		if _, err := s.Resolve(nil); err != nil {
			t.Errorf("%s: invalid schema: %v", d.Name, err)
		}
		if _, ok := d.InputSchema["properties"].(map[string]any)["sandbox_id"]; ok {
			t.Errorf("%s: function-calling schema has sandbox_id (the path names the sandbox)", d.Name)
		}
	}
	sort.Strings(names)
	if strings.Join(names, ",") != strings.Join(boundTools, ",") {
		t.Errorf("GET /v1/tools = %v\nwant %v", names, boundTools)
	}
	// The OpenAI and MCP shapes.
	raw, err := alice.ListToolsRaw(ctx, "openai")
	if err != nil {
		t.Fatal(err)
	}
	var oa []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &oa); err != nil || len(oa) != len(boundTools) || oa[0].Type != "function" || oa[0].Function.Parameters["type"] != "object" {
		t.Errorf("openai format: %v %s", err, raw[:min(len(raw), 300)])
	}
	raw, err = alice.ListToolsRaw(ctx, "mcp")
	if err != nil || !bytes.Contains(raw, []byte(`"inputSchema"`)) {
		t.Errorf("mcp format: %v %.200s", err, raw)
	}
	if code, body := d.call(t, "GET", "/v1/tools?format=bogus", mcpAliceKey, nil); code != 400 {
		t.Errorf("bad format: %d %s", code, body)
	}
	if code, _ := d.call(t, "GET", "/v1/tools", "", nil); code != 401 {
		t.Errorf("GET /v1/tools without a key: %d", code)
	}

	sb, err := alice.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Delete(context.Background(), sb.ID)

	// State across calls, files, a failing command: tool errors are 200
	// results with is_error, for the model.
	if _, err := alice.CallTool(ctx, sb.ID, "run_code", map[string]any{"code": "y = 20"}); err != nil {
		t.Fatal(err)
	}
	res, err := alice.CallTool(ctx, sb.ID, "run_code", map[string]any{"code": "y * 2 + 2"})
	if err != nil || res.IsError || !strings.Contains(res.Text, "42") {
		t.Fatalf("run_code: %v %+v", err, res)
	}
	res, err = alice.CallTool(ctx, sb.ID, "file_write", json.RawMessage(`{"path": "f.txt", "content": "one\n"}`))
	if err != nil || res.IsError {
		t.Fatalf("file_write: %v %+v", err, res)
	}
	res, err = alice.CallTool(ctx, sb.ID, "file_read", map[string]any{"path": "f.txt"})
	if err != nil || res.Text != "one\n" {
		t.Fatalf("file_read: %v %+v", err, res)
	}
	res, err = alice.CallTool(ctx, sb.ID, "shell_exec", map[string]any{"command": "exit 7"})
	if err != nil || !res.IsError || !strings.Contains(res.Text, "exit code 7") {
		t.Fatalf("failing command: %v %+v", err, res)
	}
	res, err = alice.CallTool(ctx, sb.ID, "file_read", map[string]any{"path": "/etc/shadow"})
	if err != nil || !res.IsError || !strings.Contains(res.Text, "outside the workspace") {
		t.Fatalf("outside path: %v %+v", err, res)
	}
	res, err = alice.CallTool(ctx, sb.ID, "file_read", map[string]any{"path": "f.txt", "sandbox_id": "other"})
	if err != nil || !res.IsError || !strings.Contains(res.Text, `"sandbox_id"`) {
		t.Fatalf("sandbox_id on a bound call: %v %+v", err, res)
	}
	// A persistent terminal across calls.
	res, err = alice.CallTool(ctx, sb.ID, "shell_interactive", map[string]any{"action": "start"})
	if err != nil || res.IsError {
		t.Fatalf("terminal: %v %+v", err, res)
	}
	if _, err = alice.CallTool(ctx, sb.ID, "shell_interactive", map[string]any{"action": "send", "terminal": "t1", "input": "V=7"}); err != nil {
		t.Fatal(err)
	}
	res, err = alice.CallTool(ctx, sb.ID, "shell_interactive", map[string]any{"action": "send", "terminal": "t1", "input": "echo v=$V"})
	if err != nil || !strings.Contains(res.Text, "v=7") {
		t.Fatalf("terminal state: %v %+v", err, res)
	}

	// Protocol errors: unknown tool, another tenant's sandbox, bad body.
	if _, err := alice.CallTool(ctx, sb.ID, "no_such_tool", nil); !client.IsNotFound(err) {
		t.Errorf("unknown tool: %v", err)
	}
	if _, err := alice.CallTool(ctx, sb.ID, "sandbox_create", nil); !client.IsNotFound(err) {
		t.Errorf("sandbox_create under a sandbox: %v", err)
	}
	bob := d.sdk(t, mcpBobKey)
	if _, err := bob.CallTool(ctx, sb.ID, "file_read", map[string]any{"path": "f.txt"}); !client.IsNotFound(err) {
		t.Errorf("bob calls a tool in alice's sandbox: %v", err)
	}
	if code, body := d.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/tools/file_read", mcpAliceKey, "not json"); code != 400 {
		t.Errorf("bad body: %d %s", code, body)
	}
	if code, body := d.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/tools/file_read", mcpAliceKey, "{}", "Content-Type", "text/plain"); code != 400 {
		t.Errorf("text/plain body (browser guard): %d %s", code, body)
	}
}

// TestMCPSandboxEndpoint: /v1/sandboxes/{id}/mcp carries the sandbox's
// tools and those of an MCP server added with add_mcp_servers.
func TestMCPSandboxEndpoint(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice,"+mcpBobKey+":bob")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice := d.sdk(t, mcpAliceKey)
	sb, err := alice.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Delete(context.Background(), sb.ID)
	server, err := os.ReadFile(filepath.Join("..", "compat", "agentscope", "mcp_echo_server.py"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Upload(ctx, sb.ID, "/workspace/mcp_echo.py", bytes.NewReader(server), int64(len(server)), nil); err != nil {
		t.Fatal(err)
	}

	cs := mcpHTTP(t, d, mcpAliceKey, "/v1/sandboxes/"+sb.ID+"/mcp")
	checkToolList(t, cs, boundTools)
	mustTool(t, cs, "file_write", map[string]any{"path": "x.txt", "content": "bound"})
	if got, err := readFile(ctx, alice, sb.ID, "/workspace/x.txt"); err != nil || got != "bound" {
		t.Fatalf("the endpoint's tools act on its sandbox: %q %v", got, err)
	}

	// Add an MCP server to the sandbox (agentscope API): its tools join
	// the endpoint's list.
	cfg := map[string]any{"mcpServers": map[string]any{"echo": map[string]any{"command": "python3", "args": []string{"/workspace/mcp_echo.py"}}}}
	if code, body := d.call(t, "POST", "/add_mcp_servers", mcpAliceKey, map[string]any{"identity": sb.ID, "server_configs": cfg}); code != 200 {
		t.Fatalf("add_mcp_servers: %d %s", code, body)
	}
	checkToolList(t, cs, append(append([]string{}, boundTools...), "add", "echo"))
	if got := mustTool(t, cs, "echo", map[string]any{"text": "hi there"}); !strings.Contains(got, "hi there") {
		t.Errorf("echo through the sandbox endpoint: %q", got)
	}
	// The same server through function calling.
	listed, err := alice.ListSandboxTools(ctx, sb.ID)
	if err != nil || len(listed) != len(boundTools)+2 || listed[len(listed)-2].Name != "echo" && listed[len(listed)-1].Name != "echo" {
		t.Errorf("ListSandboxTools: %v %d tools", err, len(listed))
	}
	res, err := alice.CallTool(ctx, sb.ID, "add", map[string]any{"a": 2, "b": 3})
	if err != nil || res.IsError || !strings.Contains(res.Text, "5") {
		t.Errorf("add through function calling: %v %+v", err, res)
	}

	// Another tenant cannot open the endpoint, with or without a session.
	hc := &http.Client{Transport: bearer{key: mcpBobKey, base: http.DefaultTransport}}
	req, _ := http.NewRequest("POST", d.url+"/v1/sandboxes/"+sb.ID+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("bob opens alice's sandbox endpoint: %d", resp.StatusCode)
	}
	// And a page in a browser cannot drive /mcp: a foreign Origin on a
	// keyed server is allowed only with the key, a preview origin never;
	// a text/plain POST is refused.
	code, _ := d.call(t, "POST", "/mcp", mcpAliceKey, `{}`, "Content-Type", "text/plain")
	if code != 400 {
		t.Errorf("text/plain POST to /mcp: %d", code)
	}
}

func readFile(ctx context.Context, c *client.Client, id, path string) (string, error) {
	rc, _, err := c.Download(ctx, id, path)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(rc)
	return b.String(), err
}
