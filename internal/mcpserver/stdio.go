package mcpserver

import (
	"context"
	"io"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/tools"
)

// StdioOptions configure RunStdio.
type StdioOptions struct {
	// Create is the request for the session's sandbox (made on first use).
	Create client.CreateRequest
	// In and Out default to the process's stdin and stdout.
	In     io.ReadCloser
	Out    io.WriteCloser
	Logger *slog.Logger
}

// RunStdio serves one MCP session over stdin/stdout until the client
// closes it or ctx ends; the sandboxes the session created are destroyed
// before it returns.
func RunStdio(ctx context.Context, c *client.Client, opts StdioOptions) error {
	kit := tools.New()
	defer kit.Close()
	srv := New(kit, tools.SessionMode, func(ctx context.Context, _ *mcp.RequestExtra) (*tools.Session, error) {
		return kit.NewSession(c, tools.SessionOptions{Owner: "stdio", Create: opts.Create, Logger: opts.Logger}), nil
	}, opts.Logger)
	var t mcp.Transport = &mcp.StdioTransport{}
	if opts.In != nil || opts.Out != nil {
		t = &mcp.IOTransport{Reader: opts.In, Writer: opts.Out}
	}
	ss, err := srv.MCP().Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = ss.Close()
		<-done //nolint:errcheck // waits for it; the context's end is what is reported
	}
	// Wait for the session's sandboxes to be destroyed (the session's
	// end handler runs Close; CloseAll covers a session not yet seen).
	srv.closeAndWait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}
