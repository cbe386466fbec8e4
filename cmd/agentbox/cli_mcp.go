package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/mcpserver"
)

func newMCPCmd() *cobra.Command {
	var template string
	var timeout time.Duration
	var network string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox tools over MCP on stdin/stdout (for Claude Desktop and other MCP clients)",
		Long: `Serve the agentbox tool kit as an MCP server over stdio. The tools run in
a sandbox of the server at --url / AGENTBOX_URL (key: --api-key /
AGENTBOX_API_KEY), created on the first tool call and destroyed when the
MCP client disconnects. Logs go to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			x, err := newCLI(cmd)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			create := client.CreateRequest{Template: template, Timeout: timeout}
			if network != "" {
				create.Network = &client.Network{Mode: network}
			}
			return mcpserver.RunStdio(ctx, x.c, mcpserver.StdioOptions{Create: create, Logger: log})
		},
	}
	cmd.Flags().StringVar(&template, "template", "", "template of the session's sandbox (default: the server's)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "life of the session's sandbox while unused (default: the server's); it is refreshed while the session uses it")
	cmd.Flags().StringVar(&network, "network", "", "network of the session's sandbox: none or egress (default: the server's)")
	_ = cmd.RegisterFlagCompletionFunc("template", completeTemplates)
	return cmd
}
