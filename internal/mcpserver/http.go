package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/tools"
)

// SandboxServers are the MCP servers added to a sandbox (agentscope's
// add_mcp_servers), whose tools the per-sandbox endpoint also offers.
type SandboxServers interface {
	// SandboxMCPTools lists the tools of owner's sandbox id's servers.
	SandboxMCPTools(ctx context.Context, owner, id string) ([]*mcp.Tool, error)
	// CallSandboxMCPTool calls one; ok is false when no server has it.
	CallSandboxMCPTool(ctx context.Context, owner, id, name string, args any) (res *mcp.CallToolResult, ok bool, err error)
}

// HTTPConfig configures the daemon's MCP and function-calling service.
type HTTPConfig struct {
	// NewClient returns an API client acting with the caller's API key
	// (empty on a keyless server), addressing the server as host (the
	// Host the caller used, so URLs the server makes, such as previews,
	// are the caller's).
	NewClient func(apiKey, host string) (*client.Client, error)
	// Verify maps an API key to its user; nil when the server has no keys.
	Verify func(key string) (string, error)
	// SessionTimeout ends MCP sessions idle this long (and destroys their
	// sandboxes); zero means never.
	SessionTimeout time.Duration
	// Create is the request for a session's sandbox.
	Create client.CreateRequest
	// Servers, if set, adds the sandbox's own MCP servers to the
	// per-sandbox endpoint.
	Servers SandboxServers
	Logger  *slog.Logger
}

// HTTP is the daemon's tool service: /mcp, /v1/sandboxes/{id}/mcp,
// GET /v1/tools and POST /v1/sandboxes/{id}/tools/{name}.
type HTTP struct {
	cfg     HTTPConfig
	kit     *tools.Kit
	log     *slog.Logger
	session *Server
	handler http.Handler

	mu    sync.Mutex
	bound map[string]*boundEndpoint // by owner + "\x00" + sandbox id

	sessMu   sync.Mutex
	sessions map[string]int              // live MCP sessions by user
	counted  map[*mcp.ServerSession]bool // sessions already counted
}

// MaxSessionsPerUser bounds a user's live MCP sessions on the daemon (each
// holds memory until it ends or idles out).
const MaxSessionsPerUser = 100

type boundEndpoint struct {
	srv      *Server
	handler  http.Handler
	lastUsed time.Time
}

// NewHTTP returns the service.
func NewHTTP(cfg HTTPConfig) *HTTP {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &HTTP{cfg: cfg, kit: tools.New(), log: cfg.Logger.With("component", "mcp"), bound: map[string]*boundEndpoint{},
		sessions: map[string]int{}, counted: map[*mcp.ServerSession]bool{}}
	h.session = New(h.kit, tools.SessionMode, func(ctx context.Context, extra *mcp.RequestExtra) (*tools.Session, error) {
		user, key, host := identity(extra)
		c, err := cfg.NewClient(key, host)
		if err != nil {
			return nil, err
		}
		return h.kit.NewSession(c, tools.SessionOptions{Owner: user, Create: cfg.Create, Logger: h.log}), nil
	}, h.log)
	h.countSessions(h.session.MCP())
	h.handler = h.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.session.MCP() }, h.handlerOptions()))
	return h
}

// countSessions refuses an initialize beyond MaxSessionsPerUser live
// sessions of its user, and counts each session until it ends.
func (h *HTTP) countSessions(srv *mcp.Server) {
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "initialize" {
				return next(ctx, method, req)
			}
			ss, ok := req.GetSession().(*mcp.ServerSession)
			if !ok {
				return next(ctx, method, req)
			}
			user, _, _ := identity(req.GetExtra())
			h.sessMu.Lock()
			if h.counted[ss] {
				h.sessMu.Unlock()
				return next(ctx, method, req)
			}
			if h.sessions[user] >= MaxSessionsPerUser {
				h.sessMu.Unlock()
				return nil, fmt.Errorf("too many MCP sessions: at most %d per user; end the sessions you no longer use", MaxSessionsPerUser)
			}
			h.sessions[user]++
			h.counted[ss] = true
			h.sessMu.Unlock()
			go func() {
				_ = ss.Wait()
				h.sessMu.Lock()
				delete(h.counted, ss)
				if h.sessions[user]--; h.sessions[user] <= 0 {
					delete(h.sessions, user)
				}
				h.sessMu.Unlock()
			}()
			return next(ctx, method, req)
		}
	})
}

func (h *HTTP) handlerOptions() *mcp.StreamableHTTPOptions {
	return &mcp.StreamableHTTPOptions{
		SessionTimeout: h.cfg.SessionTimeout,
		Logger:         h.log,
		// Room for file_write's largest content in a JSON-RPC message.
		MaxRequestBodyBytes: 12 << 20,
		// The daemon's browser guard already refuses foreign hosts and
		// origins on every route; the SDK's own loopback-host rule would
		// also refuse a reverse proxy on the same host.
		DisableLocalhostProtection: true,
	}
}

