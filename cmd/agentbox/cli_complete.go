package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// completionTimeout bounds the List call behind a tab press: a slow or
// absent server must not hang the shell.
const completionTimeout = 2 * time.Second

// sandboxIDs returns "id\ttemplate state" suggestions for ids starting
// with prefix, leaving out exclude. Errors give no suggestions: completion
// has no way to report them.
func sandboxIDs(cmd *cobra.Command, prefix string, exclude []string) []string {
	x, err := newCLI(cmd)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	page, err := x.c.List(ctx, client.ListOptions{Limit: 1000})
	if err != nil {
		return nil
	}
	var out []string
	for _, sb := range page.Sandboxes {
		if strings.HasPrefix(sb.ID, prefix) && !slices.Contains(exclude, sb.ID) {
			out = append(out, sb.ID+"\t"+sb.Template+" "+sb.State)
		}
	}
	return out
}

// completeOneID completes the first argument with a sandbox id.
func completeOneID(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return sandboxIDs(cmd, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
}

// completeManyIDs completes every argument with a sandbox id not given yet.
func completeManyIDs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return sandboxIDs(cmd, toComplete, args), cobra.ShellCompDirectiveNoFileComp
}

// completeCp offers "ID:" for sandbox ids matching what was typed, and
// local files otherwise.
func completeCp(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) >= 2 || strings.Contains(toComplete, ":") {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, s := range sandboxIDs(cmd, toComplete, nil) {
		id, desc, _ := strings.Cut(s, "\t")
		out = append(out, id+":\t"+desc)
	}
	if len(out) == 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	return out, cobra.ShellCompDirectiveNoSpace
}

// completeTemplates completes --template with the server's templates:
// NAME for a latest tag, NAME:TAG otherwise, described by their kind.
// Errors give no suggestions, as for sandbox ids.
func completeTemplates(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	x, err := newCLI(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	templates, err := x.c.Templates(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, t := range templates {
		ref := t.Name
		if t.Tag != "" && t.Tag != "latest" {
			ref += ":" + t.Tag
		}
		if strings.HasPrefix(ref, toComplete) {
			out = append(out, ref+"\t"+t.Kind)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeRunTemplate completes run's --template: the server's templates
// when the run goes through one (--url, AGENTBOX_URL), else host (a run
// without a server also takes dir:PATH).
func completeRunTemplate(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if url, _ := cmd.Flags().GetString(flagURL); url == "" && os.Getenv(client.EnvURL) == "" {
		if strings.HasPrefix(sandbox.TemplateHost, toComplete) {
			return []string{sandbox.TemplateHost + "\tthe host's /usr, read-only"}, cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeTemplates(cmd, args, toComplete)
}
