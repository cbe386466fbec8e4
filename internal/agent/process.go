package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/agentbox/agentbox/api/proto/process"
)

const (
	// readChunk is the size of one output read and so the largest data
	// event. Output is streamed as it is read, never coalesced further.
	readChunk = 32 << 10
	// After the process exits, its output pipes may still be held open by
	// background children. Reading continues while data keeps arriving at
	// least every drainIdle, but never longer than drainMax after the exit,
	// so `cmd &` cannot keep the end event from being sent.
	drainIdle = 50 * time.Millisecond
	drainMax  = 2 * time.Second
)

// process is one child started through Start. Its events go through hub;
// its lifetime is owned by the goroutine running supervise.
type process struct {
	pid     int
	tag     *string
	config  *pb.ProcessConfig
	timeout time.Duration
	hub     *hub
	log     *slog.Logger

	outputs []output
	pty     *os.File // PTY master, nil without a PTY
	shim    *shim    // the process's supervisor, nil without one

	writeMu sync.Mutex // orders input writes
	stdin   atomic.Pointer[os.File]

	exited   atomic.Bool
	exitAt   atomic.Int64 // unix nanos of the exit, valid once exited
	timedOut atomic.Bool
	done     chan struct{}
}

// output is one stream the process writes to.
type output struct {
	f    *os.File
	wrap func([]byte) *pb.ProcessEvent_DataEvent
}

func stdoutEvent(b []byte) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
}

func stderrEvent(b []byte) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
}

func ptyEvent(b []byte) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
}

func newProcess(pid int, cio *childIO, cfg *pb.ProcessConfig, tag *string, timeout time.Duration, h *hub, log *slog.Logger) *process {
	p := &process{
		pid: pid, tag: tag, config: cfg, timeout: timeout, hub: h,
		log:  log.With("pid", pid),
		pty:  cio.pty,
		shim: cio.shim,
		done: make(chan struct{}),
	}
	if cio.pty != nil {
		p.outputs = []output{{cio.pty, ptyEvent}}
	} else {
		p.outputs = []output{{cio.stdout, stdoutEvent}, {cio.stderr, stderrEvent}}
	}
	if cio.stdin != nil {
		p.stdin.Store(cio.stdin)
	}
	return p
}

// supervise streams the process's output into its hub, enforces the
// timeout, waits for the exit status from the reaper and finally publishes
// the end event. forget runs after the end event was handed to every
// subscriber.
func (p *process) supervise(exit <-chan unix.WaitStatus, forget func()) {
	var wg sync.WaitGroup
	for _, o := range p.outputs {
		wg.Go(func() { p.pump(o) })
	}
	var timer *time.Timer
	if p.timeout > 0 {
		timer = time.AfterFunc(p.timeout, func() {
			// Once the leader is reaped its pid may eventually be reused;
			// a late timer must not signal somebody else's group.
			if p.exited.Load() {
				return
			}
			p.timedOut.Store(true)
			_ = p.signal(unix.SIGKILL) // it may have exited meanwhile
		})
	}

	ws := <-exit
	if timer != nil {
		timer.Stop()
	}
	p.exitAt.Store(time.Now().UnixNano())
	p.exited.Store(true)
	// Wake readers blocked on pipes that background children keep open;
	// they re-arm their deadline while data keeps flowing (see pump).
	for _, o := range p.outputs {
		_ = o.f.SetReadDeadline(time.Now().Add(drainIdle))
	}
	wg.Wait()
	for _, o := range p.outputs {
		o.f.Close()
	}
	if f := p.stdin.Swap(nil); f != nil {
		f.Close()
	}

	end := endEvent(ws, p.timedOut.Load() && ws.Signaled(), p.timeout)
	p.log.Debug("process ended", "status", end.GetStatus(), "exit_code", end.GetExitCode())
	// Out of the table before the end is told: a client that saw the end
	// never finds the process listed or attachable afterwards.
	forget()
	p.hub.finish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
	close(p.done)
}