// userHeader and hostHeader carry the caller's user and the Host it used
// to the tool sessions: set from the daemon's authentication and the
// request, never taken from the client (ServeMCP overwrites them on every
// request).
const (
	userHeader = "X-Agentbox-Internal-User"
	hostHeader = "X-Agentbox-Internal-Host"
)

// identity returns the user, API key and Host of an MCP request.
func identity(extra *mcp.RequestExtra) (user, key, host string) {
	if extra == nil || extra.Header == nil {
		return "", "", ""
	}
	user, host = extra.Header.Get(userHeader), extra.Header.Get(hostHeader)
	a := extra.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		key = strings.TrimSpace(a[7:])
	}
	return user, key, host
}

// wrap adds the session-owner check of the SDK (a session is only ever
// used by the user who started it) when the server has keys.
func (h *HTTP) wrap(next http.Handler) http.Handler {
	if h.cfg.Verify == nil {
		return next
	}
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, err := h.cfg.Verify(token)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	return auth.RequireBearerToken(verify, nil)(next)
}

// ServeMCP serves /mcp for an authenticated user.
func (h *HTTP) ServeMCP(w http.ResponseWriter, r *http.Request, user string) {
	r.Header.Set(userHeader, user)
	r.Header.Set(hostHeader, r.Host)
	h.handler.ServeHTTP(w, r)
}

// ServeSandboxMCP serves /v1/sandboxes/{id}/mcp for an authenticated user
// who owns sandbox id (the caller checked).
func (h *HTTP) ServeSandboxMCP(w http.ResponseWriter, r *http.Request, user, id string) {
	r.Header.Set(userHeader, user)
	r.Header.Set(hostHeader, r.Host)
	h.endpoint(user, id).ServeHTTP(w, r)
}

func (h *HTTP) endpoint(user, id string) http.Handler {
	key := user + "\x00" + id
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if e := h.bound[key]; e != nil {
		e.lastUsed = now
		return e.handler
	}
	// Drop endpoints unused for long: their sessions are closed (nothing
	// is destroyed, a bound session owns no sandbox).
	for k, e := range h.bound {
		if now.Sub(e.lastUsed) > max(h.cfg.SessionTimeout, time.Hour) {
			e.srv.CloseAll()
			delete(h.bound, k)
		}
	}
	srv := New(h.kit, tools.BoundMode, func(ctx context.Context, extra *mcp.RequestExtra) (*tools.Session, error) {
		_, apiKey, host := identity(extra)
		c, err := h.cfg.NewClient(apiKey, host)
		if err != nil {
			return nil, err
		}
		return h.kit.NewSession(c, tools.SessionOptions{Owner: user, Sandbox: id, Logger: h.log}), nil
	}, h.log)
	h.countSessions(srv.MCP())
	if h.cfg.Servers != nil {
		h.addServers(srv, user, id)
	}
	e := &boundEndpoint{srv: srv, lastUsed: now,
		handler: h.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, h.handlerOptions()))}
	h.bound[key] = e
	return e.handler
}

// addServers keeps the endpoint's list of the sandbox's MCP servers'
// tools current: it is refreshed before every tools/list.
func (h *HTTP) addServers(srv *Server, user, id string) {
	var mu sync.Mutex
	proxied := map[string]bool{}
	sync := func(ctx context.Context) {
		list, err := h.cfg.Servers.SandboxMCPTools(ctx, user, id)
		if err != nil {
			h.log.Warn("list the sandbox's MCP servers' tools", "sandbox", id, "err", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, t := range list {
			if h.kit.Has(tools.BoundMode, t.Name) || seen[t.Name] {
				continue // the kit's own tools win; the first server wins
			}
			seen[t.Name] = true
			name := t.Name
			tool := *t
			if tool.InputSchema == nil {
				tool.InputSchema = map[string]any{"type": "object"}
			}
			srv.MCP().AddTool(&tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var args any
				if len(req.Params.Arguments) > 0 {
					if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
						return errorResult("arguments must be a JSON object"), nil
					}
				}
				res, ok, err := h.cfg.Servers.CallSandboxMCPTool(ctx, user, id, name, args)
				switch {
				case err != nil:
					return errorResult(err.Error()), nil
				case !ok:
					return errorResult(fmt.Sprintf("tool %s is no longer offered by the sandbox's MCP servers", name)), nil
				}
				return res, nil
			})
		}
		var gone []string
		for n := range proxied {
			if !seen[n] {
				gone = append(gone, n)
			}
		}
		if len(gone) > 0 {
			srv.MCP().RemoveTools(gone...)
		}
		proxied = seen
	}
	srv.MCP().AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				sync(ctx)
			}
			return next(ctx, method, req)
		}
	})
}

// Close ends every MCP session (their sandboxes are destroyed) and the
// kit's terminals.
func (h *HTTP) Close() {
	h.session.closeAndWait()
	h.mu.Lock()
	bound := h.bound
	h.bound = map[string]*boundEndpoint{}
	h.mu.Unlock()
	for _, e := range bound {
		e.srv.closeAndWait()
	}
	h.kit.Close()
}

