package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Daytona's code interpreter: stateful contexts (the agent's code
// contexts, the same ones E2B's runCode uses) and an execution streamed
// over a WebSocket as JSON frames {type: stdout|stderr|error|control}.

// interpreterTimeoutClose is the close code the SDK turns into its
// timeout error.
const interpreterTimeoutClose websocket.StatusCode = 4008

// maxInterpreterRequest bounds the one message a client sends: the code.
const maxInterpreterRequest = 4 << 20

// interpreterRequestWait bounds how long an opened socket may stay
// silent before its code arrives.
const interpreterRequestWait = 30 * time.Second

func (s *Server) registerInterpreter(t func(string, toolbox)) {
	t("POST /process/interpreter/context", s.createContext)
	t("GET /process/interpreter/context", s.listContexts)
	t("DELETE /process/interpreter/context/{id}", s.deleteContext)
	t("GET /process/interpreter/execute", s.interpret)
}

// interpreterContext is Daytona's InterpreterContext.
type interpreterContext struct {
	ID        string `json:"id"`
	Language  string `json:"language"`
	Cwd       string `json:"cwd"`
	CreatedAt string `json:"createdAt"`
	Active    bool   `json:"active"`
}

func contextOut(c dataplane.CodeContext) interpreterContext {
	return interpreterContext{ID: c.ID, Language: c.Language, Cwd: c.Cwd, CreatedAt: c.Created, Active: true}
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in struct {
		Cwd      string `json:"cwd"`
		Language string `json:"language"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	c, err := req.CreateCodeContext(r.Context(), in.Language, in.Cwd, s.userOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, contextOut(c))
	return nil
}

// listContexts lists the contexts a caller made: the default one an
// execution without a context uses is left out, as Daytona's is.
func (s *Server) listContexts(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	all, err := req.ListCodeContexts(r.Context())
	if err != nil {
		return err
	}
	out := []interpreterContext{}
	for _, c := range all {
		if !c.Default {
			out = append(out, contextOut(c))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"contexts": out})
	return nil
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	if err := req.DeleteCodeContext(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "context deleted"})
	return nil
}

// interpretRequest is the message a client sends once the socket opens.
type interpretRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"contextId"`
	Envs      map[string]string `json:"envs"`
	Timeout   *int              `json:"timeout"` // seconds
}

// interpretFrame is one frame the server sends.
type interpretFrame struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`
}

// interpret runs one execution over a WebSocket: the client sends the
// code, the server streams its output and error and ends with a
// "completed" control frame and a normal close, or close code 4008 when
// the execution timed out. A client that goes away interrupts it.
// Problems before the execution starts (a bad request, an unknown
// context) close the socket with 1008 or 1011 and the reason.
func (s *Server) interpret(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		// Accept answered the refusal (not a handshake, another origin).
		return nil
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxInterpreterRequest)
	ctx := r.Context()

	in, err := readInterpretRequest(ctx, conn)
	if err != nil {
		_ = conn.Close(websocket.StatusPolicyViolation, closeReason(err))
		return nil
	}
	// Later messages are not read; reading on keeps the close handshake
	// answered, and the client's close cancels the execution.
	ctx = conn.CloseRead(ctx)

	events, err := req.ExecuteCodeEvents(ctx, in)
	if err != nil {
		status := websocket.StatusInternalError
		if c := sandbox.ClassOf(err); c == sandbox.ClassInvalid || c == sandbox.ClassNotFound {
			status = websocket.StatusPolicyViolation
		}
		_ = conn.Close(status, closeReason(err))
		return nil
	}
	defer events.Close()
	timedOut := false
	for {
		ev, err := events.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = conn.Close(websocket.StatusInternalError, closeReason(err))
			return nil
		}
		frame, ok := frameOf(ev)
		if !ok {
			continue
		}
		if ev.Type == dataplane.CodeError && frame.Name == "TimeoutError" {
			timedOut = true
		}
		if err := writeFrame(ctx, conn, frame); err != nil {
			return nil // the client went away: ctx interrupts the execution
		}
	}
	if timedOut {
		_ = conn.Close(interpreterTimeoutClose, "execution timed out")
		return nil
	}
	if err := writeFrame(ctx, conn, interpretFrame{Type: "control", Text: "completed"}); err != nil {
		return nil
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	return nil
}

func readInterpretRequest(ctx context.Context, conn *websocket.Conn) (dataplane.CodeExecRequest, error) {
	rctx, cancel := context.WithTimeout(ctx, interpreterRequestWait)
	defer cancel()
	_, data, err := conn.Read(rctx)
	if err != nil {
		return dataplane.CodeExecRequest{}, sandbox.Errorf(sandbox.ClassInvalid, "no execution request within %v: %v", interpreterRequestWait, err)
	}
	var in interpretRequest
	if err := json.Unmarshal(data, &in); err != nil {
		return dataplane.CodeExecRequest{}, sandbox.Invalid("code", "the execution request is not JSON: %v", err)
	}
	if in.Code == "" {
		return dataplane.CodeExecRequest{}, sandbox.Invalid("code", "code is required")
	}
	timeout, err := timeoutOf(in.Timeout)
	if err != nil {
		return dataplane.CodeExecRequest{}, err
	}
	return dataplane.CodeExecRequest{Code: in.Code, ContextID: in.ContextID, EnvVars: in.Envs, Timeout: timeout}, nil
}

// frameOf maps an agent event to Daytona's frame; results, counters and
// keepalives have no Daytona counterpart (its interpreter streams output
// only) and are dropped.
func frameOf(ev dataplane.CodeEvent) (interpretFrame, bool) {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	switch ev.Type {
	case dataplane.CodeStdout, dataplane.CodeStderr:
		return interpretFrame{Type: ev.Type, Text: str(ev.Text)}, true
	case dataplane.CodeError:
		return interpretFrame{Type: "error", Name: str(ev.Name), Value: str(ev.Value), Traceback: str(ev.Traceback)}, true
	}
	return interpretFrame{}, false
}

func writeFrame(ctx context.Context, conn *websocket.Conn, f interpretFrame) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, data)
}

// closeReason fits err's message in a close frame (at most 123 bytes of
// UTF-8: a cut through a character drops it).
func closeReason(err error) string {
	msg := err.Error()
	if len(msg) > 120 {
		msg = strings.ToValidUTF8(msg[:120], "")
	}
	return msg
}
