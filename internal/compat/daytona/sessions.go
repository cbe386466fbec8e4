package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Daytona's sessions are shells whose state outlives a command. agentbox
// runs each command in a fresh bash that starts from the session's saved
// state (exported variables, working directory) and saves it again when
// the command ends, in a file of the session in the sandbox's /tmp:
// `cd`, `export` and the like carry over; shell functions, aliases and
// unexported variables do not.

// Bounds of the sessions kept per sandbox and the commands per session.
const (
	maxSessions        = 64
	maxSessionCommands = 1000
)

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

type command struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	// ExitCode is nil while the command runs.
	ExitCode *int `json:"exitCode,omitempty"`

	// Guarded by the session's registry lock.
	stdout, stderr, output []byte
	// chunks is the output in arrival order, labelled, for followers
	// (capped with output); grown is closed and replaced at each append.
	chunks []logChunk
	grown  chan struct{}
	done   chan struct{}
	// input writes to the stdin of a running async command (nil before
	// it started and after it ended, and for sync commands).
	input func(ctx context.Context, data []byte) error
	// started is closed once the command started or failed to.
	started     chan struct{}
	startedOnce *sync.Once
}

func (c *command) markStarted() { c.startedOnce.Do(func() { close(c.started) }) }

// logChunk is a piece of a command's output and the stream it came on.
type logChunk struct {
	stderr bool
	data   []byte
}

