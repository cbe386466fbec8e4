package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// maxExecStdin bounds what exec -i reads: stdin travels inside the JSON
// request, so it is held in memory on both ends.
const maxExecStdin = 64 << 20

type execOptions struct {
	env         []string
	cwd, user   string
	timeout     time.Duration
	interactive bool
}

func newExecCmd() *cobra.Command {
	var o execOptions
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [--] COMMAND [ARG...]",
		Short: "Run a command in a sandbox, streaming its output",
		Long: `Runs COMMAND (no shell: use sh -c '...' for one) in sandbox ID, prints
its stdout and stderr as they come and exits with its exit code.

Flags go before ID; everything after ID is the command. With -i, standard
input is read to the end (64 MiB at most, UTF-8 text) and fed to the
command. With --json the output is buffered and printed as one JSON result.

Exit codes: COMMAND's own; 124 when --timeout killed it; 137 when a signal
killed it (the OOM killer included); 1 when agentbox itself failed; 130 when
interrupted (the command is killed).`,
		Example: `  agentbox exec $ID -- ls -la /workspace
  echo 'print(2**10)' | agentbox exec -i $ID python3
  agentbox exec --timeout 5s -e DEBUG=1 -w /workspace $ID -- make test`,
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.MinimumNArgs(2), func(ctx context.Context, x *cli, args []string) error {
			id, command := args[0], args[1:]
			// With interspersed flags off, a "--" after ID reaches us.
			if command[0] == "--" {
				command = command[1:]
			}
			if len(command) == 0 {
				return usageErrorf("missing COMMAND after %s", id)
			}
			req, err := o.request(x.in, command)
			if err != nil {
				return err
			}
			if x.json {
				res, err := x.c.Exec(ctx, id, req)
				if err != nil {
					return err
				}
				if err := x.printJSON(res); err != nil {
					return err
				}
				return exitStatus(x, res.ExitInfo, o.timeout)
			}
			info, err := x.c.Run(ctx, id, req, x.out, x.errOut)
			if err != nil {
				return err
			}
			return exitStatus(x, info, o.timeout)
		}),
	}
	f := cmd.Flags()
	// Everything after ID belongs to the command, its flags included.
	f.SetInterspersed(false)
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVarP(&o.cwd, "cwd", "w", "", "working directory (default the user's home)")
	f.DurationVar(&o.timeout, "timeout", 0, "kill the command after this long (default: the server's, 60s)")
	f.StringVarP(&o.user, "user", "u", "", `run as "user" (default) or "root" (root sandboxes only)`)
	f.BoolVarP(&o.interactive, "interactive", "i", false, "feed standard input to the command")
	return cmd
}

// request builds the ExecRequest, reading stdin for -i.
func (o execOptions) request(stdin io.Reader, command []string) (client.ExecRequest, error) {
	req := client.ExecRequest{Cmd: command, Cwd: o.cwd, User: o.user, Timeout: o.timeout}
	if o.timeout < 0 {
		return req, usageErrorf("--timeout must be positive")
	}
	var err error
	if req.Env, err = parseKV("env", o.env); err != nil {
		return req, err
	}
	if o.interactive {
		data, err := io.ReadAll(io.LimitReader(stdin, maxExecStdin+1))
		if err != nil {
			return req, fmt.Errorf("read stdin: %w", err)
		}
		if len(data) > maxExecStdin {
			return req, fmt.Errorf("stdin is larger than %d MiB: upload it with 'agentbox cp - ID:/path' and redirect from the file", maxExecStdin>>20)
		}
		if !utf8.Valid(data) {
			return req, fmt.Errorf("stdin is not UTF-8 text: upload binary input with 'agentbox cp - ID:/path' instead")
		}
		req.Stdin = string(data)
	}
	return req, nil
}

// exitStatus turns how the command ended into agentbox's exit: the
// command's code, 124 for a timeout, 137 for a signal, with a short reason
// on stderr when the server says why.
func exitStatus(x *cli, info client.ExitInfo, timeout time.Duration) error {
	code := info.ExitCode
	var why []string
	switch {
	case info.TimedOut:
		code = 124
		if timeout > 0 {
			why = append(why, fmt.Sprintf("timed out: killed after --timeout %s", timeout))
		} else {
			why = append(why, "timed out: killed after the server's exec timeout (see --timeout)")
		}
	case code < 0:
		code = 137
		if !info.OOMKilled {
			why = append(why, "killed ("+info.Status+")")
		}
	}
	if info.OOMKilled {
		why = append(why, "out of memory: the sandbox's memory limit killed a process (create it with a larger --memory)")
	}
	if info.PidsLimitHit {
		why = append(why, "the sandbox's process limit refused a fork (create it with a larger --pids)")
	}
	msg := strings.Join(why, "; ")
	if code == 0 {
		if msg != "" {
			fmt.Fprintln(x.errOut, "agentbox:", msg)
		}
		return nil
	}
	return &exitError{code: code, msg: msg}
}
