package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
)

// processBridge is envd's process service over the toolbox's own
// streaming parts: a command without a terminal runs as an async command
// of a toolbox session of its own, its output followed over the logs
// WebSocket as it comes (stdout and stderr apart) and its stdin fed
// through the command's input route; a command with a terminal is a
// toolbox PTY session over its WebSocket. The bridge keeps a table of
// what it started (pid -> the session or PTY) for input, signals,
// resizes and listing; attaching to a running process (Connect) is not
// bridged.
type processBridge struct {
	processconnect.UnimplementedProcessHandler
	br *bridge
}

// Daytona's PTY WebSocket subprotocols (the ones agentbox's Daytona
// server speaks): the exit control frame, and the env as a token.
const (
	ptyExitControl  = "X-Daytona-Pty-Exit-Control"
	ptyEnvsProtocol = "X-Daytona-Pty-Envs~"
)

// The markers that lead each run of a followed session log.
var (
	stdoutMarker = []byte{1, 1, 1}
	stderrMarker = []byte{2, 2, 2}
)

// stdinEOF is the line that ends a bridged command's stdin: every other
// line the bridge sends is base64 (a chunk of input), which the wrapper
// decodes into the command's stdin, so a close of stdin is a line that
// cannot be a chunk.
const stdinEOF = "."

// stdinWrapper feeds the command $1 the base64 lines of its stdin until
// the EOF line (or the session's stdin ends).
const stdinWrapper = `while IFS= read -r __l; do [ "$__l" = "` + stdinEOF + `" ] && break; printf %s "$__l" | base64 -d; done | `

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// bproc is one process the bridge started.
type bproc struct {
	pid     uint32
	sandbox string // the agentbox sandbox it runs in
	cfg     *process.ProcessConfig
	tag     string
	base    string // the sandbox's toolbox base URL
	// A terminal: the PTY session and its socket.
	ptyID string
	ws    *websocket.Conn
	// No terminal: the session and its command.
	session, cmdID string
	stdin          bool

	inMu   sync.Mutex // keeps input in order
	killed chan struct{}
	once   sync.Once
}

func (p *bproc) markKilled() { p.once.Do(func() { close(p.killed) }) }

type procTable struct {
	mu   sync.Mutex
	next uint32
	byID map[uint32]*bproc
}

func (t *procTable) add(p *bproc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID = map[uint32]*bproc{}
	}
	t.next++
	p.pid = t.next
	t.byID[p.pid] = p
}

func (t *procTable) drop(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID, pid)
}

// find is the process sel names (by pid, or the oldest with its tag).
func (t *procTable) find(sel *process.ProcessSelector) (*bproc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tag := sel.GetTag(); tag != "" {
		var best *bproc
		for _, p := range t.byID {
			if p.tag == tag && (best == nil || p.pid < best.pid) {
				best = p
			}
		}
		if best != nil {
			return best, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no process tagged %q", tag))
	}
	if p, ok := t.byID[sel.GetPid()]; ok {
		return p, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d not found", sel.GetPid()))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// header is what every toolbox call carries: the operator's key.
func (a *api) header() http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+a.key)
	h.Set("X-Daytona-Source", "agentbox")
	return h
}

// dialWS opens a toolbox WebSocket at the http(s) URL u.
func (br *bridge) dialWS(ctx context.Context, u string, protocols []string) (*websocket.Conn, error) {
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	// The socket lives as long as the process: the client must have no
	// overall timeout (the dial is bounded by ctx).
	hc := &http.Client{Transport: br.b.cfg.HTTPClient.Transport}
	conn, resp, err := websocket.Dial(ctx, u, //nolint:bodyclose // the library closes the handshake's body ("you never need to close resp.Body")
		&websocket.DialOptions{HTTPClient: hc, HTTPHeader: br.b.api.header(), Subprotocols: protocols})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, classify(br.b.api.provider, resp, http.StatusText(resp.StatusCode))
		}
		return nil, fmt.Errorf("the sandbox provider %s: open a toolbox socket: %w", br.b.api.provider, redact(err))
	}
	conn.SetReadLimit(16 << 20)
	return conn, nil
}

func startEvent(pid uint32) *process.StartResponse {
	return &process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}}
}

func dataEvent(out *process.ProcessEvent_DataEvent) *process.StartResponse {
	return &process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: out}}}
}

func endEvent(end *process.ProcessEvent_EndEvent) *process.StartResponse {
	return &process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}}
}

