package agentclient

import (
	"context"
	"errors"
	"io"
	"time"

	pb "github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
)

// Run starts a process, streams its output to stdout and stderr (PTY
// output goes to stdout; nil writers discard), feeds it stdin when not nil
// (then closes stdin), and returns how it ended.
//
// Run owns the process: if it returns early (ctx cancelled, a writer
// failed, the agent went away) it kills the process group. Reading stdin
// happens in a goroutine that may outlive Run while stdin.Read blocks.
func (c *Client) Run(ctx context.Context, opts StartOptions, stdin io.Reader, stdout, stderr io.Writer) (ExitResult, error) {
	if stdin != nil {
		opts.Stdin = true
	}
	p, err := c.Start(ctx, opts)
	if err != nil {
		return ExitResult{}, err
	}
	defer func() {
		if p.result == nil {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = c.Kill(kctx, p.pid)
			p.Close()
		}
	}()
	if stdin != nil {
		feedCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _ = c.feedStdin(feedCtx, p.pid, stdin) }()
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		ev, err := p.Next()
		if err != nil {
			return ExitResult{}, err
		}
		switch ev.Kind {
		case EventStdout, EventPTY:
			_, err = stdout.Write(ev.Data)
		case EventStderr:
			_, err = stderr.Write(ev.Data)
		case EventEnd:
			return *ev.End, nil
		}
		if err != nil {
			return ExitResult{}, mapError("run: write output", err)
		}
	}
}

// feedStdin copies r to the process over one ordered input stream, then
// closes the process's stdin. Errors after the process ended are expected
// (nobody reads any more) and are returned only for the record.
func (c *Client) feedStdin(ctx context.Context, pid uint32, r io.Reader) error {
	stream := c.proc.StreamInput(ctx)
	c.setHeaders(stream.RequestHeader(), "")
	sel := Selector{Pid: pid}.proto()
	err := stream.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}})
	buf := make([]byte, 32<<10)
	for err == nil {
		n, rerr := r.Read(buf)
		if n > 0 {
			data := &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: buf[:n]}}}
			err = stream.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: data}})
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				err = rerr
			}
			break
		}
	}
	if _, cerr := stream.CloseAndReceive(); err == nil {
		err = cerr
	}
	if err != nil {
		return mapError("stdin", err)
	}
	err = c.unary(ctx, processconnect.ProcessCloseStdinProcedure, "", &pb.CloseStdinRequest{Process: sel}, &pb.CloseStdinResponse{})
	return mapError("close stdin", err)
}
