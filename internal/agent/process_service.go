package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
)

// processService implements process.Process.
type processService struct {
	s *Server
}

var _ processconnect.ProcessHandler = (*processService)(nil)

// Start spawns the process and streams its events: start first, then
// output, then end. A client that goes away does not stop the process
// (E2B semantics): it keeps running and can be re-attached with Connect.
func (ps *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	p, sub, err := ps.s.startProcess(req.Header(), req.Msg)
	if err != nil {
		return err
	}
	defer sub.release()
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) }
	return streamEvents(ctx, p, sub, keepaliveInterval(req.Header()), send)
}

// Connect attaches to a running process; like Start it begins with a
// start event carrying the pid, then streams further output and the end.
func (ps *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub, ok := p.hub.subscribe()
	if !ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d has ended", p.pid))
	}
	defer sub.release()
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	return streamEvents(ctx, p, sub, keepaliveInterval(req.Header()), send)
}

// streamEvents sends the start event and then everything sub receives
// until the end event, interleaving keepalives when asked to.
func streamEvents(ctx context.Context, p *process, sub *subscriber, keepalive time.Duration, send func(*pb.ProcessEvent) error) error {
	start := &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}
	if err := send(start); err != nil {
		return err
	}
	var tick <-chan time.Time
	if keepalive > 0 {
		t := time.NewTicker(keepalive)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil {
				return nil
			}
		case <-tick:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-sub.evicted:
			return connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("event stream of process %d disconnected: client read too slowly for %v", p.pid, slowSubscriberTimeout))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// startProcess validates req, spawns the process and registers it. The
// returned subscriber was attached before the process could write
// anything, so no output is missed.
func (s *Server) startProcess(h http.Header, req *pb.StartRequest) (*process, *subscriber, error) {
	u, err := s.requestUser(h, basicAuthUser(h))
	if err != nil {
		return nil, nil, err
	}
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	cwd := cfg.Cwd
	if (cwd == nil || *cwd == "") && u.Workdir != "" {
		cwd = &u.Workdir // E2B's working directory (requestUser)
	}
	dir, err := s.processDir(u, cwd)
	if err != nil {
		return nil, nil, err
	}
	sr := spawnRequest{
		cmd: cfg.GetCmd(), args: cfg.GetArgs(), dir: dir, user: u,
		env: s.processEnv(u, cfg.GetEnvs(), req.Pty != nil),
		// Absent means true: upstream envd keeps stdin open for old SDKs.
		stdin: req.Stdin == nil || req.GetStdin(),
	}
	if req.Pty != nil {
		sr.pty = true
		sr.cols, sr.rows = clampSize(req.GetPty().GetSize().GetCols(), 80), clampSize(req.GetPty().GetSize().GetRows(), 24)
	}
	var timeout time.Duration
	if req.TimeoutMs != nil && req.GetTimeoutMs() > 0 {
		timeout = time.Duration(req.GetTimeoutMs()) * time.Millisecond
	}

	h2 := newHub()
	sub, _ := h2.subscribe()
	pid, exit, cio, err := s.spawn(sr)
	if err != nil {
		sub.release()
		return nil, nil, err
	}
	p := newProcess(pid, cio, cfg, req.Tag, timeout, h2, s.log)
	s.procs.add(p)
	go p.supervise(exit, func() { s.procs.remove(p) })
	s.log.Debug("process started", "pid", pid, "cmd", cfg.GetCmd(), "user", u.Name, "pty", sr.pty)
	return p, sub, nil
}

// processDir picks the working directory: the request's cwd resolved
// against the user's home, else the configured workdir, else the home.
func (s *Server) processDir(u *User, cwd *string) (string, error) {
	if cwd != nil && *cwd != "" {
		return u.resolvePath(*cwd)
	}
	if s.cfg.Workdir != "" {
		var ok bool
		_ = u.do(func() error {
			fi, err := os.Stat(s.cfg.Workdir)
			ok = err == nil && fi.IsDir()
			return nil
		})
		if ok {
			return s.cfg.Workdir, nil
		}
	}
	return u.Home, nil
}

func clampSize(v uint32, def uint16) uint16 {
	if v == 0 {
		return def
	}
	return uint16(min(v, 0xffff))
}

// keepaliveInterval reads E2B's Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	var secs int
	if _, err := fmt.Sscan(h.Get("Keepalive-Ping-Interval"), &secs); err != nil || secs <= 0 {
		return 0
	}
	return time.Duration(min(secs, 3600)) * time.Second
}

// List returns the running processes.
func (ps *processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	procs := ps.s.procs.list()
	out := make([]*pb.ProcessInfo, len(procs))
	for i, p := range procs {
		out[i] = p.info()
	}
	return connect.NewResponse(&pb.ListResponse{Processes: out}), nil
}

// Update resizes the process's PTY.
func (ps *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		size := req.Msg.GetPty().GetSize()
		if err := p.resize(size.GetCols(), size.GetRows()); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// SendInput writes one chunk of input.
func (ps *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(ctx, inputBytes(req.Msg.GetInput())); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a client stream of input in order. The first message
// must select the process.
func (ps *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *process
	for stream.Receive() {
		msg := stream.Msg()
		switch ev := msg.GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := ps.s.procs.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input stream must start with a start event selecting the process"))
			}
			if err := p.write(ctx, inputBytes(ev.Data.GetInput())); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Keepalive:
		}
	}
	if err := stream.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func inputBytes(in *pb.ProcessInput) []byte {
	if b := in.GetPty(); b != nil {
		return b
	}
	return in.GetStdin()
}

// CloseStdin closes the process's stdin.
func (ps *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// SendSignal signals the process's whole group.
func (ps *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	if err := p.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}
