package daytona

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Daytona's PTY sessions: a login shell in a terminal, kept running by
// the sandbox's agent under the process tag ptyTagPrefix+id, so it
// outlives the WebSocket that made it (connectPty attaches again, from
// any replica) and dies with the sandbox or killPtySession. The socket
// carries the terminal's bytes both ways as binary frames and JSON
// control frames ({"type":"control","status":"connected"|"exited"}).

const (
	ptyTagPrefix = "daytona-pty:"
	// ptyExitControl is the subprotocol by which a client asks for the
	// "exited" control frame; the server always selects it.
	ptyExitControl = "X-Daytona-Pty-Exit-Control"
	// ptyEnvsProtocol carries the session's env (base64url JSON) in a
	// subprotocol token.
	ptyEnvsProtocol = "X-Daytona-Pty-Envs~"
	// maxPTYInput bounds one input frame.
	maxPTYInput = 1 << 20
	// maxPTYSize bounds a terminal's columns and rows.
	maxPTYSize = 1000
)

// ptyIDPattern is the form of a session id: it becomes a process tag.
var ptyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ptySessionInfo is Daytona's PtySessionInfo.
type ptySessionInfo struct {
	ID        string            `json:"id"`
	Active    bool              `json:"active"`
	Cols      int               `json:"cols"`
	Rows      int               `json:"rows"`
	CreatedAt string            `json:"createdAt"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	LazyStart bool              `json:"lazyStart"`
}

// maxPTYInfos bounds the sessions a replica remembers the size of (a
// sandbox that ends without a Daytona delete leaves its entries until a
// listing prunes them); past it, info answers the defaults.
const maxPTYInfos = 10000

// ptySizes remembers what the agent does not report of a session: its
// size and creation time, on the replica that made or resized it (others
// answer the defaults).
type ptySizes struct {
	mu sync.Mutex
	m  map[string]ptySessionInfo // by sandbox id + "/" + session id
}

func (p *ptySizes) get(key string) (ptySessionInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.m[key]
	return i, ok
}

func (p *ptySizes) put(key string, i ptySessionInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]ptySessionInfo{}
	}
	if _, known := p.m[key]; !known && len(p.m) >= maxPTYInfos {
		return
	}
	p.m[key] = i
}

func (p *ptySizes) drop(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, key)
}

// keepOnly forgets the sessions of sandbox (its key prefix) whose shell
// is no longer running: not in live (nil: forget them all).
func (p *ptySizes) keepOnly(sandboxID string, live map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key := range p.m {
		if id, ok := strings.CutPrefix(key, sandboxID+"/"); ok && !live[id] {
			delete(p.m, key)
		}
	}
}

func (s *Server) registerPTY(t func(string, toolbox)) {
	t("POST /process/pty", s.createPTY)
	t("GET /process/pty", s.listPTY)
	t("GET /process/pty/create-connect", s.createConnectPTY)
	t("GET /process/pty/{id}", s.getPTY)
	t("GET /process/pty/{id}/connect", s.connectPTY)
	t("POST /process/pty/{id}/resize", s.resizePTY)
	t("DELETE /process/pty/{id}", s.killPTY)
}

type ptyCreateIn struct {
	ID        string            `json:"id"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	Cols      int               `json:"cols"`
	Rows      int               `json:"rows"`
	LazyStart bool              `json:"lazyStart"`
}

// checkPTYSize gives a create's size its defaults (80×24) and bounds it.
func checkPTYSize(cols, rows int) (int, int, error) {
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	return cols, rows, boundPTYSize(cols, rows)
}

func boundPTYSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > maxPTYSize || rows > maxPTYSize {
		return sandbox.Invalid("cols", "cols and rows must be between 1 and %d", maxPTYSize)
	}
	return nil
}

func ptyKey(r *http.Request, id string) string { return r.PathValue("sandbox") + "/" + id }