// pump copies one output stream into the hub until EOF (EIO for a PTY
// whose terminal was closed) or until the post-exit drain ends.
func (p *process) pump(o output) {
	buf := make([]byte, readChunk)
	for {
		if p.exited.Load() {
			d := time.Now().Add(drainIdle)
			if limit := time.Unix(0, p.exitAt.Load()).Add(drainMax); d.After(limit) {
				d = limit
			}
			_ = o.f.SetReadDeadline(d)
		}
		n, err := o.f.Read(buf)
		if n > 0 {
			data := bytes.Clone(buf[:n])
			p.hub.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: o.wrap(data)}})
		}
		if err != nil {
			return
		}
	}
}

// endEvent renders a wait status the way Go's os.ProcessState does
// ("exit status 3", "signal: killed"). A process killed by a signal has
// exitCode -1 (as in upstream envd), never 128+n.
func endEvent(ws unix.WaitStatus, timedOut bool, timeout time.Duration) *pb.ProcessEvent_EndEvent {
	ev := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	switch {
	case timedOut:
		ev.Status = "killed"
		ev.Error = new(fmt.Sprintf("timeout after %v", timeout))
		return ev
	case ws.Exited():
		ev.Exited = true
		ev.ExitCode = int32(ws.ExitStatus())
		ev.Status = fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		ev.Status = "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			ev.Status += " (core dumped)"
		}
	default:
		ev.Status = fmt.Sprintf("unknown wait status %#x", uint32(ws))
	}
	if ev.ExitCode != 0 {
		// Upstream envd reports the wait error here for any failure.
		ev.Error = new(ev.Status)
	}
	return ev
}

// signal sends sig to the process's whole group (the process was made a
// group leader), so children it started are hit as well. SIGKILL (a kill
// or a timeout) ends the whole tree instead: also what left the group
// (setsid) or its parent (double fork), through the shim.
func (p *process) signal(sig unix.Signal) error {
	if sig == unix.SIGKILL && p.shim != nil && !p.exited.Load() {
		// The shim kills the group and everything that left it.
		err := p.shim.kill()
		if err == nil {
			return nil
		}
		p.log.Warn("exec shim did not take the kill; killing the process group", "err", err)
	}
	err := unix.Kill(-p.pid, sig)
	if errors.Is(err, unix.ESRCH) {
		return nil // everything in the group is gone already
	}
	if err != nil {
		return fmt.Errorf("signal process group %d: %w", p.pid, err)
	}
	return nil
}

// write sends input to the process: to the PTY if it has one, otherwise to
// its stdin pipe. The write is abandoned when ctx ends.
func (p *process) write(ctx context.Context, data []byte) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	f := p.pty
	if f == nil {
		f = p.stdin.Load()
	}
	if f == nil {
		return connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("process %d has no open stdin (start it with stdin enabled)", p.pid))
	}
	_ = f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := f.Write(data); err != nil {
		if ctx.Err() != nil {
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("write input to process %d: %w", p.pid, ctx.Err()))
		}
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("write input to process %d: %w", p.pid, err))
	}
	return nil
}

// closeStdin closes the stdin pipe; the process reads EOF. It does not
// wait for a blocked write, which fails instead.
func (p *process) closeStdin() error {
	if p.pty != nil {
		return connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("process %d runs in a PTY: send Ctrl-D (0x04) as input instead of closing stdin", p.pid))
	}
	if f := p.stdin.Swap(nil); f != nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("close stdin of process %d: %w", p.pid, err)
		}
	}
	return nil
}

// resize changes the PTY size.
func (p *process) resize(cols, rows uint32) error {
	if p.pty == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no PTY", p.pid))
	}
	if cols == 0 || rows == 0 || cols > 0xffff || rows > 0xffff {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid PTY size %dx%d", cols, rows))
	}
	if err := resizePTY(p.pty, uint16(cols), uint16(rows)); err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	return nil
}

// info describes the process for List.
func (p *process) info() *pb.ProcessInfo {
	return &pb.ProcessInfo{Config: p.config, Pid: uint32(p.pid), Tag: p.tag}
}
