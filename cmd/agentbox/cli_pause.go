package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func newPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause ID...",
		Short: "Freeze every process of sandboxes and stop their clock (resume brings them back as they were)",
		Long: `Freeze every process of each sandbox in place: memory, open files and running
servers stay as they are, the sandbox uses no CPU and its clock stops (the
time it had left is given back by resume). While paused, exec, files and
code fail until the sandbox is resumed. A paused sandbox is deleted after the
server's PAUSED_TTL.`,
		ValidArgsFunction: completeManyIDs,
		RunE: clientRunE(cobra.MinimumNArgs(1), func(ctx context.Context, x *cli, args []string) error {
			return eachSandbox(x, args, func(id string) (*client.Sandbox, error) { return x.c.Pause(ctx, id) },
				func(sb *client.Sandbox) string {
					if sb.EndAt.IsZero() {
						return fmt.Sprintf("%s paused (%s left when resumed; kept until deleted)", sb.ID, shortDuration(secondsDuration(sb.RemainingSeconds)))
					}
					return fmt.Sprintf("%s paused (%s left when resumed; deleted at %s unless resumed)", sb.ID,
						shortDuration(secondsDuration(sb.RemainingSeconds)), sb.EndAt.Local().Format(time.RFC3339))
				})
		}),
	}
}

func newResumeCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "resume ID...",
		Short: "Thaw paused sandboxes: every process continues where it stopped",
		Example: `  agentbox resume $ID
  agentbox resume --timeout 1h $ID   # runs for an hour from now`,
		ValidArgsFunction: completeManyIDs,
		RunE: clientRunE(cobra.MinimumNArgs(1), func(ctx context.Context, x *cli, args []string) error {
			if timeout < 0 {
				return usageErrorf("--timeout must be positive")
			}
			return eachSandbox(x, args, func(id string) (*client.Sandbox, error) { return x.c.Resume(ctx, id, timeout) },
				func(sb *client.Sandbox) string {
					return fmt.Sprintf("%s running, ends at %s (in %s)", sb.ID, sb.EndAt.Local().Format(time.RFC3339),
						shortDuration(time.Until(sb.EndAt)))
				})
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "run this long from now, e.g. 30m (default: the time it had left when paused)")
	return cmd
}

// eachSandbox applies op to every id, going on past failures, and prints
// one line per sandbox (or a JSON array of them).
func eachSandbox(x *cli, ids []string, op func(id string) (*client.Sandbox, error), line func(*client.Sandbox) string) error {
	done := []*client.Sandbox{}
	var errs []error
	for _, id := range ids {
		sb, err := op(id)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		done = append(done, sb)
		if !x.json {
			fmt.Fprintln(x.out, line(sb))
		}
	}
	if x.json {
		if err := x.printJSON(done); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