type session struct {
	id       string
	owner    string
	commands []*command
	byID     map[string]*command
	// cancel ends the session's running commands.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// sessionRegistry holds the toolbox sessions of every sandbox.
type sessionRegistry struct {
	mu   sync.Mutex
	byID map[sandbox.ID]map[string]*session
}

func newSessionRegistry() *sessionRegistry {
	return &sessionRegistry{byID: map[sandbox.ID]map[string]*session{}}
}

// dropSandbox ends the sessions of a sandbox that is gone or stopped.
func (g *sessionRegistry) dropSandbox(id sandbox.ID) {
	g.mu.Lock()
	sessions := g.byID[id]
	delete(g.byID, id)
	g.mu.Unlock()
	for _, s := range sessions {
		s.cancel()
	}
}

func (g *sessionRegistry) closeAll() {
	g.mu.Lock()
	all := g.byID
	g.byID = map[sandbox.ID]map[string]*session{}
	g.mu.Unlock()
	for _, sessions := range all {
		for _, s := range sessions {
			s.cancel()
			s.wg.Wait()
		}
	}
}

func (g *sessionRegistry) get(id sandbox.ID, owner, sid string) (*session, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.byID[id][sid]
	if s == nil || s.owner != owner {
		return nil, &codedError{status: http.StatusNotFound, code: "SESSION_NOT_FOUND", msg: "session " + sid + " not found"}
	}
	return s, nil
}

func (s *Server) registerSessions(t func(string, toolbox)) {
	t("POST /process/session", s.createSession)
	t("GET /process/session", s.listSessions)
	t("GET /process/session/{session}", s.getSession)
	t("DELETE /process/session/{session}", s.deleteSession)
	t("POST /process/session/{session}/exec", s.sessionExec)
	t("GET /process/session/{session}/command/{command}", s.getCommand)
	t("GET /process/session/{session}/command/{command}/logs", s.commandLogs)
	t("POST /process/session/{session}/command/{command}/input", s.commandInput)
	for _, route := range []string{"GET /process/session/entrypoint", "GET /process/session/entrypoint/logs"} {
		t(route, func(_ http.ResponseWriter, r *http.Request, _ *dataplane.Request) error {
			return unsupported("toolbox " + r.Method + " " + strings.TrimPrefix(r.Pattern[len(r.Method)+1:], Prefix+"/toolbox/{sandbox}") + " (sandboxes have no entrypoint)")
		})
	}
}

func sandboxOf(r *http.Request) sandbox.ID { return sandbox.ID(r.PathValue("sandbox")) }

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in struct {
		SessionID string `json:"sessionId"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if !sessionIDPattern.MatchString(in.SessionID) {
		return sandbox.Invalid("sessionId", "sessionId must be 1 to 128 letters, digits, '.', '_' or '-'")
	}
	owner, id := userOfRequest(r), sandboxOf(r)
	g := s.sessions
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byID[id] == nil {
		g.byID[id] = map[string]*session{}
	}
	if _, ok := g.byID[id][in.SessionID]; ok {
		return &codedError{status: http.StatusConflict, code: "SESSION_EXISTS", msg: "session " + in.SessionID + " already exists"}
	}
	if len(g.byID[id]) >= maxSessions {
		return sandbox.Errorf(sandbox.ClassQuota, "a sandbox has at most %d sessions", maxSessions)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	g.byID[id][in.SessionID] = &session{id: in.SessionID, owner: owner, byID: map[string]*command{}, ctx: ctx, cancel: cancel}
	w.WriteHeader(http.StatusCreated)
	return nil
}

type sessionOut struct {
	SessionID string     `json:"sessionId"`
	Commands  []*command `json:"commands"`
}

func (g *sessionRegistry) out(s *session) sessionOut {
	o := sessionOut{SessionID: s.id, Commands: []*command{}}
	for _, c := range s.commands {
		cp := &command{ID: c.ID, Command: c.Command, ExitCode: c.ExitCode}
		o.Commands = append(o.Commands, cp)
	}
	return o
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, _ *dataplane.Request) error {
	owner, id := userOfRequest(r), sandboxOf(r)
	g := s.sessions
	g.mu.Lock()
	out := []sessionOut{}
	for _, ss := range g.byID[id] {
		if ss.owner == owner {
			out = append(out, g.out(ss))
		}
	}
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, _ *dataplane.Request) error {
	ss, err := s.sessions.get(sandboxOf(r), userOfRequest(r), r.PathValue("session"))
	if err != nil {
		return err
	}
	s.sessions.mu.Lock()
	out := s.sessions.out(ss)
	s.sessions.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	id, sid := sandboxOf(r), r.PathValue("session")
	ss, err := s.sessions.get(id, userOfRequest(r), sid)
	if err != nil {
		return err
	}
	s.sessions.mu.Lock()
	delete(s.sessions.byID[id], sid)
	s.sessions.mu.Unlock()
	ss.cancel()
	ss.wg.Wait()
	_, _ = s.shellOutput(r.Context(), req, s.userOf(r), "rm -f -- "+shellQuote(stateFile(sid)))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// stateFile is where a session's shell state lives in the sandbox.
func stateFile(sid string) string { return "/tmp/.agentbox-daytona-session-" + sid }

// sessionScript runs $AGENTBOX_CMD in bash from the session's saved state
// and saves the state it leaves.
const sessionScript = `f="$1"; [ -r "$f" ] && . "$f"; eval "$AGENTBOX_CMD"; __rc=$?; { export -p | grep -v ' AGENTBOX_CMD='; printf 'cd %q\n' "$PWD"; } > "$f" 2>/dev/null; exit $__rc`

func (s *Server) sessionExec(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in struct {
		Command  string `json:"command"`
		RunAsync bool   `json:"runAsync"`
		Async    bool   `json:"async"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Command == "" {
		return sandbox.Invalid("command", "command is required")
	}
	owner, id, sid := userOfRequest(r), sandboxOf(r), r.PathValue("session")
	ss, err := s.sessions.get(id, owner, sid)
	if err != nil {
		return err
	}
	c := &command{ID: newID(), Command: in.Command, done: make(chan struct{}), grown: make(chan struct{}), started: make(chan struct{}), startedOnce: new(sync.Once)}
	g := s.sessions
	g.mu.Lock()
	if len(ss.commands) >= maxSessionCommands {
		g.mu.Unlock()
		return sandbox.Errorf(sandbox.ClassQuota, "a session keeps at most %d commands", maxSessionCommands)
	}
	ss.commands = append(ss.commands, c)
	ss.byID[c.ID] = c
	g.mu.Unlock()
	ex := dataplane.ExecRequest{Cmd: []string{"bash", "-c", sessionScript, "session", stateFile(sid)},
		Env: map[string]string{"AGENTBOX_CMD": in.Command}, User: s.userOf(r), Timeout: s.lifetime(0)}
	if in.RunAsync || in.Async {
		// The command outlives this request: a request of its own, ended
		// with the command (or the session). Its stdin stays open for
		// sendSessionCommandInput.
		ex.OpenStdin = true
		areq, err := s.dp.Begin(ss.ctx, owner, id)
		if err != nil {
			return err
		}
		ss.wg.Add(1)
		go func() {
			defer ss.wg.Done()
			defer areq.End()
			s.runCommand(ss.ctx, areq, c, ex)
		}()
		writeJSON(w, http.StatusAccepted, map[string]any{"cmdId": c.ID})
		return nil
	}
	s.runCommand(r.Context(), req, c, ex)
	g.mu.Lock()
	out := map[string]any{"cmdId": c.ID, "exitCode": c.ExitCode, "output": string(c.output), "stdout": string(c.stdout), "stderr": string(c.stderr)}
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// runCommand runs c, keeping its output (each stream capped at the
// server's output limit) and its exit code.
func (s *Server) runCommand(ctx context.Context, req *dataplane.Request, c *command, ex dataplane.ExecRequest) {
	defer close(c.done)
	defer c.markStarted()
	limit := int(s.cfg.MaxOutput)
	g := s.sessions
	if err := req.Reserve(3 * s.cfg.MaxOutput); err != nil {
		code := -1
		g.mu.Lock()
		c.stderr, c.ExitCode = []byte(err.Error()), &code
		g.mu.Unlock()
		return
	}
	keep := func(b []byte, p []byte) []byte {
		if room := limit - len(b); room > 0 {
			b = append(b, p[:min(room, len(p))]...)
		}
		return b
	}
	res, err := req.Exec(ctx, ex, func(ev dataplane.ExecEvent) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		before := len(c.output)
		switch ev.Type {
		case "start":
			c.input = ev.Input
			c.markStarted()
		case "stdout":
			c.stdout, c.output = keep(c.stdout, ev.Data), keep(c.output, ev.Data)
		case "stderr":
			c.stderr, c.output = keep(c.stderr, ev.Data), keep(c.output, ev.Data)
		}
		if kept := len(c.output) - before; kept > 0 {
			c.chunks = append(c.chunks, logChunk{stderr: ev.Type == "stderr", data: c.output[before:len(c.output):len(c.output)]})
			close(c.grown)
			c.grown = make(chan struct{})
		}
		return nil
	})
	code := res.ExitCode
	g.mu.Lock()
	defer g.mu.Unlock()
	c.input = nil
	if err != nil {
		code = -1
		c.stderr = keep(c.stderr, []byte(messageOf(err)))
	}
	c.ExitCode = &code
}

func (s *Server) findCommand(r *http.Request) (*command, error) {
	ss, err := s.sessions.get(sandboxOf(r), userOfRequest(r), r.PathValue("session"))
	if err != nil {
		return nil, err
	}
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	c := ss.byID[r.PathValue("command")]
	if c == nil {
		return nil, &codedError{status: http.StatusNotFound, code: "COMMAND_NOT_FOUND", msg: "command " + r.PathValue("command") + " not found"}
	}
	return c, nil
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request, _ *dataplane.Request) error {
	c, err := s.findCommand(r)
	if err != nil {
		return err
	}
	s.sessions.mu.Lock()
	out := command{ID: c.ID, Command: c.Command, ExitCode: c.ExitCode}
	s.sessions.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// commandLogs answers the output so far, or with follow=true streams it
// over a WebSocket until the command ends (followLogs).
func (s *Server) commandLogs(w http.ResponseWriter, r *http.Request, _ *dataplane.Request) error {
	c, err := s.findCommand(r)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("follow") == "true" {
		s.followLogs(w, r, c)
		return nil
	}
	s.sessions.mu.Lock()
	out := map[string]string{"output": string(c.output), "stdout": string(c.stdout), "stderr": string(c.stderr)}
	s.sessions.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
	return nil
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Daytona's labels of a followed log: each run of output starts with the
// marker of its stream.
var (
	stdoutMarker = []byte{1, 1, 1}
	stderrMarker = []byte{2, 2, 2}
)

// followLogs sends c's output from its start, then as it comes, each
// chunk a binary frame led by its stream's marker, and closes normally
// once the command has ended and everything was sent. A client that
// closes ends it; the command runs on.
func (s *Server) followLogs(w http.ResponseWriter, r *http.Request, c *command) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the refusal
	}
	defer conn.CloseNow()
	ctx := conn.CloseRead(r.Context())
	g := s.sessions
	sent := 0
	for {
		g.mu.Lock()
		pending := c.chunks[sent:]
		grown := c.grown
		g.mu.Unlock()
		for _, ch := range pending {
			marker := stdoutMarker
			if ch.stderr {
				marker = stderrMarker
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := conn.Write(wctx, websocket.MessageBinary, append(append([]byte{}, marker...), ch.data...))
			cancel()
			if err != nil {
				return
			}
		}
		sent += len(pending)
		if len(pending) > 0 {
			continue
		}
		select {
		case <-grown:
		case <-c.done:
			g.mu.Lock()
			rest := len(c.chunks) - sent
			g.mu.Unlock()
			if rest == 0 {
				_ = conn.Close(websocket.StatusNormalClosure, "")
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// maxCommandInput bounds one sendSessionCommandInput.
const maxCommandInput = 1 << 20

// commandInput writes {data} to a running async command's stdin, as
// given (the SDK sends a line with its newline when it means one).
func (s *Server) commandInput(w http.ResponseWriter, r *http.Request, _ *dataplane.Request) error {
	var in struct {
		Data string `json:"data"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if len(in.Data) > maxCommandInput {
		return sandbox.Errorf(sandbox.ClassTooLarge, "input is over %d KiB", maxCommandInput>>10)
	}
	c, err := s.findCommand(r)
	if err != nil {
		return err
	}
	// Input may come before the command's process started.
	wait, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	select {
	case <-c.started:
	case <-wait.Done():
	}
	s.sessions.mu.Lock()
	input, ended := c.input, c.ExitCode != nil
	s.sessions.mu.Unlock()
	switch {
	case ended:
		return sandbox.Errorf(sandbox.ClassConflict, "command %s has ended", c.ID)
	case input == nil:
		return sandbox.Errorf(sandbox.ClassConflict, "command %s takes no input (only a runAsync command that has started reads its stdin)", c.ID)
	}
	if err := input(r.Context(), []byte(in.Data)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
