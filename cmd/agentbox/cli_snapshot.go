package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func newSnapshotCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "snapshot ID -t NAME[:TAG]",
		Short: "Turn a sandbox's current root filesystem into a new template",
		Long: "Snapshot stores what a sandbox changed in its root filesystem, on top of its template, as a\n" +
			"new template that new sandboxes can be created from. /workspace is not part of it. Sandboxes\n" +
			"of the host template cannot be snapshotted.",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			if name == "" {
				return usageErrorf("a template name is required: -t NAME[:TAG]")
			}
			t, err := x.c.Snapshot(ctx, args[0], name)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(t)
			}
			fmt.Fprintf(x.out, "%s:%s\t%s\n", t.Name, t.Tag, t.Digest)
			return nil
		}),
	}
	cmd.Flags().StringVarP(&name, "tag", "t", "", "the new template's NAME[:TAG]")
	return cmd
}
