package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/httpapi"
)

// keylessE2BKey is what E2B SDKs send to a daemon without API keys, which
// takes any key: they refuse to start without one, and some check its
// e2b_<hex> form.
const keylessE2BKey = "e2b_00000000000000000000000000000000"

func newE2BCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "e2b", Short: "Use the E2B SDKs with this server"}
	var domain string
	env := &cobra.Command{
		Use:   "env",
		Short: "Print the environment variables that point the E2B SDKs at this server",
		Long: `Prints, as shell export lines, what the unmodified e2b and @e2b/code-interpreter
SDKs need to use this server over plain HTTP: the lifecycle API and the
sandbox data plane are both the server's own URL, and preview hosts of
sandbox ports are <port>-<id>.<domain>. Use: eval "$(agentbox e2b env)".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, _ := cmd.Flags().GetBool(flagJSON)
			return finish(cmd.ErrOrStderr(), asJSON, e2bEnv(cmd, domain))
		},
	}
	env.Flags().StringVar(&domain, "domain", "", "the server's PREVIEW_DOMAIN as clients reach it (default: localhost:<port> for a loopback URL, else the URL's host)")
	cmd.AddCommand(env)
	return cmd
}

// e2bEnv prints the variables.
func e2bEnv(cmd *cobra.Command, domain string) error {
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
		key = keylessE2BKey
	}
	if domain == "" {
		domain = e2bDomain(u)
	}
	base := u.Scheme + "://" + u.Host
	out := cmd.OutOrStdout()
	for _, kv := range [][2]string{
		{"E2B_API_URL", base},
		{"E2B_SANDBOX_URL", base},
		{"E2B_VOLUME_API_URL", base}, // Volume content calls, else https://api.<domain>
		{"E2B_DOMAIN", domain},
		{"E2B_API_KEY", key},
	} {
		fmt.Fprintf(out, "export %s=%s\n", kv[0], shellQuote(kv[1]))
	}
	return nil
}

// e2bDomain is the domain sandbox port hosts live under, as the SDK's
// getHost builds them (<port>-<id>.<domain>): the default PREVIEW_DOMAIN
// (localhost) with the server's port for a loopback server.
func e2bDomain(u *url.URL) string {
	if httpapi.LoopbackHost(u.Host) {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		return net.JoinHostPort("localhost", port)
	}
	return u.Host
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
