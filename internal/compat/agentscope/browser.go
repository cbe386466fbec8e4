package agentscope

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// agentscope's browser sandbox type: its browser_* tools are Playwright's
// MCP server's (@playwright/mcp, as in agentscope's own browser image),
// which the browser template installs pinned (templates/browser/
// browser-mcp). The server runs inside the sandbox as a stdio MCP server,
// started on the first tool use and attached over CDP to the template's
// Chromium, the one on the sandbox's screen; the daemon is its MCP client,
// exactly as for a server added with add_mcp_servers. Its results (the
// accessibility snapshot with element refs, screenshots as image content)
// pass through unchanged.

const groupBrowser = "browser"

// browserMCPCommand starts the template's Playwright MCP server attached to
// its Chromium (DevTools on the sandbox's loopback, templates/browser).
var browserMCPCommand = mcpConfig{
	Command: "node",
	Args: []string{"/opt/agentbox/browser-mcp/node_modules/@playwright/mcp/cli.js",
		"--cdp-endpoint", "http://127.0.0.1:9222"},
}

// browserTools are the tools of agentscope's BrowserSandbox: the server's
// others (browser_install downloads a browser, browser_generate_playwright_test
// is for test authoring) are not offered.
var browserTools = []string{
	"browser_close", "browser_resize", "browser_console_messages", "browser_handle_dialog",
	"browser_file_upload", "browser_press_key", "browser_navigate", "browser_navigate_back",
	"browser_navigate_forward", "browser_network_requests", "browser_pdf_save",
	"browser_take_screenshot", "browser_snapshot", "browser_click", "browser_drag",
	"browser_hover", "browser_type", "browser_select_option", "browser_tab_list",
	"browser_tab_new", "browser_tab_select", "browser_tab_close", "browser_wait_for",
}

// browserConn is one sandbox's Playwright MCP server; mu serialises its
// start (two first calls start one server).
type browserConn struct {
	mu sync.Mutex
	cs *mcp.ClientSession
}

// browserConns holds the servers by sandbox.
type browserConns struct {
	mu    sync.Mutex
	conns map[sandbox.ID]*browserConn
}

func (b *browserConns) get(id sandbox.ID) *browserConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		b.conns = map[sandbox.ID]*browserConn{}
	}
	c := b.conns[id]
	if c == nil {
		c = &browserConn{}
		b.conns[id] = c
	}
	return c
}

// stop ends id's server (the sandbox is going away).
func (b *browserConns) stop(id sandbox.ID) bool {
	b.mu.Lock()
	c := b.conns[id]
	delete(b.conns, id)
	b.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		if c.cs != nil {
			_ = c.cs.Close()
			c.cs = nil
		}
		c.mu.Unlock()
	}
	return c != nil
}

// stopAll ends every server (shutdown).
func (b *browserConns) stopAll() {
	b.mu.Lock()
	ids := make([]sandbox.ID, 0, len(b.conns))
	for id := range b.conns {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.stop(id)
	}
}

// hasBrowserTools reports whether sandboxes of type typ have the browser_*
// tools.
func hasBrowserTools(typ string) bool { return typ == "browser" }

// browserSession returns r's Playwright MCP session, starting the server on
// first use.
func (s *Server) browserSession(ctx context.Context, r *record) (*mcp.ClientSession, error) {
	c := s.browsers.get(r.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs != nil {
		return c.cs, nil
	}
	cs, err := s.connectMCP(ctx, r, groupBrowser, browserMCPCommand)
	if err != nil {
		return nil, fmt.Errorf("start the browser's MCP server (is sandbox %s of the browser template? docs/agentscope.md): %w", r.Name, err)
	}
	c.cs = cs
	s.log.Info("agentscope browser tools started", "sandbox", r.Name)
	return cs, nil
}

// prestartBrowser starts r's Playwright MCP server in the background right
// after the create, so the node process is up by the time the agent's
// first browser call comes (an agent usually thinks between the two).
// Failures are left to that call, which retries and reports them.
func (s *Server) prestartBrowser(r *record) {
	if !hasBrowserTools(r.Type) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, mcpConnectTimeout)
		defer cancel()
		if _, err := s.browserSession(ctx, r); err != nil {
			s.log.Debug("agentscope browser tools: early start failed", "sandbox", r.Name, "err", err)
		}
	}()
}

// dropBrowserSession forgets cs (it failed): the next call starts a new
// server.
func (s *Server) dropBrowserSession(id sandbox.ID, cs *mcp.ClientSession) {
	s.browsers.mu.Lock()
	c := s.browsers.conns[id]
	s.browsers.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		if c.cs == cs {
			c.cs = nil
		}
		c.mu.Unlock()
	}
	_ = cs.Close()
}

// browserToolSpecs lists r's browser tools as the server describes them.
func (s *Server) browserToolSpecs(ctx context.Context, r *record) ([]toolSpec, error) {
	cs, err := s.browserSession(ctx, r)
	if err != nil {
		return nil, err
	}
	g := &mcpGroup{servers: map[string]*mcp.ClientSession{groupBrowser: cs}}
	groups, err := g.listTools(ctx)
	if err != nil {
		s.dropBrowserSession(r.ID, cs)
		return nil, err
	}
	var out []toolSpec
	for _, t := range groups[groupBrowser] {
		if slices.Contains(browserTools, t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// callBrowserTool calls a browser_* tool of r. ok is false when name is
// not one.
func (s *Server) callBrowserTool(ctx context.Context, r *record, name string, args map[string]any) (map[string]any, bool) {
	if !hasBrowserTools(r.Type) || !slices.Contains(browserTools, name) {
		return nil, false
	}
	cs, err := s.browserSession(ctx, r)
	if err != nil {
		return toolError("%v", err), true
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: browserArgs(name, args)})
	if err != nil {
		if ctx.Err() == nil {
			// The server is gone or broken: start afresh next time.
			s.dropBrowserSession(r.ID, cs)
		}
		return toolError("%v", err), true
	}
	return normalizeResult(res), true
}

// optionalStrings are the optional string arguments of browser tools that
// agentscope's client sends as "" when left out.
var optionalStrings = map[string][]string{
	"browser_take_screenshot": {"filename", "element", "ref"},
	"browser_pdf_save":        {"filename"},
	"browser_tab_new":         {"url"},
	"browser_wait_for":        {"text", "textGone"},
}

// browserArgs drops what agentscope's client sends for an argument it
// leaves out: null (browser_wait_for's time, browser_tab_close's index),
// which the server's schemas refuse, and "" for the optional strings above,
// which the server would take literally (a file named "", an element
// screenshot without an element).
func browserArgs(name string, args map[string]any) map[string]any {
	out := make(map[string]any, len(args))
	for k, v := range args {
		if v == nil || (v == "" && slices.Contains(optionalStrings[name], k)) {
			continue
		}
		out[k] = v
	}
	return out
}

// desktopTypeHint explains a missing template of the browser and gui
// types (SANDBOX_TEMPLATES maps them to the browser and desktop templates
// by default).
func desktopTypeHint(typ string, err error) error {
	if (typ == "browser" || typ == "gui") && sandbox.IsNotFound(err) {
		doc := map[string]string{"browser": "docs/browser.md", "gui": "docs/desktop.md"}[typ]
		return fmt.Errorf("sandbox type '%s' needs its template (SANDBOX_TEMPLATES), which this server does not have: build it with `make templates` (%s): %w", typ, doc, err)
	}
	return err
}