// ToolList returns GET /v1/tools's body: the tools that act on one
// sandbox, in format "anthropic" (default), "openai" or "mcp".
func (h *HTTP) ToolList(format string) (any, error) {
	return formatTools(h.kit.Defs(tools.BoundMode), format)
}

// SandboxToolList returns GET /v1/sandboxes/{id}/tools's body: the kit's
// tools and those of the MCP servers added to owner's sandbox id (a kit
// tool wins a name clash, as on the sandbox's MCP endpoint).
func (h *HTTP) SandboxToolList(ctx context.Context, user, id, format string) (any, error) {
	defs := h.kit.Defs(tools.BoundMode)
	if h.cfg.Servers != nil {
		list, err := h.cfg.Servers.SandboxMCPTools(ctx, user, id)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, t := range list {
			if h.kit.Has(tools.BoundMode, t.Name) || seen[t.Name] {
				continue
			}
			seen[t.Name] = true
			schema, _ := t.InputSchema.(map[string]any)
			if schema == nil {
				raw, _ := json.Marshal(t.InputSchema)
				_ = json.Unmarshal(raw, &schema)
			}
			if schema == nil {
				schema = map[string]any{"type": "object"}
			}
			defs = append(defs, tools.Def{Name: t.Name, Description: t.Description, InputSchema: schema})
		}
	}
	return formatTools(defs, format)
}

// ErrFormat is a format GET /v1/tools does not know.
var ErrFormat = errors.New("unknown format: want openai, anthropic or mcp")

func formatTools(defs []tools.Def, format string) (any, error) {
	out := make([]any, 0, len(defs))
	for _, d := range defs {
		switch format {
		case "", "anthropic":
			out = append(out, map[string]any{"name": d.Name, "description": d.Description, "input_schema": d.InputSchema})
		case "openai":
			out = append(out, map[string]any{"type": "function", "function": map[string]any{
				"name": d.Name, "description": d.Description, "parameters": d.InputSchema}})
		case "mcp":
			out = append(out, map[string]any{"name": d.Name, "description": d.Description, "inputSchema": d.InputSchema})
		default:
			return nil, fmt.Errorf("%w (got %q)", ErrFormat, format)
		}
	}
	return map[string]any{"tools": out}, nil
}

// ErrUnknownTool is returned by CallTool for a tool nobody offers.
var ErrUnknownTool = tools.ErrUnknownTool

// CallResult is POST /v1/sandboxes/{id}/tools/{name}'s body.
type CallResult struct {
	Content []tools.Content `json:"content"`
	IsError bool            `json:"is_error"`
	Text    string          `json:"text"`
}

// CallTool runs one tool in sandbox id for user (who owns it: the caller
// checked) with the caller's key: a kit tool, else a tool of the
// sandbox's MCP servers.
func (h *HTTP) CallTool(ctx context.Context, user, apiKey, host, id, name string, args json.RawMessage) (*CallResult, error) {
	if !h.kit.Has(tools.BoundMode, name) {
		if h.cfg.Servers != nil {
			var a any
			if len(args) > 0 {
				if err := json.Unmarshal(args, &a); err != nil {
					return nil, fmt.Errorf("arguments: %w", err)
				}
			}
			res, ok, err := h.cfg.Servers.CallSandboxMCPTool(ctx, user, id, name, a)
			if ok {
				if err != nil {
					res = errorResult(err.Error())
				}
				return fromMCP(res), nil
			}
		}
		return nil, fmt.Errorf("%w %q", ErrUnknownTool, name)
	}
	c, err := h.cfg.NewClient(apiKey, host)
	if err != nil {
		return nil, err
	}
	ts := h.kit.NewSession(c, tools.SessionOptions{Owner: user, Sandbox: id, Logger: h.log})
	res, err := ts.Call(ctx, name, args)
	if err != nil {
		return nil, err
	}
	return &CallResult{Content: res.Content, IsError: res.IsError, Text: res.Text()}, nil
}

// fromMCP converts an MCP server's result for function calling.
func fromMCP(res *mcp.CallToolResult) *CallResult {
	out := &CallResult{IsError: res.IsError}
	var texts []string
	for _, c := range res.Content {
		switch v := c.(type) {
		case *mcp.TextContent:
			out.Content = append(out.Content, tools.Content{Type: "text", Text: v.Text})
			texts = append(texts, v.Text)
		case *mcp.ImageContent:
			raw, _ := json.Marshal(v.Data)
			out.Content = append(out.Content, tools.Content{Type: "image", Data: strings.Trim(string(raw), `"`), MimeType: v.MIMEType})
		default:
			raw, _ := json.Marshal(c)
			out.Content = append(out.Content, tools.Content{Type: "text", Text: string(raw)})
			texts = append(texts, string(raw))
		}
	}
	if out.Content == nil {
		out.Content = []tools.Content{}
	}
	out.Text = strings.Join(texts, "\n")
	return out
}
