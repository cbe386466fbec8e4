package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/agent/codeinterp"
)

// Code-interpreter routes, in the shapes of E2B's code-interpreter server
// (port 49999 there) so an E2B front-end can proxy them unchanged:
//
//	POST   /execute               {code, context_id?, language?, env_vars?, timeout?} -> NDJSON events
//	POST   /contexts              {language?, cwd?, user?} -> {id, language, cwd}
//	GET    /contexts              -> [{id, language, cwd}]
//	POST   /contexts/{id}/restart -> null
//	DELETE /contexts/{id}         -> null
//
// Extensions: "timeout" (seconds) and "max_output_bytes" in /execute, and
// the Keepalive-Ping-Interval header (seconds) for keepalive events.
// Errors are plain text with the status, as E2B's server answers them.

const (
	maxCodeBody = 64 << 20
	// maxCodeTimeout bounds a requested execution timeout.
	maxCodeTimeout = 24 * time.Hour
)

type codeService struct {
	s   *Server
	reg *codeinterp.Registry
}

// mountCode adds the code-interpreter routes to the server's mux.
func (s *Server) mountCode() {
	c := &codeService{s: s, reg: codeinterp.NewRegistry(codeinterp.Config{Host: newCodeHost(s), Logger: s.log})}
	s.code = c
	s.mux.HandleFunc("POST /execute", c.execute)
	s.mux.HandleFunc("POST /contexts", c.create)
	s.mux.HandleFunc("GET /contexts", c.list)
	s.mux.HandleFunc("POST /contexts/{id}/restart", c.restart)
	s.mux.HandleFunc("DELETE /contexts/{id}", c.remove)
}

type executeBody struct {
	Code           *string           `json:"code"`
	ContextID      string            `json:"context_id"`
	Language       string            `json:"language"`
	EnvVars        map[string]string `json:"env_vars"`
	Timeout        *float64          `json:"timeout"`
	MaxOutputBytes int64             `json:"max_output_bytes"`
}

// execute streams one execution. Everything that can be refused is
// checked before the 200 header; later problems are error events.
func (c *codeService) execute(w http.ResponseWriter, r *http.Request) {
	var body executeBody
	if err := decodeCodeBody(w, r, &body); err != nil {
		writeCodeError(w, err)
		return
	}
	req, err := body.request()
	if err != nil {
		writeCodeError(w, err)
		return
	}
	cx, err := c.reg.Resolve(body.ContextID, body.Language)
	if err != nil {
		writeCodeError(w, err)
		return
	}
	stream := startCodeStream(w, r)
	defer stream.close()
	if err := cx.Execute(r.Context(), req, stream.emit); err != nil {
		c.s.log.Debug("execution abandoned while queued", "context", cx.Info().ID, "err", err)
	}
}

func (b *executeBody) request() (codeinterp.ExecRequest, error) {
	if b.Code == nil {
		return codeinterp.ExecRequest{}, invalidCode("code is required")
	}
	for k := range b.EnvVars {
		if !codeinterp.ValidEnvName(k) {
			return codeinterp.ExecRequest{}, invalidCode(fmt.Sprintf("invalid environment variable name %q", k))
		}
	}
	req := codeinterp.ExecRequest{Code: *b.Code, Env: b.EnvVars, MaxOutputBytes: b.MaxOutputBytes}
	if b.MaxOutputBytes < 0 {
		return req, invalidCode("max_output_bytes must not be negative")
	}
	if t := b.Timeout; t != nil {
		if *t < 0 || math.IsNaN(*t) || math.IsInf(*t, 0) {
			return req, invalidCode("timeout must be a positive number of seconds")
		}
		req.Timeout = min(time.Duration(*t*float64(time.Second)), maxCodeTimeout)
	}
	return req, nil
}

type createContextBody struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	User     string `json:"user"`
}

// create makes a context and starts its interpreter.
func (c *codeService) create(w http.ResponseWriter, r *http.Request) {
	var body createContextBody
	if err := decodeCodeBody(w, r, &body); err != nil && !errors.Is(err, errEmptyBody) {
		writeCodeError(w, err)
		return
	}
	user := body.User
	if user == "" {
		user = basicAuthUser(r.Header)
	}
	if body.Cwd == "" && e2bDialect(r.Header) {
		// E2B's contexts start in E2B's working directory.
		if u, err := c.s.requestUser(r.Header, user); err == nil {
			body.Cwd = u.Workdir
		}
	}
	info, err := c.reg.Create(r.Context(), codeinterp.CreateRequest{Language: body.Language, Cwd: body.Cwd, User: user})
	if err != nil {
		writeCodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (c *codeService) list(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, c.reg.List())
}

func (c *codeService) restart(w http.ResponseWriter, r *http.Request) {
	if err := c.reg.Restart(r.Context(), r.PathValue("id")); err != nil {
		writeCodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

func (c *codeService) remove(w http.ResponseWriter, r *http.Request) {
	if err := c.reg.Delete(r.PathValue("id")); err != nil {
		writeCodeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

var errEmptyBody = errors.New("request body is empty")

func decodeCodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCodeBody))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errEmptyBody
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &codeinterp.Error{Kind: codeinterp.KindInvalid, Msg: fmt.Sprintf("request body is over %d bytes", maxCodeBody)}
		}
		return invalidCode("invalid JSON body: " + err.Error())
	}
	return nil
}

func invalidCode(msg string) error {
	return &codeinterp.Error{Kind: codeinterp.KindInvalid, Msg: msg}
}

// writeCodeError answers err as plain text with its status.
func writeCodeError(w http.ResponseWriter, err error) {
	status, msg := http.StatusInternalServerError, err.Error()
	switch codeinterp.KindOf(err) {
	case codeinterp.KindInvalid:
		status = http.StatusBadRequest
	case codeinterp.KindNotFound:
		status = http.StatusNotFound
	case codeinterp.KindLimit:
		status = http.StatusTooManyRequests
	case codeinterp.KindStart:
		status = http.StatusInternalServerError
	default:
		var ce *connect.Error
		if errors.As(err, &ce) {
			status, msg = httpStatus(ce.Code()), ce.Message()
			if status == http.StatusInsufficientStorage {
				status = http.StatusTooManyRequests // resource_exhausted here: processes, not disk
			}
		}
	}
	if errors.Is(err, errEmptyBody) {
		status = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg)) //nolint:gosec // G705: text/plain with nosniff, never rendered as HTML
}
