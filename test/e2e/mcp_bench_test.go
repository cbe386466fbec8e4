package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

// BenchmarkMCPRunCode measures a round trip of run_code `1+1` through
// MCP (streamable HTTP at /mcp, and stdio through agentbox mcp) and
// through function calling, against the same code run straight through
// the API (POST /v1/sandboxes/{id}/code with the Go SDK), alternating
// the four in each iteration so they see the same load
// (docs/benchmarks.md):
//
//	go test -run '^$' -bench MCPRunCode -benchtime 200x ./test/e2e/
func BenchmarkMCPRunCode(b *testing.B) {
	url := startBenchDaemon(b)
	ctx := context.Background()
	sdk, err := client.New(url)
	if err != nil {
		b.Fatal(err)
	}
	sb, err := sdk.Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer sdk.Delete(context.Background(), sb.ID)

	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	httpSession, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: http.DefaultClient, MaxRetries: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer httpSession.Close()
	cmd := exec.Command(os.Getenv("AGENTBOX_BIN"), "mcp")
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+url)
	stdioSession, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer stdioSession.Close()

	mcpCall := func(cs *mcp.ClientSession) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "1+1"}})
		if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "2") {
			b.Fatalf("run_code over MCP: %v %+v", err, res)
		}
	}
	runs := map[string]func(){
		"api": func() {
			res, err := sdk.RunCode(ctx, sb.ID, client.CodeRequest{Code: "1+1"})
			if err != nil || len(res.Results) == 0 || res.Results[0].Text != "2" {
				b.Fatalf("run code: %v %+v", err, res)
			}
		},
		"function-call": func() {
			res, err := sdk.CallTool(ctx, sb.ID, "run_code", map[string]any{"code": "1+1"})
			if err != nil || res.IsError || !strings.Contains(res.Text, "2") {
				b.Fatalf("function call: %v %+v", err, res)
			}
		},
		"mcp-http":  func() { mcpCall(httpSession) },
		"mcp-stdio": func() { mcpCall(stdioSession) },
	}
	order := []string{"api", "function-call", "mcp-http", "mcp-stdio"}
	for _, name := range order { // warm up: sessions' sandboxes, interpreters
		runs[name]()
	}
	samples := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, name := range order {
			start := time.Now()
			runs[name]()
			samples[name] = append(samples[name], time.Since(start))
		}
	}
	b.StopTimer()
	for _, name := range order {
		b.ReportMetric(quantileMs(samples[name], 0.5), name+"-p50-ms")
		b.ReportMetric(quantileMs(samples[name], 0.99), name+"-p99-ms")
	}
}
