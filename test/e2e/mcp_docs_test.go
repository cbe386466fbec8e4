package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

// The snippets of docs/mcp.md and docs/function-calling.md, run as
// written (placeholders replaced by the test daemon's address and key).

// docBlocks returns the fenced code blocks of a language in a doc.
func docBlocks(t *testing.T, doc, lang string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", doc))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("no %s block in docs/%s", lang, doc)
	}
	return out
}

func TestDocsMCPConfigs(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice")
	bin, _ := binaries(t)
	blocks := docBlocks(t, "mcp.md", "json")
	if len(blocks) != 2 {
		t.Fatalf("want the stdio and HTTP configs, got %d json blocks", len(blocks))
	}
	for _, block := range blocks {
		block = strings.ReplaceAll(block, "http://127.0.0.1:8000", d.url)
		block = strings.ReplaceAll(block, "your-api-key", mcpAliceKey)
		var cfg struct {
			MCPServers map[string]struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
				Type    string            `json:"type"`
				URL     string            `json:"url"`
				Headers map[string]string `json:"headers"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(block), &cfg); err != nil {
			t.Fatalf("doc config is not JSON: %v\n%s", err, block)
		}
		srv, ok := cfg.MCPServers["agentbox"]
		if !ok {
			t.Fatalf("no agentbox server in %s", block)
		}
		var transport mcp.Transport
		switch {
		case srv.Command != "":
			if srv.Command != "agentbox" {
				t.Fatalf("command %q", srv.Command)
			}
			cmd := exec.Command(bin, srv.Args...)
			cmd.Env = cleanEnv()
			for k, v := range srv.Env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			transport = &mcp.CommandTransport{Command: cmd}
		case srv.Type == "http":
			hc := &http.Client{Transport: headerRT{headers: srv.Headers}}
			transport = &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: -1}
		default:
			t.Fatalf("unknown config %s", block)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "docs", Version: "1"}, nil).Connect(ctx, transport, nil)
		cancel()
		if err != nil {
			t.Fatalf("connect with the doc's config: %v\n%s", err, block)
		}
		if got := mustTool(t, cs, "shell_exec", map[string]any{"command": "echo from-docs"}); got != "from-docs\n" {
			t.Errorf("shell_exec through the doc's config: %q", got)
		}
		id := sessionSandbox(t, cs)
		cs.Close()
		waitSandboxGone(t, d.sdk(t, mcpAliceKey), id)
	}
}

type headerRT struct{ headers map[string]string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestDocsFunctionCallingLoop runs the Python loop of
// docs/function-calling.md against the daemon and a scripted
// OpenAI-compatible endpoint that asks for run_code once.
func TestDocsFunctionCallingLoop(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	if exec.Command("python3", "-c", "import requests").Run() != nil {
		t.Skip("python3-requests not installed (scripts/install-deps.sh installs it)")
	}
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice")
	var mu sync.Mutex
	var toolResult string
	var gotTools bool
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []map[string]any `json:"messages"`
			Tools    []struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" ||
			json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", 400)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, tl := range req.Tools {
			if tl.Type == "function" && tl.Function.Name == "run_code" {
				gotTools = true
			}
		}
		last := req.Messages[len(req.Messages)-1]
		var msg map[string]any
		if last["role"] == "tool" {
			toolResult, _ = last["content"].(string)
			msg = map[string]any{"role": "assistant", "content": "The answer is " + strings.TrimSpace(strings.TrimPrefix(toolResult, "[stdout]\n")) + "."}
		} else {
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function",
				"function": map[string]any{"name": "run_code", "arguments": `{"code": "print(6 * 7)"}`}}}}
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": msg}}})
	}))
	defer llm.Close()

	script := filepath.Join(t.TempDir(), "loop.py")
	if err := os.WriteFile(script, []byte(docBlocks(t, "function-calling.md", "python")[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", script)
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+mcpAliceKey,
		"OPENAI_BASE_URL="+llm.URL+"/v1", "OPENAI_API_KEY=sk-test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the doc's loop: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if !gotTools || !strings.Contains(toolResult, "42") || strings.TrimSpace(string(out)) != "The answer is 42." {
		t.Fatalf("loop output %q, tool result %q, tools sent %v", out, toolResult, gotTools)
	}
	// The loop deleted its sandbox.
	page, err := d.sdk(t, mcpAliceKey).List(context.Background(), client.ListOptions{})
	if err != nil || len(page.Sandboxes) != 0 {
		t.Errorf("sandboxes left: %v %v", page, err)
	}
}
