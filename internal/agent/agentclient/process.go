package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"syscall"
	"time"

	pb "github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// StartOptions describes a process to start.
type StartOptions struct {
	Cmd  string   // executable; looked up in the process's PATH without a slash
	Args []string // arguments after argv[0]
	Env  map[string]string
	Cwd  string // relative paths resolve against the user's home; "" = agent default
	User string // "" = the agent's own user
	Tag  string // optional label usable to Connect or List
	// Stdin keeps a stdin pipe open for SendStdin/CloseStdin; otherwise
	// the process reads /dev/null.
	Stdin bool
	// PTY runs the process in a pseudo-terminal of this size; output then
	// arrives as EventPTY and input goes to the terminal.
	PTY *PTYSize
	// Timeout makes the agent kill the whole process group after this long
	// (the exit result then has Exited=false, Status "killed").
	Timeout time.Duration
}

// PTYSize is a terminal size in character cells.
type PTYSize struct {
	Cols, Rows uint32
}

// EventKind says what an Event carries.
type EventKind int

const (
	EventStdout EventKind = iota + 1
	EventStderr
	EventPTY
	EventEnd
)

// Event is one thing that happened to a process: output or its end.
type Event struct {
	Kind EventKind
	Data []byte      // output for EventStdout, EventStderr, EventPTY
	End  *ExitResult // set for EventEnd
}

// ExitResult is how a process ended.
type ExitResult struct {
	// ExitCode is the exit status; -1 when the process was killed by a
	// signal (including the timeout kill).
	ExitCode int
	Exited   bool   // true if the process exited by itself
	Status   string // "exit status 3", "signal: killed", "killed" (timeout)
	Error    string // failure description, empty on success
}

// Selector picks a running process by pid or by tag (pid wins when set).
type Selector struct {
	Pid uint32
	Tag string
}

func (s Selector) proto() *pb.ProcessSelector {
	if s.Pid != 0 || s.Tag == "" {
		return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: s.Pid}}
	}
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: s.Tag}}
}

// Process is a started (or attached) process and its event stream.
// Reading events (Next, Events, Wait) must happen from one goroutine; the
// control methods (SendStdin, Signal, ...) may be called concurrently.
// Closing the stream does not stop the process.
type Process struct {
	c       *Client
	pid     uint32
	recv    func() (*pb.ProcessEvent, error)
	closeFn func() error
	result  *ExitResult
	err     error
}

// Pid returns the process id inside the sandbox.
func (p *Process) Pid() uint32 { return p.pid }

// Start starts a process and returns once the agent reported its pid.
// ctx bounds the event stream (not the process: use Timeout or Signal).
func (c *Client) Start(ctx context.Context, opts StartOptions) (*Process, error) {
	msg := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: opts.Cmd, Args: opts.Args, Envs: opts.Env},
		Stdin:   &opts.Stdin,
	}
	if opts.Cwd != "" {
		msg.Process.Cwd = &opts.Cwd
	}
	if opts.Tag != "" {
		msg.Tag = &opts.Tag
	}
	if opts.PTY != nil {
		msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: opts.PTY.Cols, Rows: opts.PTY.Rows}}
	}
	if opts.Timeout > 0 {
		ms := uint32(min(max(opts.Timeout.Milliseconds(), 1), int64(^uint32(0))))
		msg.TimeoutMs = &ms
	}
	stream, err := c.proc.Start(ctx, newRequest(c, msg, opts.User))
	if err != nil {
		return nil, mapError("start", err)
	}
	recv := func() (*pb.ProcessEvent, error) {
		if stream.Receive() {
			return stream.Msg().GetEvent(), nil
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	return c.attach(recv, stream.Close, "start")
}

// Connect attaches to a running process and streams its further output
// and its end (output produced before attaching is not replayed).
func (c *Client) Connect(ctx context.Context, sel Selector) (*Process, error) {
	stream, err := c.proc.Connect(ctx, newRequest(c, &pb.ConnectRequest{Process: sel.proto()}, ""))
	if err != nil {
		return nil, mapError("connect", err)
	}
	recv := func() (*pb.ProcessEvent, error) {
		if stream.Receive() {
			return stream.Msg().GetEvent(), nil
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	return c.attach(recv, stream.Close, "connect")
}

// attach waits for the start event that opens every process stream.
func (c *Client) attach(recv func() (*pb.ProcessEvent, error), closeFn func() error, op string) (*Process, error) {
	for {
		ev, err := recv()
		if err != nil {
			closeFn()
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended before the start event")
			}
			return nil, mapError(op, err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			return &Process{c: c, pid: e.Start.GetPid(), recv: recv, closeFn: closeFn}, nil
		case *pb.ProcessEvent_Keepalive:
			continue
		default:
			closeFn()
			return nil, mapError(op, fmt.Errorf("unexpected first event %T", e))
		}
	}
}

// Next returns the next output or end event, skipping keepalives. After
// the end event it returns io.EOF.
func (p *Process) Next() (Event, error) {
	if p.result != nil {
		return Event{}, io.EOF
	}
	if p.err != nil {
		return Event{}, p.err
	}
	for {
		ev, err := p.recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = sandbox.Errorf(sandbox.ClassUnavailable, "agent closed the event stream of process %d before it ended", p.pid)
			}
			p.err = mapError("process events", err)
			p.closeFn()
			return Event{}, p.err
		}
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Data:
			switch out := e.Data.GetOutput().(type) {
			case *pb.ProcessEvent_DataEvent_Stdout:
				return Event{Kind: EventStdout, Data: out.Stdout}, nil
			case *pb.ProcessEvent_DataEvent_Stderr:
				return Event{Kind: EventStderr, Data: out.Stderr}, nil
			case *pb.ProcessEvent_DataEvent_Pty:
				return Event{Kind: EventPTY, Data: out.Pty}, nil
			}
		case *pb.ProcessEvent_End:
			end := e.End
			p.result = &ExitResult{
				ExitCode: int(end.GetExitCode()), Exited: end.GetExited(),
				Status: end.GetStatus(), Error: end.GetError(),
			}
			p.finishStream()
			return Event{Kind: EventEnd, End: p.result}, nil
		}
	}
}

