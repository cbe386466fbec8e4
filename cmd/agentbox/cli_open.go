package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// codeServerPort is where the code-server template's editor listens in
// its sandboxes (templates/code-server/agentbox-code-server).
const codeServerPort = 13337

func newOpenCmd() *cobra.Command {
	var ide, browse bool
	var port int
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "open ID (--ide | --port N) [--browser] [--ttl 1h]",
		Short: "Print (or open) a signed link to a sandbox's web server or VS Code",
		Long: "Open prints a signed, expiring browser link to a port a server listens on inside the\n" +
			"sandbox, through the server's preview proxy (docs/networking.md): --port N for any port,\n" +
			"--ide for VS Code in a sandbox of the code-server template (docs/templates.md#code-server).\n" +
			"Whoever has the link uses the server until it expires. --browser opens it in the\n" +
			"default browser (xdg-open).",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			switch {
			case ide && port != 0:
				return errors.New("give --ide or --port, not both")
			case ide:
				port = codeServerPort
			case port == 0:
				return errors.New("give --ide (VS Code of a code-server sandbox) or --port N")
			}
			link, err := x.c.CreatePreviewToken(ctx, args[0], port, ttl)
			if err != nil {
				return err
			}
			// Without a preview domain the only link is the path form,
			// which browsers run inert (no scripts): VS Code cannot load.
			if ide && strings.Contains(link.URL, "/v1/sandboxes/") {
				return fmt.Errorf("the server has no preview domain (PREVIEW_DOMAIN is empty), which VS Code in a browser needs; programs can use %s", link.URL)
			}
			if x.json {
				if err := x.printJSON(link); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(x.out, link.URL)
			}
			if browse {
				// The URL is the server's answer: only http(s) is opened,
				// passed as one argument, never through a shell.
				if !strings.HasPrefix(link.URL, "http://") && !strings.HasPrefix(link.URL, "https://") {
					return fmt.Errorf("the server answered a preview link that is not http(s): %q", link.URL)
				}
				if err := exec.CommandContext(ctx, "xdg-open", link.URL).Start(); err != nil {
					return fmt.Errorf("open the link: %w (the link above still works)", err)
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&ide, "ide", false, "VS Code of a sandbox of the code-server template")
	cmd.Flags().IntVar(&port, "port", 0, "the sandbox port to open")
	cmd.Flags().BoolVar(&browse, "browser", false, "open the link in the default browser")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the link works (default 1h, at most 7 days)")
	return cmd
}
