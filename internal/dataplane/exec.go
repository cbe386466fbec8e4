package dataplane

import (
	"context"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// ExecRequest is a command to run in a sandbox.
type ExecRequest struct {
	Cmd     []string
	Env     map[string]string
	Cwd     string
	Timeout time.Duration
	Stdin   []byte
	User    string
	// OpenStdin keeps the process's stdin open (Stdin nil) for input sent
	// while it runs, through the start event's Input.
	OpenStdin bool
}

// ExecEvent is one step of a streamed exec: the process started, produced
// output, or ended (Type "start", "stdout", "stderr", "exit").
type ExecEvent struct {
	Type   string
	Pid    uint32
	Data   []byte
	Result *ExecResult // for "exit"
	// Input writes to the process's stdin ("start" of an OpenStdin exec):
	// callable from any goroutine while the process runs.
	Input func(ctx context.Context, data []byte) error
}

// ExecResult is how a command ended, with the reasons a limit killed it.
type ExecResult struct {
	ExitCode     int
	Status       string
	TimedOut     bool
	OOMKilled    bool
	PidsLimitHit bool
	Duration     time.Duration
}

// maxExecStdin bounds stdin carried in a request body.
const maxExecStdin = 64 << 20

// stdinChunk is the most stdin sent to the agent in one message.
const stdinChunk = 1 << 20

// Exec runs req in the request's sandbox, calling emit for each event in
// order. If ctx ends (the client went away) the process group is killed. An
// error from emit aborts the run the same way.
func (r *Request) Exec(ctx context.Context, req ExecRequest, emit func(ExecEvent) error) (ExecResult, error) {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return ExecResult{}, sandbox.Invalid("cmd", "cmd must name a program")
	}
	if len(req.Stdin) > maxExecStdin {
		return ExecResult{}, sandbox.Errorf(sandbox.ClassTooLarge, "stdin is larger than %d MiB", maxExecStdin>>20)
	}
	if req.Timeout < 0 {
		return ExecResult{}, sandbox.Invalid("timeout", "timeout must be positive")
	}
	if req.Timeout == 0 {
		req.Timeout = r.s.cfg.DefaultExecTimeout
	}
	timeout, err := r.boundedByLife(ctx, req.Timeout)
	if err != nil {
		return ExecResult{}, err
	}
	req.Timeout = timeout
	client := r.client
	beforeOOM, beforePids, haveStats := r.s.sandboxes.LimitCounters(ctx, r.id)
	start := time.Now()
	opts := agentclient.StartOptions{Cmd: req.Cmd[0], Args: req.Cmd[1:], Env: req.Env, Cwd: req.Cwd,
		User: req.User, Timeout: req.Timeout, Stdin: req.Stdin != nil || req.OpenStdin}
	p, err := client.Start(ctx, opts)
	if err != nil {
		return ExecResult{}, err
	}
	defer p.Close()
	finished := false
	// Every command that started goes into the history, however it ended.
	var ended *ExecResult
	var runErr error
	defer func() { r.recordExec(start, req.Cmd, ended, runErr) }()
	defer func() {
		if !finished {
			// Client gone or emit failed: the command must not linger.
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = client.Kill(kctx, p.Pid())
			cancel()
		}
	}()
	started := ExecEvent{Type: "start", Pid: p.Pid()}
	if req.OpenStdin && req.Stdin == nil {
		started.Input = p.SendStdin
	}
	if err := emit(started); err != nil {
		return ExecResult{}, err
	}
	if req.Stdin != nil {
		go func() {
			// In pieces: one message would be marshalled (copied) whole.
			for in := req.Stdin; len(in) > 0; {
				n := min(len(in), stdinChunk)
				if err := p.SendStdin(ctx, in[:n]); err != nil {
					return
				}
				in = in[n:]
			}
			_ = p.CloseStdin(ctx)
		}()
	}
	for {
		ev, err := p.Next()
		if err != nil {
			runErr = err
			return ExecResult{}, err
		}
		switch ev.Kind {
		case agentclient.EventStdout, agentclient.EventPTY:
			if err := emit(ExecEvent{Type: "stdout", Data: ev.Data}); err != nil {
				return ExecResult{}, err
			}
		case agentclient.EventStderr:
			if err := emit(ExecEvent{Type: "stderr", Data: ev.Data}); err != nil {
				return ExecResult{}, err
			}
		case agentclient.EventEnd:
			finished = true
			res := r.ended(ctx, req.Cmd, *ev.End, time.Since(start), beforeOOM, beforePids, haveStats)
			ended = &res
			return res, emit(ExecEvent{Type: "exit", Result: &res})
		}
	}
}

