// Package agentscope serves agentscope-runtime's sandbox-server protocol
// (see shared/protocols/agentscope.md) over the manager, on the same port
// as the native API: the manager routes (POST /create, /call_tool, ...
// each with an _async twin), GET /health, and /proxy/{id}/... which serves
// the sandbox's own HTTP API (tools, MCP, git watcher, workspace files).
//
// The sandbox's own HTTP API is implemented here, in the daemon, on top of
// the in-sandbox agent (files, processes): there is no second server inside
// the sandbox. Everything that runs code (shell, Python, git, stdio MCP
// servers) runs inside the sandbox through the agent.
//
// Records of sandboxes created through this front-end (their type, session,
// state, workspace paths) are kept in memory here; the live ones are also
// stored in the manager's records (Extra), so a restarted daemon still finds
// them. Released, recycled and replaced records stay answerable for a
// bounded time.
package agentscope
