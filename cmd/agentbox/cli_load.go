package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/loadtest"
)

// newLoadCmd is `agentbox load`: the load generator of make load, against
// any running daemon (docs/reliability.md). It creates and destroys real
// sandboxes: point it at a server you may load.
func newLoadCmd() *cobra.Command {
	var (
		clients  int
		duration time.Duration
		asToken  string
		maxFile  string
		interval time.Duration
		tmpl     string
	)
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Load a server: concurrent clients creating, using and destroying sandboxes",
		Long: `Runs --clients concurrent clients for --duration against the server: each
creates a sandbox, runs a shell command and a Python cell, writes and reads
back a file (1 KiB to --max-file), and destroys it; with --agentscope-token
a third of the rounds use the agentscope routes. Prints throughput and
p50/p99 latency every --interval and a summary at the end (errors by kind;
quota and capacity errors are expected under load). Exits 1 when an
unexpected error occurred. Every sandbox it created is destroyed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			url, _ := f.GetString(flagURL)
			if url == "" {
				url = os.Getenv(client.EnvURL)
			}
			if url == "" {
				url = client.DefaultURL
			}
			key, _ := f.GetString(flagAPIKey)
			if key == "" {
				key = os.Getenv(client.EnvAPIKey)
			}
			maxBytes, err := client.ParseSize(maxFile)
			if err != nil {
				return usageErrorf("--max-file: %v", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := loadtest.Run(ctx, loadtest.Config{URL: url, APIKey: key, AgentscopeToken: asToken,
				Clients: clients, Duration: duration, MaxFileBytes: maxBytes, Interval: interval,
				Out: cmd.OutOrStdout(), Template: tmpl, Seed: uint64(time.Now().UnixNano())})
			if err != nil {
				return err
			}
			res.Report(cmd.OutOrStdout())
			if n := res.Unexpected(); n > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d unexpected errors", n)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&clients, "clients", 32, "concurrent clients")
	f.DurationVar(&duration, "duration", 2*time.Minute, "how long clients start new rounds")
	f.StringVar(&asToken, "agentscope-token", "", "the server's BEARER_TOKEN, to load the agentscope routes too")
	f.StringVar(&maxFile, "max-file", "50MiB", "largest file written and read back")
	f.DurationVar(&interval, "interval", 10*time.Second, "time between progress lines")
	f.StringVar(&tmpl, "template", "", "template of the native sandboxes (default: the server's)")
	return cmd
}
