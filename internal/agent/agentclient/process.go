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
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
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
	// Timeout makes the agent kill the process and everything it started
	// (detached or not) after this long
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
	c      *Client
	pid    uint32
	stream *frameStream
	result *ExitResult
	err    error
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
	fs, err := c.serverStream(ctx, processconnect.ProcessStartProcedure, opts.User, msg)
	if err != nil {
		return nil, mapError("start", err)
	}
	return c.attach(fs, "start")
}

// Connect attaches to a running process and streams its further output
// and its end (output produced before attaching is not replayed).
func (c *Client) Connect(ctx context.Context, sel Selector) (*Process, error) {
	fs, err := c.serverStream(ctx, processconnect.ProcessConnectProcedure, "", &pb.ConnectRequest{Process: sel.proto()})
	if err != nil {
		return nil, mapError("connect", err)
	}
	return c.attach(fs, "connect")
}

// recvEvent reads the next process event. Start and Connect responses are
// wire-identical (one ProcessEvent in field 1), so one type decodes both.
func recvEvent(fs *frameStream) (*pb.ProcessEvent, error) {
	var m pb.StartResponse
	if err := fs.recv(&m); err != nil {
		return nil, err
	}
	return m.GetEvent(), nil
}

// attach waits for the start event that opens every process stream.
func (c *Client) attach(fs *frameStream, op string) (*Process, error) {
	for {
		ev, err := recvEvent(fs)
		if err != nil {
			fs.close()
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended before the start event")
			}
			return nil, mapError(op, err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			return &Process{c: c, pid: e.Start.GetPid(), stream: fs}, nil
		case *pb.ProcessEvent_Keepalive:
			continue
		default:
			fs.close()
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
		ev, err := recvEvent(p.stream)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = sandbox.Errorf(sandbox.ClassUnavailable, "agent closed the event stream of process %d before it ended", p.pid)
			}
			p.err = mapError("process events", err)
			p.stream.close()
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
		if _, err := recvEvent(p.stream); err != nil {
			break
		}
	}
	p.stream.close()
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
		return p.stream.close()
	}
	return nil
}

// SendStdin writes data to the process's stdin (or its terminal).
func (p *Process) SendStdin(ctx context.Context, data []byte) error {
	return p.c.sendInput(ctx, Selector{Pid: p.pid}, data)
}

// CloseStdin closes the process's stdin so it reads EOF.
func (p *Process) CloseStdin(ctx context.Context) error {
	err := p.c.unary(ctx, processconnect.ProcessCloseStdinProcedure, "",
		&pb.CloseStdinRequest{Process: Selector{Pid: p.pid}.proto()}, &pb.CloseStdinResponse{})
	return mapError("close stdin", err)
}

// Signal sends SIGTERM or SIGKILL to the process's whole group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.c.Signal(ctx, Selector{Pid: p.pid}, sig)
}

// Resize changes the size of the process's terminal.
func (p *Process) Resize(ctx context.Context, cols, rows uint32) error {
	msg := &pb.UpdateRequest{Process: Selector{Pid: p.pid}.proto(), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: cols, Rows: rows}}}
	err := p.c.unary(ctx, processconnect.ProcessUpdateProcedure, "", msg, &pb.UpdateResponse{})
	return mapError("resize", err)
}

func (c *Client) sendInput(ctx context.Context, sel Selector, data []byte) error {
	msg := &pb.SendInputRequest{Process: sel.proto(), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: data}}}
	err := c.unary(ctx, processconnect.ProcessSendInputProcedure, "", msg, &pb.SendInputResponse{})
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
	err := c.unary(ctx, processconnect.ProcessSendSignalProcedure, "",
		&pb.SendSignalRequest{Process: sel.proto(), Signal: s}, &pb.SendSignalResponse{})
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
	var resp pb.ListResponse
	if err := c.unary(ctx, processconnect.ProcessListProcedure, "", &pb.ListRequest{}, &resp); err != nil {
		return nil, mapError("list", err)
	}
	out := make([]ProcessInfo, 0, len(resp.GetProcesses()))
	for _, p := range resp.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{
			Pid: p.GetPid(), Tag: p.GetTag(),
			Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(),
		})
	}
	return out, nil
}