// finishStream reads the end-of-stream frame that follows the end event
// before closing, so the HTTP connection goes back to the pool instead of
// being torn down (a new dial would cost every following call).
func (p *Process) finishStream() {
	for range 4 {
		if _, err := p.recv(); err != nil {
			break
		}
	}
	p.closeFn()
}

// Events iterates over Next until the end event (included) or an error.
func (p *Process) Events() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			ev, err := p.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil || ev.Kind == EventEnd {
				return
			}
		}
	}
}

// Wait discards the remaining output and returns how the process ended.
// The error is about the stream (agent gone, ctx cancelled), not the exit
// status.
func (p *Process) Wait() (ExitResult, error) {
	for p.result == nil {
		if _, err := p.Next(); err != nil {
			return ExitResult{}, err
		}
	}
	return *p.result, nil
}

// Close detaches from the event stream; the process keeps running.
func (p *Process) Close() error {
	if p.result == nil && p.err == nil {
		p.err = errors.New("process stream closed")
		return p.closeFn()
	}
	return nil
}

// SendStdin writes data to the process's stdin (or its terminal).
func (p *Process) SendStdin(ctx context.Context, data []byte) error {
	return p.c.sendInput(ctx, Selector{Pid: p.pid}, data)
}

// CloseStdin closes the process's stdin so it reads EOF.
func (p *Process) CloseStdin(ctx context.Context) error {
	_, err := p.c.proc.CloseStdin(ctx, newRequest(p.c, &pb.CloseStdinRequest{Process: Selector{Pid: p.pid}.proto()}, ""))
	return mapError("close stdin", err)
}

// Signal sends SIGTERM or SIGKILL to the process's whole group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.c.Signal(ctx, Selector{Pid: p.pid}, sig)
}

// Resize changes the size of the process's terminal.
func (p *Process) Resize(ctx context.Context, cols, rows uint32) error {
	msg := &pb.UpdateRequest{Process: Selector{Pid: p.pid}.proto(), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: cols, Rows: rows}}}
	_, err := p.c.proc.Update(ctx, newRequest(p.c, msg, ""))
	return mapError("resize", err)
}

func (c *Client) sendInput(ctx context.Context, sel Selector, data []byte) error {
	msg := &pb.SendInputRequest{Process: sel.proto(), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: data}}}
	_, err := c.proc.SendInput(ctx, newRequest(c, msg, ""))
	return mapError("send input", err)
}

// Signal sends SIGTERM or SIGKILL to the selected process's group.
func (c *Client) Signal(ctx context.Context, sel Selector, sig syscall.Signal) error {
	var s pb.Signal
	switch sig {
	case syscall.SIGKILL:
		s = pb.Signal_SIGNAL_SIGKILL
	case syscall.SIGTERM:
		s = pb.Signal_SIGNAL_SIGTERM
	default:
		return sandbox.Errorf(sandbox.ClassInvalid, "signal %v is not supported (SIGTERM or SIGKILL)", sig)
	}
	_, err := c.proc.SendSignal(ctx, newRequest(c, &pb.SendSignalRequest{Process: sel.proto(), Signal: s}, ""))
	return mapError("signal", err)
}

// Kill sends SIGKILL to the process group of pid.
func (c *Client) Kill(ctx context.Context, pid uint32) error {
	return c.Signal(ctx, Selector{Pid: pid}, syscall.SIGKILL)
}

// ProcessInfo describes a running process.
type ProcessInfo struct {
	Pid  uint32
	Tag  string
	Cmd  string
	Args []string
	Env  map[string]string
	Cwd  string
}

// List returns the processes the agent tracks (those still running).
func (c *Client) List(ctx context.Context) ([]ProcessInfo, error) {
	resp, err := c.proc.List(ctx, newRequest(c, &pb.ListRequest{}, ""))
	if err != nil {
		return nil, mapError("list", err)
	}
	out := make([]ProcessInfo, 0, len(resp.Msg.GetProcesses()))
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{
			Pid: p.GetPid(), Tag: p.GetTag(),
			Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(),
		})
	}
	return out, nil
}
