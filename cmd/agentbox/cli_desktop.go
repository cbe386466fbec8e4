package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newDesktopCmd() *cobra.Command {
	var view, open bool
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "desktop ID [--view] [--open] [--ttl 1h]",
		Short: "Print (or open) a link to a desktop sandbox's screen",
		Long: "Desktop prints a signed, expiring link to the noVNC page of a sandbox of the desktop\n" +
			"template (docs/desktop.md): whoever opens it uses the desktop (or only watches it, with\n" +
			"--view) until the link expires. --open opens it in the default browser (xdg-open).",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			mode := "interactive"
			if view {
				mode = "view"
			}
			link, err := x.c.DesktopLink(ctx, args[0], mode, ttl)
			if err != nil {
				return err
			}
			if x.json {
				if err := x.printJSON(link); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(x.out, link.URL)
			}
			if open {
				// The URL is the server's answer: only http(s) is opened,
				// passed as one argument, never through a shell.
				if !strings.HasPrefix(link.URL, "http://") && !strings.HasPrefix(link.URL, "https://") {
					return fmt.Errorf("the server answered a desktop link that is not http(s): %q", link.URL)
				}
				if err := exec.CommandContext(ctx, "xdg-open", link.URL).Start(); err != nil {
					return fmt.Errorf("open the desktop link: %w (the link above still works)", err)
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&view, "view", false, "a view-only link (the viewer's input is dropped)")
	cmd.Flags().BoolVar(&open, "open", false, "open the link in the default browser")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the link works (default 1h, at most 24h)")
	return cmd
}