// startPTY starts the session's shell; an id in use is a conflict.
func (s *Server) startPTY(ctx context.Context, r *http.Request, req *dataplane.Request, in ptyCreateIn) (*dataplane.Process, error) {
	if !ptyIDPattern.MatchString(in.ID) {
		return nil, sandbox.Invalid("id", "a PTY session id is 1 to 64 letters, digits, '.', '_' or '-'")
	}
	cols, rows, err := checkPTYSize(in.Cols, in.Rows)
	if err != nil {
		return nil, err
	}
	running, err := req.Processes(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range running {
		if p.Tag == ptyTagPrefix+in.ID {
			return nil, sandbox.Errorf(sandbox.ClassConflict, "PTY session %s already exists", in.ID)
		}
	}
	env := map[string]string{"TERM": "xterm-256color"}
	for k, v := range in.Envs {
		env[k] = v
	}
	p, err := req.Start(ctx, dataplane.StartOptions{
		Cmd: "/bin/sh", Args: []string{"-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"},
		Env: env, Cwd: in.Cwd, User: s.userOf(r), Tag: ptyTagPrefix + in.ID,
		PTY: &dataplane.PTYSize{Cols: uint32(cols), Rows: uint32(rows)},
	})
	if err != nil {
		return nil, err
	}
	s.ptys.put(ptyKey(r, in.ID), ptySessionInfo{ID: in.ID, Active: true, Cols: cols, Rows: rows,
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Cwd: in.Cwd, Envs: in.Envs, LazyStart: in.LazyStart})
	return p, nil
}

// createPTY starts a session without attaching (lazyStart is accepted
// and the shell starts at once).
func (s *Server) createPTY(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in ptyCreateIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	// A detached start: the shell must not end with this request.
	p, err := s.startPTY(context.WithoutCancel(r.Context()), r, req, in)
	if err != nil {
		return err
	}
	_ = p.Close()
	writeJSON(w, http.StatusOK, map[string]string{"sessionId": in.ID})
	return nil
}

// createConnectPTY starts a session and attaches in one round trip: the
// query gives id, cols, rows and cwd, a subprotocol token the env.
func (s *Server) createConnectPTY(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	q := r.URL.Query()
	in := ptyCreateIn{ID: q.Get("id"), Cwd: q.Get("cwd")}
	var err error
	for name, dst := range map[string]*int{"cols": &in.Cols, "rows": &in.Rows} {
		if v := q.Get(name); v != "" {
			if *dst, err = strconv.Atoi(v); err != nil {
				return sandbox.Invalid(name, "%s must be a number", name)
			}
		}
	}
	if in.Envs, err = ptyEnvs(r); err != nil {
		return err
	}
	p, err := s.startPTY(context.WithoutCancel(r.Context()), r, req, in)
	if err != nil {
		return err
	}
	if !s.relayPTY(w, r, p, in.ID) {
		// Not a WebSocket after all: no one will ever attach to this shell.
		_ = p.Kill(context.WithoutCancel(r.Context()))
	}
	return nil
}

// ptyEnvs reads the env a client sends as a subprotocol token.
func ptyEnvs(r *http.Request) (map[string]string, error) {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, tok := range strings.Split(h, ",") {
			tok = strings.TrimSpace(tok)
			if !strings.HasPrefix(tok, ptyEnvsProtocol) {
				continue
			}
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, ptyEnvsProtocol))
			if err != nil {
				return nil, sandbox.Invalid("envs", "the PTY envs token is not base64url: %v", err)
			}
			var env map[string]string
			if err := json.Unmarshal(raw, &env); err != nil {
				return nil, sandbox.Invalid("envs", "the PTY envs token is not a JSON object of strings: %v", err)
			}
			return env, nil
		}
	}
	return nil, nil
}

func (s *Server) connectPTY(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := s.attachPTY(r, req)
	if err != nil {
		return err
	}
	s.relayPTY(w, r, p, r.PathValue("id"))
	return nil
}

func (s *Server) attachPTY(r *http.Request, req *dataplane.Request) (*dataplane.Process, error) {
	id := r.PathValue("id")
	if !ptyIDPattern.MatchString(id) {
		return nil, notFound("PTY session %s not found", id)
	}
	p, err := req.Attach(r.Context(), ptyTagPrefix+id)
	if err != nil {
		if sandbox.ClassOf(err) == sandbox.ClassNotFound {
			return nil, notFound("PTY session %s not found", id)
		}
		return nil, err
	}
	return p, nil
}

