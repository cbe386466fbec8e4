package agentscope

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// MCP servers added with add_mcp_servers. A stdio server is a process
// started inside the sandbox through the agent, with its stdin kept open;
// the daemon is its MCP client. An HTTP server (type "sse" or
// "streamable_http") is reached from inside the sandbox's network
// namespace: the daemon dials as if it were the sandbox, so the URL means
// what it would mean to code in the sandbox (its loopback, or the outside
// world only as far as the sandbox's egress policy allows), and the daemon
// never becomes a proxy into the operator's network.

const mcpConnectTimeout = 30 * time.Second

// maxMCPServers bounds the servers of one sandbox.
const maxMCPServers = 32

// mcpGroup is one sandbox's MCP servers, by name.
type mcpGroup struct {
	mu      sync.Mutex
	servers map[string]*mcp.ClientSession
}

func (s *Server) mcpGroupOf(id sandbox.ID) *mcpGroup {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	return s.mcps[id]
}

// sessions returns the group's sessions sorted by server name.
func (g *mcpGroup) sessions() ([]string, []*mcp.ClientSession) {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := sortedKeys(g.servers)
	out := make([]*mcp.ClientSession, len(names))
	for i, n := range names {
		out[i] = g.servers[n]
	}
	return names, out
}

// listTools lists each server's tools as a group named after the server.
func (g *mcpGroup) listTools(ctx context.Context) (map[string][]toolSpec, error) {
	names, sessions := g.sessions()
	out := map[string][]toolSpec{}
	for i, cs := range sessions {
		var specs []toolSpec
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("list tools of MCP server %s: %w", names[i], err)
			}
			params, _ := t.InputSchema.(map[string]any)
			if params == nil {
				raw, _ := json.Marshal(t.InputSchema)
				_ = json.Unmarshal(raw, &params)
			}
			specs = append(specs, toolSpec{Name: t.Name, Description: t.Description, Parameters: params})
		}
		out[names[i]] = specs
	}
	return out, nil
}

// callTool calls the tool on the first server (by name) that has it. ok is
// false when no server has it.
func (g *mcpGroup) callTool(ctx context.Context, name string, args map[string]any) (map[string]any, bool, error) {
	names, sessions := g.sessions()
	for i, cs := range sessions {
		has := false
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return toolError("list tools of MCP server %s: %v", names[i], err), true, nil
			}
			if t.Name == name {
				has = true
				break
			}
		}
		if !has {
			continue
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return toolError("%v", err), true, nil
		}
		return normalizeResult(res), true, nil
	}
	return nil, false, nil
}

// normalizeResult renders an MCP result in the shape agentscope's Python
// side dumps it: "meta" and "isError" always present, content items with
// "annotations".
func normalizeResult(res *mcp.CallToolResult) map[string]any {
	raw, err := json.Marshal(res)
	out := map[string]any{}
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	if err != nil {
		return toolError("decode MCP result: %v", err)
	}
	out["meta"] = out["_meta"]
	delete(out, "_meta")
	out["isError"] = res.IsError
	content, _ := out["content"].([]any)
	if content == nil {
		content = []any{}
	}
	for _, c := range content {
		if m, ok := c.(map[string]any); ok {
			if _, ok := m["annotations"]; !ok {
				m["annotations"] = nil
			}
		}
	}
	out["content"] = content
	return out
}

func (g *mcpGroup) close() {
	g.mu.Lock()
	servers := g.servers
	g.servers = map[string]*mcp.ClientSession{}
	g.mu.Unlock()
	for _, cs := range servers {
		_ = cs.Close()
	}
}

// mcpConfig is one entry of server_configs.mcpServers.
type mcpConfig struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// apiAddMCPServers is POST /add_mcp_servers.
func (s *Server) apiAddMCPServers(ctx context.Context, c *call) (any, error) {
	identity, err := identityArg(c)
	if err != nil {
		return nil, err
	}
	configs, err := c.object("server_configs")
	if err != nil {
		return nil, err
	}
	overwrite, err := c.boolean("overwrite")
	if err != nil {
		return nil, err
	}
	r, err := s.touch(ctx, c, identity)
	if err != nil {
		return nil, err
	}
	ctx, done, err := s.begin(ctx, r)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.addMCPServers(ctx, r, configs, overwrite); err != nil {
		return nil, err
	}
	return "OK", nil
}

