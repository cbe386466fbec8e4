package agentscope

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The MCP servers added to a sandbox with add_mcp_servers are also offered
// on the sandbox's native MCP endpoint (/v1/sandboxes/{id}/mcp, package
// mcpserver): these two methods are its view of them. Both check that
// owner owns the sandbox.

// SandboxMCPTools lists the tools of the MCP servers added to owner's
// sandbox id, server by server in name order.
func (s *Server) SandboxMCPTools(ctx context.Context, owner, id string) ([]*mcp.Tool, error) {
	if _, err := s.m.Get(ctx, owner, sandbox.ID(id)); err != nil {
		return nil, err
	}
	g := s.mcpGroupOf(sandbox.ID(id))
	if g == nil {
		return nil, nil
	}
	names, sessions := g.sessions()
	var out []*mcp.Tool
	for i, cs := range sessions {
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("list tools of MCP server %s: %w", names[i], err)
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// CallSandboxMCPTool calls tool name on the first server of owner's
// sandbox id that has it; ok is false when none has.
func (s *Server) CallSandboxMCPTool(ctx context.Context, owner, id, name string, args any) (*mcp.CallToolResult, bool, error) {
	if _, err := s.m.Get(ctx, owner, sandbox.ID(id)); err != nil {
		return nil, false, err
	}
	g := s.mcpGroupOf(sandbox.ID(id))
	if g == nil {
		return nil, false, nil
	}
	names, sessions := g.sessions()
	for i, cs := range sessions {
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return nil, true, fmt.Errorf("list tools of MCP server %s: %w", names[i], err)
			}
			if t.Name != name {
				continue
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
			return res, true, err
		}
	}
	return nil, false, nil
}