// ended is how a command of the request's sandbox ended, with the limits
// that killed it (from the sandbox's counters before it started, when
// haveStats), counted in the exec metrics and reported (the sandbox's log,
// the process_killed event): one place for every door that runs commands.
func (r *Request) ended(ctx context.Context, cmd []string, end agentclient.ExitResult, took time.Duration, beforeOOM, beforePids int64, haveStats bool) ExecResult {
	res := ExecResult{ExitCode: end.ExitCode, Status: end.Status, Duration: took}
	res.TimedOut = !end.Exited && strings.HasPrefix(end.Error, "timeout")
	if haveStats {
		if oom, pids, ok := r.s.sandboxes.LimitCounters(context.WithoutCancel(ctx), r.id); ok {
			res.OOMKilled = oom > beforeOOM
			res.PidsLimitHit = pids > beforePids
		}
	}
	r.s.execSeconds.Observe(took.Seconds())
	if res.OOMKilled {
		r.s.sandboxes.Log(r.id, "warn", "a process was killed by the out-of-memory killer", map[string]any{"cmd": cmd})
	}
	if lr, ok := r.s.sandboxes.(LimitReporter); ok && (res.OOMKilled || res.PidsLimitHit) {
		lr.LimitHit(r.id, res.OOMKilled, res.ExitCode, cmd)
	}
	return res
}

// boundedByLife shortens timeout so that it ends with the sandbox: a
// command or execution cannot outlive it.
func (r *Request) boundedByLife(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	rec, err := r.s.sandboxes.Get(ctx, r.owner, r.id)
	if err != nil {
		return 0, err
	}
	if left := time.Until(rec.EndAt); !rec.EndAt.IsZero() && left < timeout {
		timeout = max(left, time.Second)
	}
	return timeout, nil
}

// BufferedExec is the outcome of ExecBuffered.
type BufferedExec struct {
	ExecResult
	Stdout, Stderr []byte
	Truncated      bool
}

// ExecBuffered runs req and collects its output, each stream capped at the
// configured maximum (truncation is reported, not an error). The output
// buffers are charged to the request first, until its End: the caller
// holds them until its answer is written.
func (r *Request) ExecBuffered(ctx context.Context, req ExecRequest) (*BufferedExec, error) {
	limit := r.s.cfg.MaxExecOutput
	if err := r.Reserve(2 * limit); err != nil {
		return nil, err
	}
	out, errb := cappedBuffer{max: int(limit)}, cappedBuffer{max: int(limit)}
	res, err := r.Exec(ctx, req, func(ev ExecEvent) error {
		switch ev.Type {
		case "stdout":
			out.write(ev.Data)
		case "stderr":
			errb.write(ev.Data)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &BufferedExec{ExecResult: res, Stdout: out.buf, Stderr: errb.buf,
		Truncated: out.truncated || errb.truncated}, nil
}

// smallOutput is how far a buffered stream grows by doubling; past it the
// buffer goes straight to the cap. Output is usually small, and a large one
// then costs the cap plus this much, instead of the 1.5 to 3 times of
// growing by doubling (old and new arrays alive together, capacity past
// the cap).
const smallOutput = 1 << 20

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

func (c *cappedBuffer) write(p []byte) {
	if room := c.max - len(c.buf); len(p) > room {
		c.truncated = true
		p = p[:max(room, 0)]
	}
	if len(c.buf)+len(p) > cap(c.buf) {
		want := max(2*cap(c.buf), len(c.buf)+len(p), 4<<10)
		if want > smallOutput {
			want = c.max
		}
		grown := make([]byte, len(c.buf), min(want, c.max))
		copy(grown, c.buf)
		c.buf = grown
	}
	c.buf = append(c.buf, p...)
}
