package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/settings"
)

// agentbox volume ...: the caller's volumes (docs/volumes.md).
func newVolumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Manage volumes: named stores of files that outlive sandboxes",
		Long: "A volume is yours alone, mounted into sandboxes at create (\"volumes\" of POST /v1/sandboxes, or\n" +
			"the SDKs) into any number of them at once; its size is enforced by the kernel (docs/volumes.md).",
	}
	cmd.AddCommand(newVolumeCreateCmd(), newVolumeLsCmd(), newVolumeRmCmd())
	return cmd
}

func newVolumeCreateCmd() *cobra.Command {
	var size, kind string
	cmd := &cobra.Command{
		Use:   "create NAME [--size 1G] [--kind local|s3]",
		Short: "Create a volume",
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			var n int64
			if size != "" {
				v, err := settings.ParseSize(size)
				if err != nil {
					return usageErrorf("--size: %v", err)
				}
				n = v
			}
			v, err := x.c.CreateVolume(ctx, args[0], kind, n)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(v)
			}
			fmt.Fprintf(x.out, "%s\t%s\t%d\n", v.Name, v.Kind, v.Size)
			return nil
		}),
	}
	cmd.Flags().StringVar(&size, "size", "", "size, e.g. 512M or 2G (default: the server's VOLUME_DEFAULT_SIZE)")
	cmd.Flags().StringVar(&kind, "kind", "", "local (the server's data disk, the default) or s3 (its object storage, usable on every replica)")
	return cmd
}

func newVolumeLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List your volumes",
		RunE: clientRunE(cobra.NoArgs, func(ctx context.Context, x *cli, _ []string) error {
			vs, err := x.c.ListVolumes(ctx)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(vs)
			}
			fmt.Fprintln(x.out, "NAME\tKIND\tSIZE\tMOUNTED BY")
			for _, v := range vs {
				fmt.Fprintf(x.out, "%s\t%s\t%d\t%s\n", v.Name, v.Kind, v.Size, strings.Join(v.MountedBy, ","))
			}
			return nil
		}),
	}
}

func newVolumeRmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Delete volumes and their files (refused while mounted, unless --force)",
		RunE: clientRunE(cobra.MinimumNArgs(1), func(ctx context.Context, x *cli, args []string) error {
			for _, name := range args {
				if err := x.c.DeleteVolume(ctx, name, force); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even while sandboxes mount it (they get I/O errors in it)")
	return cmd
}

func newForkCmd() *cobra.Command {
	var count int
	cmd := &cobra.Command{
		Use:               "fork ID [-n COUNT]",
		Short:             "Make new sandboxes from a live copy of a running sandbox's disk",
		Long:              "Each fork gets the source's files, env, metadata, limits, network policy and volumes as they\nare now; processes and memory are not carried (docs/volumes.md). The source keeps running.",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			sbs, err := x.c.Fork(ctx, args[0], count, 0)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(sbs)
			}
			for _, sb := range sbs {
				fmt.Fprintln(x.out, sb.ID)
			}
			return nil
		}),
	}
	cmd.Flags().IntVarP(&count, "count", "n", 1, "how many forks (1 to 20)")
	return cmd
}
