package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/client"
)

// outputDrainTimeout bounds the wait for the last terminal output after
// the command exited.
const outputDrainTimeout = 2 * time.Second

func newShellCmd() *cobra.Command {
	var opts client.PTYOptions
	cmd := &cobra.Command{
		Use:   "shell [flags] ID",
		Short: "Open an interactive terminal in a sandbox",
		Long: `Opens a terminal running a login shell (or --cmd) in sandbox ID and exits
with its exit code. When stdin is a terminal it is put in raw mode (so
Ctrl-C goes to the sandbox) and restored on exit; window size changes are
passed on. When stdin is not a terminal, its end sends Ctrl-D.`,
		ValidArgsFunction: completeOneID,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			return runShell(ctx, x, args[0], opts)
		}),
	}
	cmd.Flags().StringVar(&opts.Cmd, "cmd", "", "command line to run (default a login bash)")
	cmd.Flags().StringVarP(&opts.Cwd, "cwd", "w", "", "working directory (default the user's home)")
	return cmd
}

func runShell(ctx context.Context, x *cli, id string, opts client.PTYOptions) error {
	inFile, _ := x.in.(*os.File)
	outFile, _ := x.out.(*os.File)
	tty := inFile != nil && term.IsTerminal(int(inFile.Fd()))
	size := func() (int, int) {
		if outFile != nil {
			if cols, rows, err := term.GetSize(int(outFile.Fd())); err == nil {
				return cols, rows
			}
		}
		return 0, 0 // the server's default
	}
	opts.Cols, opts.Rows = size()

	p, err := x.c.PTY(ctx, id, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	if tty {
		old, err := term.MakeRaw(int(inFile.Fd()))
		if err != nil {
			return err
		}
		// Deferred: the terminal is restored on every way out, errors
		// included (signals end ctx, which ends Wait).
		defer func() { _ = term.Restore(int(inFile.Fd()), old) }()

		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer func() {
			signal.Stop(winch)
			close(winch) // ends the resize goroutine
		}()
		go func() {
			for range winch {
				if cols, rows := size(); cols > 0 {
					_ = p.Resize(cols, rows)
				}
			}
		}()
	}

	// Input: this goroutine may stay blocked reading stdin after the
	// session ends; the process exits right after, so that is harmless.
	go func() {
		_, err := io.Copy(p, x.in)
		if err == nil && !tty {
			_, _ = p.Write([]byte{4}) // end of input: Ctrl-D
		}
	}()
	outputDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(x.out, p)
		close(outputDone)
	}()

	code, waitErr := p.Wait()
	// The server closes after the exit message; let the last output
	// through before returning.
	select {
	case <-outputDone:
	case <-time.After(outputDrainTimeout):
	}
	if waitErr != nil {
		return waitErr
	}
	switch {
	case code < 0: // killed by a signal
		return &exitError{code: 137}
	case code != 0:
		return &exitError{code: code}
	}
	return nil
}
