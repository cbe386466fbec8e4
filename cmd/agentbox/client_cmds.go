package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// Global flags of the client commands.
const (
	flagURL    = "url"
	flagAPIKey = "api-key"
	flagJSON   = "json"
)

// addClientFlags adds the flags every client command reads: --url,
// --api-key and --json. It also makes flag parsing errors usage errors
// (exit code 2) for every command.
func addClientFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.String(flagURL, "", "agentbox server URL (env "+client.EnvURL+", default "+client.DefaultURL+")")
	pf.String(flagAPIKey, "", "API key (env "+client.EnvAPIKey+")")
	pf.Bool(flagJSON, false, "machine-readable JSON output (errors too, on stderr)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// --json is known here only if it came before the bad flag.
		asJSON, _ := c.Flags().GetBool(flagJSON)
		return finish(c.ErrOrStderr(), asJSON, &usageError{msg: fmt.Sprintf("%v (see '%s --help')", err, c.CommandPath())})
	})
}

// addClientCommands adds the commands that talk to an agentbox server.
func addClientCommands(root *cobra.Command) {
	root.AddCommand(
		newCreateCmd(), newLsCmd(), newExecCmd(), newCpCmd(), newShellCmd(),
		newKillCmd(), newLogsCmd(), newTimeoutCmd(), newStatsCmd(), newTemplateCmd(), newSnapshotCmd(), newVolumeCmd(), newForkCmd(),
		newPauseCmd(), newResumeCmd(), newE2BCmd(), newDaytonaCmd(),
		newScreenshotCmd(),
		newDesktopCmd(),
		newOpenCmd(),
		newSecretCmd(), newNetworkCmd(),
	)
}

// cli is what a client command runs with: a client built from the global
// flags and the command's streams (cobra's, so tests can capture them).
type cli struct {
	c      *client.Client
	json   bool
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	// urlFrom says where the server URL came from, for errors: " from
	// --url", " from AGENTBOX_URL" or ", the default".
	urlFrom string
}

// newCLI builds the client from --url/--api-key, falling back to the
// environment.
func newCLI(cmd *cobra.Command) (*cli, error) {
	f := cmd.Flags()
	url, _ := f.GetString(flagURL)
	urlFrom := " from --" + flagURL
	if url == "" {
		url, urlFrom = os.Getenv(client.EnvURL), " from "+client.EnvURL
	}
	if url == "" {
		urlFrom = ", the default"
	}
	key, _ := f.GetString(flagAPIKey)
	if key == "" {
		key = os.Getenv(client.EnvAPIKey)
	}
	asJSON, _ := f.GetBool(flagJSON)
	opts := []client.Option{client.WithAPIKey(key), client.WithUserAgent("agentbox-cli")}
	if key != "" && !asJSON {
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: &warnOnce{base: http.DefaultTransport, out: cmd.ErrOrStderr()}}))
	}
	c, err := client.New(url, opts...)
	if err != nil {
		return nil, usageErrorf("--%s: %v", flagURL, err)
	}
	return &cli{c: c, json: asJSON, in: cmd.InOrStdin(), out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), urlFrom: urlFrom}, nil
}

// warnOnce prints the first Warning header a response carries on out: a
// keyless server's word that the key sent was not checked (auth is off),
// which the user would not learn otherwise. Not with --json, whose stderr
// is the error's JSON.
type warnOnce struct {
	base http.RoundTripper
	out  io.Writer
	once sync.Once
}

func (t *warnOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		if w := resp.Header.Get("Warning"); w != "" {
			t.once.Do(func() {
				// 299 agentbox "text": the text alone.
				if i := strings.IndexByte(w, '"'); i >= 0 {
					w = strings.Trim(w[i:], `"`)
				}
				fmt.Fprintf(t.out, "agentbox: warning from the server: %s; unset AGENTBOX_API_KEY or give the server API_KEYS\n", w)
			})
		}
	}
	return resp, err
}

// unreachable adds what to do to err when the server refused the
// connection, which mostly means that no server runs at url.
func unreachable(err error, url, from string) error {
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	return fmt.Errorf("%w: is the server running? (tried %s%s; start one with agentbox serve, or point --%s or %s at yours)",
		err, url, from, flagURL, client.EnvURL)
}

// printJSON writes v as indented JSON on stdout.
func (x *cli) printJSON(v any) error {
	enc := json.NewEncoder(x.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// action is the body of a client command. ctx is cancelled by SIGINT,
// SIGTERM and SIGHUP.
type action func(ctx context.Context, x *cli, args []string) error

// clientRunE adapts an action to cobra: it checks the positional
// arguments (a failure is a usage error), builds the cli and turns the
// action's error into an exit code and message (see finish).
func clientRunE(check cobra.PositionalArgs, fn action) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		asJSON, _ := cmd.Flags().GetBool(flagJSON)
		errOut := cmd.ErrOrStderr()
		if check != nil {
			if err := check(cmd, args); err != nil {
				return finish(errOut, asJSON, &usageError{msg: fmt.Sprintf("%v (see '%s --help')", err, cmd.CommandPath())})
			}
		}
		x, err := newCLI(cmd)
		if err != nil {
			return finish(errOut, asJSON, err)
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
		err = unreachable(fn(ctx, x, args), x.c.BaseURL(), x.urlFrom)
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return &exitError{code: 130, msg: "interrupted"}
		}
		return finish(errOut, asJSON, err)
	}
}

// jsonError is the API's error shape, which --json prints on stderr for
// every failure, the client's own included.
type jsonError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// finish maps an action's error to what main prints and exits with:
// usage errors exit 2, other failures 1, an *exitError (a command's own
// exit code) passes through. With --json the error is printed here, on
// stderr as a JSON object, and main prints nothing more.
func finish(errOut io.Writer, asJSON bool, err error) error {
	if err == nil {
		return nil
	}
	var exit *exitError
	if errors.As(err, &exit) {
		return exit
	}
	code, obj := 1, jsonError{Code: client.CodeInternal, Message: err.Error()}
	var apiErr *client.Error
	var usage *usageError
	var netErr net.Error
	switch {
	case errors.As(err, &usage):
		code, obj.Code = 2, client.CodeInvalidArgument
	case errors.As(err, &apiErr):
		obj = jsonError{Code: apiErr.Code, Message: err.Error(), Field: apiErr.Field, RequestID: apiErr.RequestID}
	case errors.As(err, &netErr):
		obj.Code = client.CodeUnavailable
	}
	if asJSON {
		_ = json.NewEncoder(errOut).Encode(obj)
		return &exitError{code: code}
	}
	return &exitError{code: code, msg: err.Error()}
}
