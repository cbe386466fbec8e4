package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mcpSDKPackage is the official TypeScript MCP SDK the Node suite uses.
const mcpSDKPackage = "@modelcontextprotocol/sdk@1.32.2"

// mcpNodeSDK installs the MCP SDK from npm into the test cache (once) and
// returns its node_modules.
func mcpNodeSDK(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := filepath.Join(testCache(t), "mcp-sdk-"+mcpSDKPackage[strings.LastIndex(mcpSDKPackage, "@")+1:])
	return filepath.Join(npmPackages(t, ctx, dir, mcpSDKPackage), "node_modules")
}

// TestMCPNodeSDK drives agentbox mcp (stdio) and /mcp (HTTP) with the
// official TypeScript SDK (test/e2e/testdata/mcp_client.mjs).
func TestMCPNodeSDK(t *testing.T) {
	modules := mcpNodeSDK(t)
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice")
	bin, _ := binaries(t)
	script, err := filepath.Abs(filepath.Join("testdata", "mcp_client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// ESM resolves packages from the script's directory upwards, not
	// NODE_PATH: run a copy placed next to the SDK's node_modules.
	runner := filepath.Join(filepath.Dir(modules), "mcp_client.mjs")
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runner, src, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", runner)
			cmd.Env = append(cleanEnv(), "MCP_MODE="+mode, "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+mcpAliceKey, "AGENTBOX_BIN="+bin)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node suite (%s): %v\n%s", mode, err, out)
			}
			if !strings.Contains(string(out), `"ok":true`) {
				t.Fatalf("node suite (%s) did not report success:\n%s", mode, out)
			}
			t.Logf("%s", strings.TrimSpace(string(out)))
		})
	}
}
