package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func newLsCmd() *cobra.Command {
	var states, meta []string
	cmd := &cobra.Command{
		Use:               "ls [flags]",
		Aliases:           []string{"list"},
		Short:             "List your sandboxes, newest first",
		Example:           "  agentbox ls --state running --meta owner=ci",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: clientRunE(cobra.NoArgs, func(ctx context.Context, x *cli, args []string) error {
			md, err := parseKV("meta", meta)
			if err != nil {
				return err
			}
			all := []*client.Sandbox{} // "[]" rather than "null" in JSON
			for sb, err := range x.c.ListAll(ctx, client.ListOptions{States: states, Metadata: md}) {
				if err != nil {
					return err
				}
				all = append(all, sb)
			}
			if x.json {
				return x.printJSON(all)
			}
			return printSandboxTable(x, all, time.Now())
		}),
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only sandboxes in these states (running, paused, stopped; comma-separated or repeated)")
	cmd.Flags().StringArrayVar(&meta, "meta", nil, "only sandboxes with this metadata KEY=VALUE (repeatable: all must match)")
	return cmd
}

// printSandboxTable writes the human table of ls.
func printSandboxTable(x *cli, sandboxes []*client.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(x.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTEMPLATE\tSTATE\tAGE\tENDS IN\tMETADATA")
	for _, sb := range sandboxes {
		endsIn := "expired"
		if left := sb.EndAt.Sub(now); left > 0 {
			endsIn = shortDuration(left)
		} else if sb.State == "paused" && sb.EndAt.IsZero() {
			endsIn = "never" // paused, kept until deleted (PAUSED_TTL=0)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Template, sb.State,
			shortDuration(now.Sub(sb.CreatedAt)), endsIn, formatKV(sb.Metadata))
	}
	return tw.Flush()
}
