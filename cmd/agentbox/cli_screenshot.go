package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newScreenshotCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "screenshot ID [-o FILE]",
		Short: "Save a PNG of a browser sandbox's screen",
		Long: "Screenshot saves the whole screen of a sandbox of the browser template (docs/browser.md)\n" +
			"as a PNG: to FILE (default ID.png), or to stdout with -o -.",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			png, err := x.c.Screenshot(ctx, args[0])
			if err != nil {
				return err
			}
			path := out
			if path == "" {
				path = args[0] + ".png"
			}
			if path == "-" {
				_, err := x.out.Write(png)
				return err
			}
			if err := os.WriteFile(path, png, 0o644); err != nil {
				return fmt.Errorf("save the screenshot: %w", err)
			}
			if x.json {
				return x.printJSON(map[string]any{"path": path, "bytes": len(png)})
			}
			fmt.Fprintf(x.out, "%s\t%d bytes\n", path, len(png))
			return nil
		}),
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "where to save the PNG (default ID.png; - for stdout)")
	return cmd
}
