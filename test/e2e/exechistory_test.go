package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/agentbox/agentbox/api/proto/process"
)

const historyKey = "history-alice-key"

// TestExecHistoryOnEveryDoor: a command run through each door — the
// native exec, agentscope's run_shell_command, E2B's envd protocol (both
// codecs, as the SDKs send them), Daytona's toolbox, function calling and
// the sandbox's MCP endpoint — is in GET /v1/sandboxes/{id}/execs with
// its exit code and its user; an E2B terminal (a Start with a PTY) and a
// command that never started are not.
func TestExecHistoryOnEveryDoor(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+historyKey+":alice")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	auth := []string{"Authorization", "Bearer " + historyKey}

	// One sandbox made through E2B: E2B's commands go to it, and the
	// other doors take its ID (every door sees every sandbox of its user).
	status, data := d.call(t, "POST", "/sandboxes", "", map[string]any{"templateID": "base", "timeout": 600}, "X-API-Key", historyKey)
	var sb struct{ SandboxID, EnvdAccessToken string }
	if err := json.Unmarshal(data, &sb); status != 201 || err != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("e2b create: %d %s", status, data)
	}
	t.Cleanup(func() { d.call(t, "DELETE", "/sandboxes/"+sb.SandboxID, "", nil, "X-API-Key", historyKey) })
	id := sb.SandboxID

	envd := func(contentType string, msg []byte) string {
		var env bytes.Buffer
		env.WriteByte(0)
		_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
		env.Write(msg)
		req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/process.Process/Start", &env)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("envd Start (%s): %d %s", contentType, resp.StatusCode, body)
		}
		return string(body)
	}
	jsonStart, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "exit 11"}}})
	if out := envd("application/connect+json", jsonStart); !bytes.Contains([]byte(out), []byte(`"exitCode":11`)) {
		t.Fatalf("envd json Start: %s", out)
	}
	protoStart, _ := proto.Marshal(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo from-proto; exit 12"}}})
	envd("application/connect+proto", protoStart)
	// Not commands of the history: a terminal, and an executable that is not there.
	ptyStart, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "exit 13"}},
		"pty": map[string]any{"size": map[string]any{"cols": 80, "rows": 24}}})
	envd("application/connect+json", ptyStart)
	missing, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/no/such/program"}})
	envd("application/connect+json", missing)

	if s, body, _, err := post(ctx, d.url+"/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"sh", "-c", "exit 21"}}, auth...); err != nil || s != 200 {
		t.Fatalf("v1 exec: %d %v %s", s, err, body)
	}
	if s, body, _, err := post(ctx, d.url+"/proxy/"+id+"/tools/run_shell_command", map[string]any{"command": "exit 22"}, auth...); err != nil || s != 200 {
		t.Fatalf("agentscope run_shell_command: %d %v %s", s, err, body)
	}
	if s, body, _, err := post(ctx, d.url+"/api/toolbox/"+id+"/process/execute", map[string]any{"command": "sh -c 'exit 23'"}, auth...); err != nil || s != 200 {
		t.Fatalf("daytona execute: %d %v %s", s, err, body)
	}
	if s, body, _, err := post(ctx, d.url+"/v1/sandboxes/"+id+"/tools/shell_exec", map[string]any{"command": "exit 24"}, auth...); err != nil || s != 200 {
		t.Fatalf("function calling shell_exec: %d %v %s", s, err, body)
	}
	cs := mcpHTTP(t, d, historyKey, "/v1/sandboxes/"+id+"/mcp")
	callTool(t, cs, "shell_exec", map[string]any{"command": "exit 25"})

	s, body := d.call(t, "GET", "/v1/sandboxes/"+id+"/execs", historyKey, nil)
	var hist struct {
		Execs []struct {
			Cmd      string `json:"cmd"`
			User     string `json:"user"`
			ExitCode int    `json:"exit_code"`
			Error    string `json:"error"`
		} `json:"execs"`
	}
	if err := json.Unmarshal(body, &hist); s != 200 || err != nil {
		t.Fatalf("execs: %d %v %s", s, err, body)
	}
	codes := map[int]string{}
	for _, e := range hist.Execs {
		t.Logf("history: %d %q %s %s", e.ExitCode, e.Cmd, e.User, e.Error)
		if e.User != "alice" {
			t.Errorf("%q recorded as run by %q, want alice", e.Cmd, e.User)
		}
		if e.Cmd == "/no/such/program" {
			t.Errorf("a command that never started is in the history: %+v", e)
		}
		codes[e.ExitCode] = e.Cmd
	}
	for code, door := range map[int]string{11: "E2B (connect+json)", 12: "E2B (connect+proto)", 21: "native exec",
		22: "agentscope run_shell_command", 23: "Daytona toolbox", 24: "function calling", 25: "MCP"} {
		if _, ok := codes[code]; !ok {
			t.Errorf("the command run through %s (exit %d) is not in the history", door, code)
		}
	}
	if c, ok := codes[12]; ok && c != "/bin/sh -c echo from-proto; exit 12" {
		t.Errorf("E2B's command recorded as %q", c)
	}
	if _, ok := codes[13]; ok {
		t.Error("an E2B terminal (a Start with a PTY) is in the history")
	}
	if t.Failed() {
		t.Log(string(body))
	}
}
