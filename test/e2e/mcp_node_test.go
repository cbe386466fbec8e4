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

// mcpSDKVersion is the official TypeScript MCP SDK the Node suite uses.
const mcpSDKVersion = "1.32.2"

// mcpNodeSDK installs @modelcontextprotocol/sdk from npm into the test
// cache (once) and returns its node_modules. It skips only when node or
// npm is missing or npm cannot reach its registry.
func mcpNodeSDK(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/install-deps.sh installs it)", tool)
		}
	}
	cache := os.Getenv("AGENTBOX_TEST_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "agentbox-test")
	}
	dir := filepath.Join(cache, "mcp-sdk-"+mcpSDKVersion)
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "@modelcontextprotocol", "sdk", "package.json")); err == nil {
		return modules
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "@modelcontextprotocol/sdk@"+mcpSDKVersion,
		"--no-audit", "--no-fund", "--loglevel=error")
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "ENOTFOUND") || strings.Contains(string(out), "EAI_AGAIN") || strings.Contains(string(out), "ECONNREFUSED") {
			t.Skipf("npm cannot reach its registry: %s", out)
		}
		t.Fatalf("npm install @modelcontextprotocol/sdk@%s: %v\n%s", mcpSDKVersion, err, out)
	}
	return modules
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
