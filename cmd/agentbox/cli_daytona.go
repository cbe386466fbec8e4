package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// keylessDaytonaKey is what the Daytona SDK sends to a daemon without API
// keys, which takes any key: the SDK refuses to start without one.
const keylessDaytonaKey = "agentbox-keyless"

func newDaytonaCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "daytona", Short: "Use the Daytona SDK with this server"}
	env := &cobra.Command{
		Use:   "env",
		Short: "Print the environment variables that point the Daytona SDK at this server",
		Long: `Prints, as shell export lines, what the unmodified Daytona SDKs need to use
this server: DAYTONA_API_URL (the server's URL with /api) and DAYTONA_API_KEY.
Use: eval "$(agentbox daytona env)".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, _ := cmd.Flags().GetBool(flagJSON)
			return finish(cmd.ErrOrStderr(), asJSON, daytonaEnv(cmd))
		},
	}
	cmd.AddCommand(env)
	return cmd
}

func daytonaEnv(cmd *cobra.Command) error {
	f := cmd.Flags()
	raw, _ := f.GetString(flagURL)
	if raw == "" {
		raw = os.Getenv(client.EnvURL)
	}
	if raw == "" {
		raw = client.DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return usageErrorf("--%s: want an http(s) URL, got %q", flagURL, raw)
	}
	key, _ := f.GetString(flagAPIKey)
	if key == "" {
		key = os.Getenv(client.EnvAPIKey)
	}
	if key == "" {
		key = keylessDaytonaKey
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "export DAYTONA_API_URL=%s\n", shellQuote(u.Scheme+"://"+u.Host+"/api"))
	fmt.Fprintf(out, "export DAYTONA_API_KEY=%s\n", shellQuote(key))
	return nil
}