// commandLine is the process as one shell command: its words quoted,
// after a cd to its directory and exports of its env.
func commandLine(pc *process.ProcessConfig) (string, error) {
	var b strings.Builder
	if pc.Cwd != nil && pc.GetCwd() != "" {
		b.WriteString("cd " + shellQuote(pc.GetCwd()) + " && ")
	}
	keys := make([]string, 0, len(pc.GetEnvs()))
	for k := range pc.GetEnvs() {
		if !envName.MatchString(k) {
			return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("env name %q is not a shell name", k))
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString("export " + k + "=" + shellQuote(pc.GetEnvs()[k]) + "; ")
	}
	b.WriteString(shellQuote(pc.GetCmd()))
	for _, a := range pc.GetArgs() {
		b.WriteString(" " + shellQuote(a))
	}
	return b.String(), nil
}

func (p *processBridge) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	pc := req.Msg.GetProcess()
	if pc == nil || pc.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	base, err := p.br.target(req.Header())
	if err != nil {
		return connectErr(err)
	}
	if t := req.Msg.GetTimeoutMs(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Millisecond)
		defer cancel()
	}
	bp := &bproc{sandbox: req.Header().Get(headerSandbox), cfg: pc, tag: req.Msg.GetTag(), base: base, killed: make(chan struct{}), stdin: req.Msg.GetStdin()}
	if req.Msg.Pty != nil {
		return p.startPTY(ctx, req.Msg.GetPty(), bp, stream)
	}
	return p.startSession(ctx, bp, stream)
}