// relayPTY upgrades to a WebSocket and relays the terminal until the
// shell exits (an "exited" frame, then a normal close) or the client goes
// away (the shell keeps running). The process stream is closed on return.
// It reports whether the request was upgraded (Accept answered a refusal
// when not).
func (s *Server) relayPTY(w http.ResponseWriter, r *http.Request, p *dataplane.Process, id string) bool {
	defer p.Close()
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ptyExitControl}})
	if err != nil {
		return false
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxPTYInput)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if err := writeControl(ctx, conn, map[string]any{"type": "control", "status": "connected"}); err != nil {
		return true
	}
	// Input: every frame, text or binary, is the terminal's input. The
	// client's close ends the relay (and the output read below).
	go func() {
		defer cancel()
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if err := p.SendStdin(ctx, data); err != nil {
				s.log.Debug("pty input", "err", err)
				return
			}
		}
	}()
	go func() { <-ctx.Done(); _ = p.Close() }()
	for {
		ev, err := p.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				_ = conn.Close(websocket.StatusInternalError, closeReason(err))
			}
			return true
		}
		switch ev.Kind {
		case dataplane.EventPTY, dataplane.EventStdout, dataplane.EventStderr:
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			err := conn.Write(wctx, websocket.MessageBinary, ev.Data)
			wcancel()
			if err != nil {
				return true
			}
		case dataplane.EventEnd:
			msg := map[string]any{"type": "control", "status": "exited", "exitCode": ev.End.ExitCode}
			if ev.End.Error != "" {
				msg["exitReason"] = ev.End.Error
			} else if !ev.End.Exited {
				msg["exitReason"] = ev.End.Status
			}
			s.ptys.drop(ptyKey(r, id))
			_ = writeControl(ctx, conn, msg)
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return true
		}
	}
}

func writeControl(ctx context.Context, conn *websocket.Conn, msg map[string]any) error {
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, data)
}

// sessionsOf lists the sandbox's live PTY sessions.
func (s *Server) sessionsOf(r *http.Request, req *dataplane.Request) ([]ptySessionInfo, error) {
	running, err := req.Processes(r.Context())
	if err != nil {
		return nil, err
	}
	out := []ptySessionInfo{}
	live := map[string]bool{}
	defer func() { s.ptys.keepOnly(r.PathValue("sandbox"), live) }()
	for _, p := range running {
		id, ok := strings.CutPrefix(p.Tag, ptyTagPrefix)
		if !ok {
			continue
		}
		live[id] = true
		info, known := s.ptys.get(ptyKey(r, id))
		if !known {
			info = ptySessionInfo{ID: id, Cols: 80, Rows: 24, Cwd: p.Cwd}
		}
		info.Active = true
		if info.Envs == nil {
			info.Envs = map[string]string{}
		}
		out = append(out, info)
	}
	return out, nil
}

func (s *Server) listPTY(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	list, err := s.sessionsOf(r, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": list})
	return nil
}

func (s *Server) findPTY(r *http.Request, req *dataplane.Request) (ptySessionInfo, error) {
	list, err := s.sessionsOf(r, req)
	if err != nil {
		return ptySessionInfo{}, err
	}
	for _, i := range list {
		if i.ID == r.PathValue("id") {
			return i, nil
		}
	}
	return ptySessionInfo{}, notFound("PTY session %s not found", r.PathValue("id"))
}

func (s *Server) getPTY(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	info, err := s.findPTY(r, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) resizePTY(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in struct {
		Cols int `json:"cols"`
		Rows int `json:"rows"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := boundPTYSize(in.Cols, in.Rows); err != nil {
		return err
	}
	info, err := s.findPTY(r, req)
	if err != nil {
		return err
	}
	p, err := s.attachPTY(r, req)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Resize(r.Context(), uint32(in.Cols), uint32(in.Rows)); err != nil {
		return err
	}
	info.Cols, info.Rows = in.Cols, in.Rows
	s.ptys.put(ptyKey(r, info.ID), info)
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) killPTY(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := s.attachPTY(r, req)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Kill(r.Context()); err != nil {
		return err
	}
	// Answer once the shell is gone, so that a listing right after the
	// kill no longer shows it.
	wait := time.AfterFunc(5*time.Second, func() { _ = p.Close() })
	defer wait.Stop()
	for {
		if ev, err := p.Next(); err != nil || ev.Kind == dataplane.EventEnd {
			break
		}
	}
	s.ptys.drop(ptyKey(r, r.PathValue("id")))
	writeJSON(w, http.StatusOK, map[string]string{"message": "PTY session killed"})
	return nil
}
