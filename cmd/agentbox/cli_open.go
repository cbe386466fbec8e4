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
// its sandboxes (templates/code-server/agentbox-code-server); jupyterPort
// is the data-science template's notebook server
// (templates/data-science/agentbox-jupyter).
const (
	codeServerPort = 13337
	jupyterPort    = 8888
)

func newOpenCmd() *cobra.Command {
	var ide, jupyter, browse bool
	var port int
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "open ID (--ide | --jupyter | --port N) [--browser] [--ttl 1h]",
		Short: "Print (or open) a signed link to a sandbox's web server, VS Code or Jupyter",
		Long: "Open prints a signed, expiring browser link to a port a server listens on inside the\n" +
			"sandbox, through the server's preview proxy (docs/networking.md): --port N for any port,\n" +
			"--ide for VS Code in a sandbox of the code-server template (docs/templates.md#code-server),\n" +
			"--jupyter for the notebook of a data-science sandbox (docs/templates.md#data-science).\n" +
			"Whoever has the link uses the server until it expires. --browser opens it in the\n" +
			"default browser (xdg-open).",
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			app := ""
			switch {
			case btoi(ide)+btoi(jupyter)+btoi(port != 0) > 1:
				return errors.New("give one of --ide, --jupyter and --port")
			case ide:
				port, app = codeServerPort, "VS Code"
			case jupyter:
				port, app = jupyterPort, "Jupyter"
			case port == 0:
				return errors.New("give --ide (VS Code of a code-server sandbox), --jupyter (a data-science sandbox's notebook) or --port N")
			}
			link, err := x.c.CreatePreviewToken(ctx, args[0], port, ttl)
			if err != nil {
				return err
			}
			// Without a preview domain the only link is the path form,
			// which browsers run inert (no scripts): an app cannot load.
			if app != "" && strings.Contains(link.URL, "/v1/sandboxes/") {
				return fmt.Errorf("the server has no preview domain (PREVIEW_DOMAIN is empty), which %s in a browser needs; programs can use %s", app, link.URL)
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
	cmd.Flags().BoolVar(&jupyter, "jupyter", false, "the Jupyter notebook of a sandbox of the data-science template")
	cmd.Flags().IntVar(&port, "port", 0, "the sandbox port to open")
	cmd.Flags().BoolVar(&browse, "browser", false, "open the link in the default browser")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the link works (default 1h, at most 7 days)")
	return cmd
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
