package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func newSecretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Manage your secrets (values the egress broker injects; never readable back)",
	}
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Create a secret or replace its value, read from standard input",
		Long: `Reads the value from standard input (not an argument: arguments show in
the process list and shell history), one trailing newline removed:

  printf %s "$OPENAI_KEY" | agentbox secret set OPENAI_KEY`,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			data, err := io.ReadAll(io.LimitReader(x.in, 1<<20))
			if err != nil {
				return err
			}
			s, err := x.c.PutSecret(ctx, args[0], strings.TrimSuffix(string(data), "\n"))
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(s)
			}
			fmt.Fprintf(x.out, "%s\tversion %d\tplaceholder %s\n", s.Name, s.Version, s.Placeholder)
			return nil
		}),
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your secrets (names and placeholders)",
		RunE: clientRunE(cobra.NoArgs, func(ctx context.Context, x *cli, _ []string) error {
			list, err := x.c.ListSecrets(ctx)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(list)
			}
			tw := tabwriter.NewWriter(x.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tPLACEHOLDER\tUPDATED")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Name, s.Version, s.Placeholder, s.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		}),
	}
	rm := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Delete secrets",
		RunE: clientRunE(cobra.MinimumNArgs(1), func(ctx context.Context, x *cli, args []string) error {
			for _, name := range args {
				if err := x.c.DeleteSecret(ctx, name); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			return nil
		}),
	}
	cmd.AddCommand(set, ls, rm)
	return cmd
}

func newNetworkCmd() *cobra.Command {
	var (
		allow, deny []string
		rulesFile   string
	)
	cmd := &cobra.Command{
		Use:   "network ID",
		Short: "Replace a running sandbox's egress policy (allow, deny, broker rules)",
		Long: `Replaces the allow and deny lists and the egress broker rules of a
running sandbox; established connections the new policy denies are cut.
--rules is a JSON file holding an array of rules (docs/secrets.md), e.g.

  [{"host": "api.openai.com", "headers": {"Authorization": "Bearer ${secret:OPENAI_KEY}"}}]`,
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			n := client.Network{Mode: "egress", AllowOut: allow, DenyOut: deny}
			if rulesFile != "" {
				data, err := os.ReadFile(rulesFile)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(data, &n.Rules); err != nil {
					return fmt.Errorf("--rules %s: %w", rulesFile, err)
				}
			}
			sb, err := x.c.UpdateNetwork(ctx, args[0], n)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(sb)
			}
			fmt.Fprintln(x.out, sb.ID)
			return nil
		}),
	}
	cmd.Flags().StringSliceVar(&allow, "allow", nil, "allowed destinations (CIDRs or names; empty: everything public)")
	cmd.Flags().StringSliceVar(&deny, "deny", nil, "denied destinations")
	cmd.Flags().StringVar(&rulesFile, "rules", "", "JSON file of egress broker rules")
	return cmd
}
