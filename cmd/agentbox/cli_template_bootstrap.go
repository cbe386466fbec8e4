package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// newTemplateBootstrapCmd is `agentbox template bootstrap debian:SUITE`: the
// daemon (which owns the template store) bootstraps a Debian root
// filesystem from its host's apt sources and stores it as a template. It
// belongs under the `template` command group.
func newTemplateBootstrapCmd() *cobra.Command {
	var (
		name    string
		include []string
		variant string
	)
	cmd := &cobra.Command{
		Use:   "bootstrap debian:SUITE",
		Short: "Make a Debian template from the server's own apt sources (operator only)",
		Long: `Bootstrap a Debian root filesystem (mmdebstrap, variant minbase unless
--variant says otherwise) on the server, through the Debian mirrors, proxies
and options of the server's apt configuration, and store it as a template:
no registry needed, so Dockerfiles can start FROM debian:bookworm on an
air-gapped host. The server caches bootstraps: asking again is instant.`,
		Example: `  agentbox template bootstrap debian:bookworm
  agentbox template bootstrap debian:12 -t mydebian:base --include ca-certificates,curl`,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			req := client.BootstrapRequest{Image: args[0], Name: name, Variant: variant}
			for _, p := range include {
				if p = strings.TrimSpace(p); p != "" {
					req.Include = append(req.Include, p)
				}
			}
			tmpl, err := x.c.BootstrapTemplate(ctx, req, func(ev client.BootstrapEvent) {
				printBootstrapEvent(x, ev)
			})
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(tmpl)
			}
			var t struct{ Name, Tag string }
			if json.Unmarshal(tmpl, &t) == nil && t.Name != "" {
				ref := t.Name
				if t.Tag != "" {
					ref += ":" + t.Tag
				}
				fmt.Fprintln(x.out, ref)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&name, "tag", "t", "", "template NAME[:TAG] (default: the image reference)")
	f.StringSliceVar(&include, "include", nil, "Debian packages to install at bootstrap time (comma-separated, repeatable)")
	f.StringVar(&variant, "variant", "", "mmdebstrap variant: minbase (default), buildd, required, important, standard")
	return cmd
}

// printBootstrapEvent shows progress on stderr (stdout is the result), like
// docker build; with --json nothing but the result is printed.
func printBootstrapEvent(x *cli, ev client.BootstrapEvent) {
	if x.json {
		return
	}
	switch ev.Status {
	case "log":
		fmt.Fprintln(x.errOut, ev.Message)
	case "done", "error":
	default:
		line := ev.Status
		if ev.Layer != "" {
			line += " " + ev.Layer
		}
		if ev.Total > 0 {
			line += fmt.Sprintf(" %d/%d", ev.Current, ev.Total)
		}
		fmt.Fprintln(x.errOut, line)
	}
}
