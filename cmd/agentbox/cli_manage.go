package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/units"
)

func newKillCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "kill ID...",
		Aliases:           []string{"rm"},
		Short:             "Destroy sandboxes and everything in them",
		ValidArgsFunction: completeManyIDs,
		RunE: clientRunE(cobra.MinimumNArgs(1), func(ctx context.Context, x *cli, args []string) error {
			// Go on past failures: one missing sandbox should not keep the
			// others alive.
			killed := []string{}
			var errs []error
			for _, id := range args {
				if err := x.c.Delete(ctx, id); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				killed = append(killed, id)
				if !x.json {
					fmt.Fprintln(x.out, id)
				}
			}
			if x.json {
				if err := x.printJSON(killed); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		}),
	}
}

func newLogsCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:               "logs ID",
		Short:             "Show a sandbox's lifecycle events and agent log",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			if limit < 0 {
				return usageErrorf("--limit must not be negative")
			}
			logs, err := x.c.Logs(ctx, args[0], limit)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(logs)
			}
			for _, l := range logs {
				line := fmt.Sprintf("%s  %-5s  %s", l.Timestamp.Local().Format(time.RFC3339Nano), strings.ToUpper(l.Level), l.Message)
				keys := make([]string, 0, len(l.Fields))
				for k := range l.Fields {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					line += fmt.Sprintf(" %s=%v", k, l.Fields[k])
				}
				fmt.Fprintln(x.out, line)
			}
			return nil
		}),
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 0, "show at most the last N entries (default: the server's, 1000)")
	return cmd
}

func newTimeoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "timeout ID DURATION",
		Short: "Set when a sandbox is destroyed: DURATION from now (may shorten its life)",
		Example: `  agentbox timeout $ID 2h
  agentbox timeout $ID 90   # seconds`,
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(2), func(ctx context.Context, x *cli, args []string) error {
			d, err := parseTimeout(args[1])
			if err != nil {
				return usageErrorf("DURATION: %v", err)
			}
			sb, err := x.c.SetTimeout(ctx, args[0], d)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(sb)
			}
			fmt.Fprintf(x.out, "%s ends at %s (in %s)\n", sb.ID, sb.EndAt.Local().Format(time.RFC3339),
				shortDuration(time.Until(sb.EndAt)))
			return nil
		}),
	}
}

func newStatsCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "stats ID",
		Short:             "Show a sandbox's resource usage and limit counters",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			st, err := x.c.Stats(ctx, args[0])
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(st)
			}
			limit := func(n int64, f func(int64) string) string {
				if n <= 0 {
					return "unlimited"
				}
				return f(n)
			}
			count := func(n int64) string { return fmt.Sprint(n) }
			tw := tabwriter.NewWriter(x.out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "memory\t%s (peak %s) of %s\n", units.FormatBytes(st.MemoryBytes), units.FormatBytes(st.MemoryMaxBytes), limit(st.MemoryLimit, units.FormatBytes))
			fmt.Fprintf(tw, "cpu\t%.2f s\n", st.CPUSeconds)
			fmt.Fprintf(tw, "pids\t%d of %s\n", st.PIDs, limit(st.PIDsLimit, count))
			fmt.Fprintf(tw, "disk\t%s of %s\n", units.FormatBytes(st.DiskUsedBytes), limit(st.DiskTotalBytes, units.FormatBytes))
			fmt.Fprintf(tw, "oom kills\t%d\n", st.OOMKills)
			fmt.Fprintf(tw, "pids limit hits\t%d\n", st.PIDsLimitHits)
			return tw.Flush()
		}),
	}
}
