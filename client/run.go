package client

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Run runs a command in sandbox id, copying its output to stdout and
// stderr as it arrives (nil writers discard), and returns how it ended. A
// non-zero exit code is not an error. A failed write kills the command and
// returns the write error. Cancelling ctx kills the command.
func (c *Client) Run(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (ExitInfo, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	s, err := c.ExecStream(ctx, id, req)
	if err != nil {
		return ExitInfo{}, err
	}
	defer s.Close()
	for ev, err := range s.Events() {
		if err != nil {
			return ExitInfo{}, fmt.Errorf("exec in sandbox %s: %w", id, err)
		}
		var w io.Writer
		switch ev.Type {
		case EventStdout:
			w = stdout
		case EventStderr:
			w = stderr
		default:
			continue
		}
		if _, err := io.WriteString(w, ev.Data); err != nil {
			return ExitInfo{}, fmt.Errorf("exec in sandbox %s: write %s: %w", id, ev.Type, err)
		}
	}
	x, ok := s.Exit()
	if !ok {
		// Events only ends cleanly after the exit event.
		return ExitInfo{}, errors.New("exec stream ended without an exit event")
	}
	return x, nil
}