// startSession runs the process as an async command of a session of its
// own and streams its log; the session is deleted at the end.
func (p *processBridge) startSession(ctx context.Context, bp *bproc, stream *connect.ServerStream[process.StartResponse]) error {
	api := p.br.b.api
	line, err := commandLine(bp.cfg)
	if err != nil {
		return err
	}
	if bp.stdin {
		line = stdinWrapper + "{ " + line + "; }"
	} else {
		line = "{ " + line + "; } </dev/null"
	}
	bp.session = "agentbox-" + randomHex(8)
	sessURL := bp.base + "/process/session"
	if err := api.call(ctx, http.MethodPost, sessURL, map[string]string{"sessionId": bp.session}, nil); err != nil {
		return connectErr(err)
	}
	sessionOf := sessURL + "/" + url.PathEscape(bp.session)
	// The session goes once the command ended, off the caller's path (a
	// delete is another round trip, and a command in the sandbox at an
	// agentbox provider); bounded, and a session left by a failed delete
	// dies with its sandbox.
	defer func() {
		go func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := api.call(dctx, http.MethodDelete, sessionOf, nil, nil); err != nil {
				p.br.b.log.Debug("delete a bridged session", "session", bp.session, "err", err)
			}
		}()
	}()
	var started struct {
		CmdID string `json:"cmdId"`
	}
	if err := api.call(ctx, http.MethodPost, sessionOf+"/exec", map[string]any{"command": line, "runAsync": true}, &started); err != nil {
		return connectErr(err)
	}
	if started.CmdID == "" {
		return connect.NewError(connect.CodeUnavailable, errors.New("the provider answered an async command without its id"))
	}
	bp.cmdID = started.CmdID
	cmdURL := sessionOf + "/command/" + url.PathEscape(bp.cmdID)
	p.br.procs.add(bp)
	defer p.br.procs.drop(bp.pid)
	if err := stream.Send(startEvent(bp.pid)); err != nil {
		return err
	}
	ws, err := p.br.dialWS(ctx, cmdURL+"/logs?follow=true", nil)
	if err != nil {
		return p.ended(ctx, bp, stream, err)
	}
	defer ws.CloseNow()
	stderr := false
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				return p.ended(ctx, bp, stream, err)
			}
			break
		}
		for len(data) > 0 {
			switch {
			case bytes.HasPrefix(data, stdoutMarker):
				stderr, data = false, data[len(stdoutMarker):]
				continue
			case bytes.HasPrefix(data, stderrMarker):
				stderr, data = true, data[len(stderrMarker):]
				continue
			}
			// Up to the next marker, if any.
			n := len(data)
			if i := bytes.Index(data, stdoutMarker); i > 0 {
				n = i
			}
			if i := bytes.Index(data[:n], stderrMarker); i > 0 {
				n = i
			}
			chunk := bytes.Clone(data[:n])
			data = data[n:]
			ev := &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: chunk}}
			if stderr {
				ev = &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: chunk}}
			}
			if err := stream.Send(dataEvent(ev)); err != nil {
				return err
			}
		}
	}
	// The log ended with the command: its exit code (it may take a moment
	// to be recorded).
	for i := 0; i < 200; i++ {
		var c struct {
			ExitCode *int `json:"exitCode"`
		}
		if err := api.call(ctx, http.MethodGet, cmdURL, nil, &c); err != nil {
			return p.ended(ctx, bp, stream, err)
		}
		if c.ExitCode != nil {
			return stream.Send(endEvent(exitEnd(*c.ExitCode)))
		}
		select {
		case <-ctx.Done():
			return p.ended(ctx, bp, stream, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
	return stream.Send(endEvent(&process.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown", Error: strPtr("the provider did not report the command's exit code")}))
}

func exitEnd(code int) *process.ProcessEvent_EndEvent {
	return &process.ProcessEvent_EndEvent{ExitCode: int32(code), Exited: true, Status: fmt.Sprintf("exit status %d", code)}
}

// ended answers a process the bridge lost: killed (a signal or its
// timeout) or the provider's failure.
func (p *processBridge) ended(ctx context.Context, bp *bproc, stream *connect.ServerStream[process.StartResponse], err error) error {
	select {
	case <-bp.killed:
		return stream.Send(endEvent(&process.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}))
	default:
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return stream.Send(endEvent(&process.ProcessEvent_EndEvent{ExitCode: -1, Status: "killed", Error: strPtr("timeout")}))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return stream.Send(endEvent(&process.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown", Error: strPtr(fmt.Sprintf("the provider's stream ended: %v", err))}))
}

// shells are the commands a Daytona PTY already is (its login shell);
// any other command is exec'd in it.
var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "ash": true, "dash": true}

// startPTY opens a toolbox PTY session and relays its terminal; the
// session is killed when the stream ends before the shell exits.
func (p *processBridge) startPTY(ctx context.Context, size *process.PTY, bp *bproc, stream *connect.ServerStream[process.StartResponse]) error {
	api := p.br.b.api
	bp.ptyID = "agentbox-" + randomHex(8)
	q := url.Values{"id": {bp.ptyID}}
	if s := size.GetSize(); s != nil && s.GetCols() > 0 && s.GetRows() > 0 {
		q.Set("cols", strconv.Itoa(int(s.GetCols())))
		q.Set("rows", strconv.Itoa(int(s.GetRows())))
	}
	pc := bp.cfg
	if pc.Cwd != nil && pc.GetCwd() != "" {
		q.Set("cwd", pc.GetCwd())
	}
	protocols := []string{ptyExitControl}
	if len(pc.GetEnvs()) > 0 {
		raw, err := json.Marshal(pc.GetEnvs())
		if err != nil {
			return err
		}
		protocols = append(protocols, ptyEnvsProtocol+base64.RawURLEncoding.EncodeToString(raw))
	}
	ws, err := p.br.dialWS(ctx, bp.base+"/process/pty/create-connect?"+q.Encode(), protocols)
	if err != nil {
		return connectErr(err)
	}
	defer ws.CloseNow()
	bp.ws = ws
	exited := false
	defer func() {
		if exited {
			return
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := api.call(kctx, http.MethodDelete, bp.base+"/process/pty/"+url.PathEscape(bp.ptyID), nil, nil); err != nil {
			p.br.b.log.Debug("kill a bridged PTY", "pty", bp.ptyID, "err", err)
		}
	}()
	p.br.procs.add(bp)
	defer p.br.procs.drop(bp.pid)
	if err := stream.Send(startEvent(bp.pid)); err != nil {
		return err
	}
	shell := shells[path.Base(pc.GetCmd())]
	for _, a := range pc.GetArgs() {
		if a == "-c" {
			shell = false
		}
	}
	if !shell {
		words := []string{"exec", shellQuote(pc.GetCmd())}
		for _, a := range pc.GetArgs() {
			words = append(words, shellQuote(a))
		}
		if err := bp.input(ctx, api, []byte(strings.Join(words, " ")+"\n")); err != nil {
			return connectErr(err)
		}
	}
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return p.ended(ctx, bp, stream, err)
		}
		if typ == websocket.MessageText {
			var ctl struct {
				Type       string `json:"type"`
				Status     string `json:"status"`
				ExitCode   *int   `json:"exitCode"`
				ExitReason string `json:"exitReason"`
			}
			if json.Unmarshal(data, &ctl) == nil && ctl.Type == "control" {
				if ctl.Status != "exited" {
					continue
				}
				exited = true
				end := exitEnd(0)
				if ctl.ExitCode != nil {
					end = exitEnd(*ctl.ExitCode)
				}
				if ctl.ExitReason != "" {
					end.Exited, end.Status = false, ctl.ExitReason
				}
				return stream.Send(endEvent(end))
			}
		}
		if err := stream.Send(dataEvent(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: bytes.Clone(data)}})); err != nil {
			return err
		}
	}
}

// input writes data to the process: its terminal, or (base64, one line a
// chunk) its command's stdin.
func (bp *bproc) input(ctx context.Context, a *api, data []byte) error {
	bp.inMu.Lock()
	defer bp.inMu.Unlock()
	if bp.ws != nil {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return bp.ws.Write(wctx, websocket.MessageBinary, data)
	}
	if !bp.stdin {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("the process was started without stdin"))
	}
	const chunk = 48 << 10
	for len(data) > 0 {
		n := min(len(data), chunk)
		if err := bp.sendLine(ctx, a, base64.StdEncoding.EncodeToString(data[:n])); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (bp *bproc) sendLine(ctx context.Context, a *api, line string) error {
	u := bp.base + "/process/session/" + url.PathEscape(bp.session) + "/command/" + url.PathEscape(bp.cmdID) + "/input"
	return a.call(ctx, http.MethodPost, u, map[string]string{"data": line + "\n"}, nil)
}

func (p *processBridge) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	bp, err := p.br.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	in := req.Msg.GetInput()
	data := in.GetStdin()
	if in.GetPty() != nil {
		data = in.GetPty()
	}
	if err := bp.input(ctx, p.br.b.api, data); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p *processBridge) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	var bp *bproc
	for stream.Receive() {
		msg := stream.Msg()
		if s := msg.GetStart(); s != nil {
			var err error
			if bp, err = p.br.procs.find(s.GetProcess()); err != nil {
				return nil, err
			}
			continue
		}
		d := msg.GetData()
		if d == nil {
			continue
		}
		if bp == nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input before the start event"))
		}
		data := d.GetInput().GetStdin()
		if d.GetInput().GetPty() != nil {
			data = d.GetInput().GetPty()
		}
		if err := bp.input(ctx, p.br.b.api, data); err != nil {
			return nil, connectErr(err)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (p *processBridge) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	bp, err := p.br.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if bp.ws != nil || !bp.stdin {
		return connect.NewResponse(&process.CloseStdinResponse{}), nil
	}
	bp.inMu.Lock()
	defer bp.inMu.Unlock()
	if err := bp.sendLine(ctx, p.br.b.api, stdinEOF); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// SendSignal kills the process (SIGTERM and SIGKILL alike: the toolbox
// has one kill): its PTY session, or its command's session.
func (p *processBridge) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	bp, err := p.br.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	bp.markKilled()
	u := bp.base + "/process/session/" + url.PathEscape(bp.session)
	if bp.ws != nil {
		u = bp.base + "/process/pty/" + url.PathEscape(bp.ptyID)
	}
	if err := p.br.b.api.call(ctx, http.MethodDelete, u, nil, nil); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// Update resizes a process's terminal.
func (p *processBridge) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	bp, err := p.br.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	s := req.Msg.GetPty().GetSize()
	if bp.ws == nil || s == nil {
		return connect.NewResponse(&process.UpdateResponse{}), nil
	}
	u := bp.base + "/process/pty/" + url.PathEscape(bp.ptyID) + "/resize"
	if err := p.br.b.api.call(ctx, http.MethodPost, u, map[string]uint32{"cols": s.GetCols(), "rows": s.GetRows()}, nil); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// List lists the processes the bridge runs.
func (p *processBridge) List(_ context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	id := req.Header().Get(headerSandbox)
	out := &process.ListResponse{}
	t := &p.br.procs
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, bp := range t.byID {
		if bp.sandbox != id {
			continue
		}
		tag := bp.tag
		out.Processes = append(out.Processes, &process.ProcessInfo{Pid: bp.pid, Config: bp.cfg, Tag: &tag})
	}
	sort.Slice(out.Processes, func(i, j int) bool { return out.Processes[i].Pid < out.Processes[j].Pid })
	return connect.NewResponse(out), nil
}

func strPtr(s string) *string { return &s }