// addMCPServers connects the servers of configs ({"mcpServers": {name:
// cfg}}) to r. An existing server of the same name is kept unless
// overwrite.
func (s *Server) addMCPServers(ctx context.Context, r *record, configs map[string]any, overwrite bool) error {
	servers, ok := configs["mcpServers"].(map[string]any)
	if !ok {
		return fmt.Errorf("server_configs must be {\"mcpServers\": {name: config}}")
	}
	s.procMu.Lock()
	g := s.mcps[r.ID]
	if g == nil {
		g = &mcpGroup{servers: map[string]*mcp.ClientSession{}}
		s.mcps[r.ID] = g
	}
	s.procMu.Unlock()
	for _, name := range sortedKeys(servers) {
		raw, _ := json.Marshal(servers[name])
		var cfg mcpConfig
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("MCP server %s: bad config: %v", name, err)
		}
		g.mu.Lock()
		old, exists := g.servers[name]
		full := len(g.servers) >= maxMCPServers
		g.mu.Unlock()
		if exists && !overwrite {
			continue
		}
		if !exists && full {
			return fmt.Errorf("MCP server %s: a sandbox has at most %d MCP servers", name, maxMCPServers)
		}
		cs, err := s.connectMCP(ctx, r, name, cfg)
		if err != nil {
			return fmt.Errorf("MCP server %s: %w", name, err)
		}
		g.mu.Lock()
		g.servers[name] = cs
		g.mu.Unlock()
		if exists {
			_ = old.Close()
		}
		s.log.Info("agentscope MCP server added", "sandbox", r.Name, "server", name)
	}
	return nil
}

// connectMCP starts or reaches one server and initialises the session.
func (s *Server) connectMCP(ctx context.Context, r *record, name string, cfg mcpConfig) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agentbox", Version: s.cfg.Version}, nil)
	cctx, cancel := context.WithTimeout(ctx, mcpConnectTimeout)
	defer cancel()
	if cfg.Command != "" {
		// The server outlives this call: started under the daemon's own
		// request, bound to the front end's life.
		dr, done, err := s.work(s.ctx, r)
		if err != nil {
			return nil, err
		}
		defer done()
		proc, err := startPipeProc(s.ctx, dr, dataplane.StartOptions{
			Cmd: cfg.Command, Args: cfg.Args, Env: cfg.Env, Cwd: workspaceRoot,
		})
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", cfg.Command, err)
		}
		cs, err := client.Connect(cctx, &mcp.IOTransport{Reader: stdoutCloser{proc}, Writer: stdinCloser{proc}}, nil)
		if err != nil {
			msg := proc.Stderr()
			proc.Close()
			return nil, fmt.Errorf("initialize: %w (stderr: %s)", err, msg)
		}
		return cs, nil
	}
	if cfg.URL == "" {
		return nil, fmt.Errorf("config needs a command (stdio) or a url")
	}
	hc, err := s.sandboxHTTPClient(ctx, r.ID, cfg.Headers)
	if err != nil {
		return nil, err
	}
	var t mcp.Transport
	switch cfg.Type {
	case "streamable_http", "streamableHttp", "streamable-http", "http":
		t = &mcp.StreamableClientTransport{Endpoint: cfg.URL, HTTPClient: hc, MaxRetries: -1}
	case "sse", "":
		t = &mcp.SSEClientTransport{Endpoint: cfg.URL, HTTPClient: hc}
	default:
		return nil, fmt.Errorf("unknown MCP server type %q (want sse or streamable_http)", cfg.Type)
	}
	cs, err := client.Connect(cctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.URL, err)
	}
	return cs, nil
}

// sandboxHTTPClient returns an HTTP client whose connections are made
// inside the sandbox's network namespace and that sends headers.
func (s *Server) sandboxHTTPClient(ctx context.Context, id sandbox.ID, headers map[string]string) (*http.Client, error) {
	info, err := s.m.Backend().Inspect(ctx, id)
	if err != nil {
		return nil, err
	}
	if info.Pid <= 0 {
		return nil, fmt.Errorf("the sandbox's network namespace is not reachable from the daemon with this backend")
	}
	if info.Spec.Isolation == sandbox.IsolationGVisor {
		// Its network stack is gVisor's, inside the Sentry: no host
		// namespace holds its view, and the host pid is runsc's, whose
		// namespace is the host's own (dialing there would reach the
		// host's loopback). Refused, as previews are (no_ports).
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s runs at isolation gvisor, whose network stack the daemon cannot dial into (HTTP MCP servers inside it are unavailable; stdio ones work)", id)
	}
	netns := fmt.Sprintf("/proc/%d/ns/net", info.Pid)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return netpolicy.DialInNetns(ctx, netns, network, addr)
		},
		Proxy:               nil, // never the daemon's proxy settings
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: headerTransport{base: tr, headers: headers}}, nil
}

// headerTransport adds fixed headers (the server config's "headers").
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range h.headers {
			req.Header.Set(k, v)
		}
	}
	return h.base.RoundTrip(req)
}

var _ = sort.Strings
