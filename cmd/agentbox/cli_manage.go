package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
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
	var (
		limit  int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Show a sandbox's lifecycle events and agent log",
		Long: `Shows a sandbox's lifecycle events and agent log, oldest first. With
-f it keeps polling the server (every second) and prints new entries until
interrupted or the sandbox is gone; --json then prints one JSON object per
line.`,
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			if limit < 0 {
				return usageErrorf("--limit must not be negative")
			}
			if follow {
				return followLogs(ctx, x, args[0], limit)
			}
			logs, err := x.c.Logs(ctx, args[0], limit)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(logs)
			}
			for _, l := range logs {
				printLogEntry(x.out, l)
			}
			return nil
		}),
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 0, "show at most the last N entries (default: the server's, 1000)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new entries until interrupted or the sandbox is gone")
	return cmd
}

// printLogEntry prints one entry as a line: time, level, message, fields.
func printLogEntry(w io.Writer, l client.LogEntry) {
	line := fmt.Sprintf("%s  %-5s  %s", l.Timestamp.Local().Format(time.RFC3339Nano), strings.ToUpper(l.Level), l.Message)
	keys := make([]string, 0, len(l.Fields))
	for k := range l.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		line += fmt.Sprintf(" %s=%v", k, l.Fields[k])
	}
	fmt.Fprintln(w, line)
}

// logsPollInterval is how often logs -f asks the server for new entries.
var logsPollInterval = time.Second

// followLogs is logs -f. The API answers the last entries of a sandbox's
// log, oldest first, with no cursor: each poll prints the entries it has
// not printed yet (logSeen), and the first poll prints only the last
// limit. It ends when ctx does (130, as an interrupted command) or the
// sandbox is gone (0).
func followLogs(ctx context.Context, x *cli, id string, limit int) error {
	var seen logSeen
	enc := json.NewEncoder(x.out)
	for first := true; ; first = false {
		logs, err := x.c.Logs(ctx, id, 0)
		switch {
		case ctx.Err() != nil:
			return &exitError{code: 130}
		case client.IsNotFound(err) && !first:
			return nil // destroyed while followed
		case err != nil:
			return err
		}
		fresh := seen.update(logs)
		if first && limit > 0 && len(fresh) > limit {
			fresh = fresh[len(fresh)-limit:]
		}
		for _, l := range fresh {
			if x.json {
				err = enc.Encode(l)
			} else {
				printLogEntry(x.out, l)
			}
			if err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 130}
		case <-time.After(logsPollInterval):
		}
	}
}

// logSeen remembers the log entries logs -f printed, by content (time,
// level, message, fields) and count, since entries have no ids: equal
// entries are told apart by how many of them a response holds. Entries
// older than the oldest of the last response cannot come back and are
// forgotten.
type logSeen struct {
	counts map[string]int
	times  map[string]time.Time
}

// update returns the entries of logs (a response, oldest first) not seen
// yet, and remembers them.
func (s *logSeen) update(logs []client.LogEntry) []client.LogEntry {
	if s.counts == nil {
		s.counts, s.times = map[string]int{}, map[string]time.Time{}
	}
	var fresh []client.LogEntry
	now := map[string]int{}
	for _, l := range logs {
		fields, _ := json.Marshal(l.Fields)
		key := l.Timestamp.UTC().Format(time.RFC3339Nano) + "\x00" + l.Level + "\x00" + l.Message + "\x00" + string(fields)
		now[key]++
		if now[key] > s.counts[key] {
			s.counts[key] = now[key]
			s.times[key] = l.Timestamp
			fresh = append(fresh, l)
		}
	}
	if len(logs) > 0 {
		oldest := logs[0].Timestamp
		for key, t := range s.times {
			if t.Before(oldest) {
				delete(s.counts, key)
				delete(s.times, key)
			}
		}
	}
	return fresh
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
