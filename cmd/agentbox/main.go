// Command agentbox is the agentbox daemon and its command-line client.
//
//	agentbox serve                      run the API server (make run)
//	agentbox doctor                     check this host for what serve needs
//	agentbox version                    version, commit, build date, backends
//	agentbox run -- python3 -c 'print(1)'  one sandbox, one command, no daemon
//	agentbox create | ls | exec | cp | kill | logs | timeout   talk to a server
//	agentbox mcp                        the sandbox tools over MCP on stdio
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/version"
)

func main() {
	// Commands that start many sandboxes re-exec this binary for each;
	// running from a sealed copy saves libcontainer protecting the binary
	// per sandbox (see SealSelf). `run` starts one: copying the whole binary
	// into memory first would cost it more than libcontainer's protection of
	// that one start (a sealed read-only overlay of the binary where the
	// kernel allows it). Client commands start no sandbox. `serve` seals
	// itself once its settings are read (runWithSettings).
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		native.SealSelf()
	}

	root := &cobra.Command{
		Use:           "agentbox",
		Short:         "Sandboxes for AI agents",
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version prints what `agentbox version` does (the template is
	// text/template: the text has no actions).
	root.SetVersionTemplate(currentBuild().String())
	addClientFlags(root)
	root.AddCommand(newServeCmd(), newNodeCmd(), newRunCmd(), newBenchCmd(), newMCPCmd(), newLoadCmd(), newDoctorCmd(), newVersionCmd())
	addClientCommands(root)

	err := root.Execute()
	var exit *exitError
	switch {
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(os.Stderr, "agentbox:", exit.msg)
		}
		os.Exit(exit.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "agentbox:", err)
		if strings.HasPrefix(err.Error(), "unknown command") {
			os.Exit(2) // a usage error, like bad flags
		}
		os.Exit(1)
	}
}

// exitError carries a command's exit code (e.g. the code of a process run in
// a sandbox) out of cobra, with an optional message for stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.msg) }
