// Package mcpserver serves the tool kit (internal/tools) over the Model
// Context Protocol with the official Go SDK: over stdio (agentbox mcp,
// talking to a daemon through the Go SDK client), and over streamable
// HTTP on the daemon (/mcp, and /v1/sandboxes/{id}/mcp for one sandbox
// plus the MCP servers added to it).
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/tools"
	"github.com/agentbox/agentbox/internal/version"
)

// SessionFunc makes the tools session of an MCP session, at its first
// tool call; extra carries the HTTP request's headers (nil over stdio).
type SessionFunc func(ctx context.Context, extra *mcp.RequestExtra) (*tools.Session, error)

// Server is one MCP server over the kit: every MCP session gets a tools
// session of its own, closed when the MCP session ends (which destroys
// the sandboxes it created).
type Server struct {
	kit        *tools.Kit
	mode       tools.Mode
	newSession SessionFunc
	log        *slog.Logger
	srv        *mcp.Server

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*sessionEntry
}

type sessionEntry struct {
	once   sync.Once
	ts     *tools.Session
	err    error
	closed chan struct{} // closed once ts is closed
}

// Instructions tell a model how the tools fit together.
const Instructions = "These tools run code, shell commands, file and git operations in an isolated agentbox sandbox (a Linux machine with a /workspace directory). " +
	"In a session, a sandbox is created on first use and destroyed when the session ends; tools take an optional sandbox_id to act on another sandbox you created. " +
	"Paths are relative to /workspace. Errors say what to do next."

// New returns an MCP server offering the kit's tools of mode.
func New(kit *tools.Kit, mode tools.Mode, newSession SessionFunc, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{kit: kit, mode: mode, newSession: newSession, log: log, sessions: map[*mcp.ServerSession]*sessionEntry{}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "agentbox", Title: "agentbox sandbox tools", Version: version.Version},
		&mcp.ServerOptions{Instructions: Instructions, Logger: log})
	for _, d := range kit.Defs(mode) {
		name := d.Name
		s.srv.AddTool(&mcp.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema, Annotations: annotations(d.Name)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return s.call(ctx, req, name)
			})
	}
	return s
}

// MCP returns the SDK server.
func (s *Server) MCP() *mcp.Server { return s.srv }

// readOnly are the tools that change nothing.
var readOnly = map[string]bool{
	"sandbox_list": true, "file_read": true, "file_list": true, "file_search": true, "git_status": true,
	"git_diff": true, "git_log": true, "env_get": true, "process_list": true,
}

func annotations(name string) *mcp.ToolAnnotations {
	a := &mcp.ToolAnnotations{ReadOnlyHint: readOnly[name]}
	if !readOnly[name] {
		t := true
		a.DestructiveHint = &t
	}
	return a
}

// session returns the tools session of an MCP session, making it (and
// arranging its end) on first use.
func (s *Server) session(ctx context.Context, ss *mcp.ServerSession, extra *mcp.RequestExtra) (*tools.Session, error) {
	s.mu.Lock()
	e := s.sessions[ss]
	if e == nil {
		e = &sessionEntry{closed: make(chan struct{})}
		s.sessions[ss] = e
	}
	s.mu.Unlock()
	e.once.Do(func() {
		e.ts, e.err = s.newSession(ctx, extra)
		if e.err != nil {
			return
		}
		go func() {
			// The MCP session ends: client closed it (DELETE, stdin EOF),
			// idle timeout, or shutdown.
			_ = ss.Wait()
			e.ts.Close()
			close(e.closed)
			// Only now: closeAndWait must find a session whose sandboxes
			// are still being destroyed, or `agentbox mcp` could exit
			// (stdin EOF) before they are.
			s.mu.Lock()
			delete(s.sessions, ss)
			s.mu.Unlock()
		}()
	})
	if e.err != nil {
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}
	return e.ts, e.err
}

// closeAndWait ends every MCP session and waits until their tools
// sessions are closed.
func (s *Server) closeAndWait() {
	s.mu.Lock()
	entries := map[*mcp.ServerSession]*sessionEntry{}
	for ss, e := range s.sessions {
		entries[ss] = e
	}
	s.mu.Unlock()
	for ss, e := range entries {
		_ = ss.Close()
		if e.ts != nil {
			<-e.closed
		}
	}
}

// CloseAll ends the tools sessions of every MCP session (shutdown).
func (s *Server) CloseAll() {
	s.mu.Lock()
	var all []*mcp.ServerSession
	for ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		_ = ss.Close()
	}
}

func (s *Server) call(ctx context.Context, req *mcp.CallToolRequest, name string) (*mcp.CallToolResult, error) {
	ts, err := s.session(ctx, req.Session, req.Extra)
	if err != nil {
		return errorResult("cannot start the tools session: " + err.Error()), nil
	}
	res, err := ts.Call(ctx, name, req.Params.Arguments)
	if errors.Is(err, tools.ErrUnknownTool) {
		return errorResult(err.Error()), nil
	}
	if err != nil {
		return nil, err
	}
	return toMCP(res), nil
}

// toMCP converts a kit result.
func toMCP(res *tools.Result) *mcp.CallToolResult {
	out := &mcp.CallToolResult{IsError: res.IsError}
	for _, c := range res.Content {
		switch c.Type {
		case "image":
			data, err := decodeBase64(c.Data)
			if err != nil {
				out.Content = append(out.Content, &mcp.TextContent{Text: "[an image could not be decoded]"})
				continue
			}
			out.Content = append(out.Content, &mcp.ImageContent{Data: data, MIMEType: c.MimeType})
		default:
			out.Content = append(out.Content, &mcp.TextContent{Text: c.Text})
		}
	}
	if len(out.Content) == 0 {
		out.Content = []mcp.Content{&mcp.TextContent{Text: ""}}
	}
	return out
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "Error: " + msg}}}
}

// decodeBase64 decodes standard base64 (the SDK encodes image bytes
// itself).
func decodeBase64(s string) ([]byte, error) {
	var b []byte
	err := json.Unmarshal([]byte(`"`+s+`"`), &b)
	return b, err
}
