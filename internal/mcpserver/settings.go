package mcpserver

import "time"

// Settings are the tool kit's MCP settings (internal/settings). The daemon
// gives them to HTTPConfig.
type Settings struct {
	MCPSessionTimeout time.Duration `env:"MCP_SESSION_TIMEOUT" envDefault:"1800" help:"seconds an MCP session (/mcp) may stay idle before it ends and its sandboxes are destroyed, 0 = never"`
	MCPTemplate       string        `env:"MCP_TEMPLATE" envDefault:"" help:"template of the sandbox an MCP session (/mcp) creates on first use (default: the server's default template)"`
}
