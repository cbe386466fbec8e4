package daytona

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
	"github.com/agentbox/agentbox/internal/agent/codeinterp"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The bridge is how the daemon's one agent client reaches a Daytona
// sandbox: Daytona's in-sandbox data plane is its toolbox API, not envd,
// so the backend serves the part of envd the daemon uses on a loopback
// listener of its own and answers each call with the sandbox's toolbox
// (process/execute, process/code-run, files). The endpoint a Daytona
// sandbox reports is this listener, with the sandbox named in a header
// and a per-daemon token that only the daemon holds; the provider key
// stays here.

// headerSandbox names the agentbox sandbox of a bridge call.
const headerSandbox = "X-Agentbox-Remote-Sandbox"

// bridge serves envd for the Daytona sandboxes of b.
type bridge struct {
	b     *Backend
	token string
	ln    net.Listener
	srv   *http.Server
	procs procTable
}

func (br *bridge) url() string { return "http://" + br.ln.Addr().String() }

func (br *bridge) start() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("remote daytona bridge: %w", err)
	}
	br.ln = ln
	mux := http.NewServeMux()
	path, h := processconnect.NewProcessHandler(&processBridge{br: br})
	mux.Handle(path, h)
	path, h = filesystemconnect.NewFilesystemHandler(&fsBridge{br: br})
	mux.Handle(path, h)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", br.download)
	mux.HandleFunc("POST /files", br.upload)
	mux.HandleFunc("POST /execute", br.execute)
	mux.HandleFunc("POST /contexts", br.contexts)
	mux.HandleFunc("GET /contexts", br.contexts)
	mux.HandleFunc("DELETE /contexts/{id}", br.contexts)
	mux.HandleFunc("POST /contexts/{id}/restart", br.contexts)
	mux.HandleFunc("GET /service", func(w http.ResponseWriter, _ *http.Request) {
		// No template service runs in a provider's sandbox through agentbox.
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"state":"` + sandbox.ServiceNone + `"}`))
	})
	mux.HandleFunc("GET /envs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	})
	br.srv = &http.Server{Handler: br.authorized(mux), ReadHeaderTimeout: time.Minute}
	go func() { _ = br.srv.Serve(ln) }()
	return nil
}

func (br *bridge) close() {
	if br.srv != nil {
		_ = br.srv.Close()
	}
}

// authorized lets through the calls that carry the bridge's token and
// name a sandbox of the backend.
func (br *bridge) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(br.token)) != 1 {
			writeErr(w, http.StatusUnauthorized, "bad access token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// target is the toolbox base URL of the sandbox a call names.
func (br *bridge) target(h http.Header) (string, error) {
	st, err := br.b.box(sandbox.ID(h.Get(headerSandbox)))
	if err != nil {
		return "", err
	}
	if st.State != sandbox.StateRunning {
		return "", sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s", st.ID, st.State)
	}
	return strings.TrimRight(st.P.ToolboxURL, "/") + "/" + url.PathEscape(st.RemoteID), nil
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

// writeClassed answers err with envd's error shape and the status of its
// class.
func writeClassed(w http.ResponseWriter, err error) {
	status := http.StatusBadGateway
	switch sandbox.ClassOf(err) {
	case sandbox.ClassNotFound:
		status = http.StatusNotFound
	case sandbox.ClassInvalid:
		status = http.StatusBadRequest
	case sandbox.ClassConflict:
		status = http.StatusConflict
	case sandbox.ClassQuota:
		status = http.StatusTooManyRequests
	case sandbox.ClassUnavailable:
		status = http.StatusServiceUnavailable
	}
	writeErr(w, status, err.Error())
}

type executeOut struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '=' || r == ':' || r == ',' || r == '+' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// connectErr is err as a Connect error of its class.
func connectErr(err error) error {
	code := connect.CodeUnavailable
	switch sandbox.ClassOf(err) {
	case sandbox.ClassNotFound:
		code = connect.CodeNotFound
	case sandbox.ClassInvalid:
		code = connect.CodeInvalidArgument
	case sandbox.ClassConflict:
		code = connect.CodeFailedPrecondition
	case sandbox.ClassQuota:
		code = connect.CodeResourceExhausted
	case sandbox.ClassTimeout:
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, err)
}

// download is envd's GET /files over the toolbox's files/download.
func (br *bridge) download(w http.ResponseWriter, r *http.Request) {
	base, err := br.target(r.Header)
	if err != nil {
		writeClassed(w, err)
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		writeErr(w, http.StatusBadRequest, "path is required")
		return
	}
	resp, err := br.b.api.send(r.Context(), http.MethodGet, base+"/files/download?"+url.Values{"path": {p}}.Encode(), nil, "")
	if err != nil {
		writeClassed(w, err)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	_, _ = io.Copy(w, resp.Body)
}

// upload is envd's POST /files (a raw body, or E2B's multipart form with
// one file) over the toolbox's files/bulk-upload, streamed.
func (br *bridge) upload(w http.ResponseWriter, r *http.Request) {
	base, err := br.target(r.Header)
	if err != nil {
		writeClassed(w, err)
		return
	}
	p := r.URL.Query().Get("path")
	var src io.Reader = r.Body
	if mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		part, err := multipart.NewReader(r.Body, params["boundary"]).NextPart()
		if err != nil {
			writeErr(w, http.StatusBadRequest, "want a multipart form with a file")
			return
		}
		if p == "" {
			p = part.FileName()
		}
		src = part
	}
	if p == "" {
		writeErr(w, http.StatusBadRequest, "path is required")
		return
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("files[0].path", p)
		if err == nil {
			var fw io.Writer
			if fw, err = mw.CreateFormFile("files[0].file", path.Base(p)); err == nil {
				_, err = io.Copy(fw, src)
			}
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	resp, err := br.b.api.send(r.Context(), http.MethodPost, base+"/files/bulk-upload", pr, mw.FormDataContentType())
	_ = pr.Close()
	if err != nil {
		writeClassed(w, err)
		return
	}
	resp.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode([]map[string]string{{"name": path.Base(p), "type": "file", "path": p}})
}

// execute is the code interpreter's POST /execute. Python runs in the
// toolbox's interpreter (its WebSocket execute), in the context named or
// the sandbox's default one, so state persists between calls, its output
// streamed as it comes; another language, which the interpreter does not
// run, goes to the stateless process/code-run.
func (br *bridge) execute(w http.ResponseWriter, r *http.Request) {
	base, err := br.target(r.Header)
	if err != nil {
		writeClassed(w, err)
		return
	}
	var in struct {
		Code      string            `json:"code"`
		Language  string            `json:"language"`
		ContextID string            `json:"context_id"`
		EnvVars   map[string]string `json:"env_vars"`
		Timeout   float64           `json:"timeout"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&in); err != nil {
		writeErr(w, http.StatusBadRequest, "bad JSON")
		return
	}
	lang := in.Language
	switch lang {
	case "", "python", "python3":
		lang = "python"
	case "js", "javascript", "node":
		lang = "javascript"
	}
	if lang == "python" || in.ContextID != "" {
		br.interpret(w, r, base, in.Code, in.ContextID, in.EnvVars, in.Timeout)
		return
	}
	body := map[string]any{"code": in.Code, "language": lang}
	if len(in.EnvVars) > 0 {
		body["envs"] = in.EnvVars
	}
	if in.Timeout > 0 {
		body["timeout"] = max(1, int(in.Timeout))
	}
	var out executeOut
	if err := br.b.api.call(r.Context(), http.MethodPost, base+"/process/code-run", body, &out); err != nil {
		writeClassed(w, err)
		return
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if out.Result != "" {
		_ = enc.Encode(map[string]any{"type": codeinterp.TypeStdout, "text": out.Result})
	}
	if out.ExitCode != 0 {
		_ = enc.Encode(map[string]any{"type": codeinterp.TypeError, "name": "ExitError",
			"value": fmt.Sprintf("the code exited with status %d", out.ExitCode), "traceback": out.Result})
	}
	_ = enc.Encode(map[string]any{"type": codeinterp.TypeEndOfExecution})
	w.Header().Set("Content-Type", "application/x-ndjson")
	_, _ = w.Write(buf.Bytes())
}

// interpreterTimeoutClose is the close code of an execution that timed
// out at Daytona's interpreter.
const interpreterTimeoutClose websocket.StatusCode = 4008

// interpret runs code over the interpreter's WebSocket and writes its
// frames as the code interpreter's NDJSON events, flushed as they come.
func (br *bridge) interpret(w http.ResponseWriter, r *http.Request, base, code, contextID string, envs map[string]string, timeout float64) {
	ctx := r.Context()
	ws, err := br.dialWS(ctx, base+"/process/interpreter/execute", nil)
	if err != nil {
		writeClassed(w, err)
		return
	}
	defer ws.CloseNow()
	req := map[string]any{"code": code}
	if contextID != "" {
		req["contextId"] = contextID
	}
	if len(envs) > 0 {
		req["envs"] = envs
	}
	if timeout > 0 {
		req["timeout"] = max(1, int(timeout))
	}
	raw, _ := json.Marshal(req)
	if err := ws.Write(ctx, websocket.MessageText, raw); err != nil {
		writeClassed(w, sandbox.Wrap(sandbox.ClassUnavailable, err, "the sandbox provider's interpreter closed"))
		return
	}
	// The first frame tells a refusal (an unknown context: a close with
	// its reason) from an execution.
	typ, data, err := ws.Read(ctx)
	if err != nil {
		status := websocket.CloseStatus(err)
		reason := err.Error()
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			reason = ce.Reason
		}
		switch {
		case status == websocket.StatusPolicyViolation:
			writeErr(w, http.StatusNotFound, "the sandbox provider refused the execution: "+reason)
			return
		case status != websocket.StatusNormalClosure && status != interpreterTimeoutClose:
			writeErr(w, http.StatusBadGateway, "the sandbox provider's interpreter failed: "+reason)
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	emit := func(ev map[string]any) {
		_ = enc.Encode(ev)
		if fl != nil {
			fl.Flush()
		}
	}
	for err == nil {
		if typ == websocket.MessageText {
			var f struct {
				Type      string `json:"type"`
				Text      string `json:"text"`
				Name      string `json:"name"`
				Value     string `json:"value"`
				Traceback string `json:"traceback"`
			}
			if json.Unmarshal(data, &f) == nil {
				switch f.Type {
				case "stdout", "stderr":
					emit(map[string]any{"type": f.Type, "text": f.Text})
				case "error":
					emit(map[string]any{"type": codeinterp.TypeError, "name": f.Name, "value": f.Value, "traceback": f.Traceback})
				}
			}
		}
		typ, data, err = ws.Read(ctx)
	}
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure:
	case interpreterTimeoutClose:
		emit(map[string]any{"type": codeinterp.TypeError, "name": "TimeoutError", "value": "the execution timed out", "traceback": ""})
	default:
		if ctx.Err() != nil {
			return
		}
		emit(map[string]any{"type": codeinterp.TypeError, "name": "ProviderError", "value": fmt.Sprintf("the provider's interpreter stream ended: %v", err), "traceback": ""})
	}
	emit(map[string]any{"type": codeinterp.TypeEndOfExecution})
}

// contexts are the code interpreter's /contexts over the toolbox's
// interpreter contexts (Daytona has no restart: a restart is refused).
func (br *bridge) contexts(w http.ResponseWriter, r *http.Request) {
	base, err := br.target(r.Header)
	if err != nil {
		writeClassed(w, err)
		return
	}
	u := base + "/process/interpreter/context"
	ctx := r.Context()
	type ctxOut struct {
		ID       string `json:"id"`
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	switch {
	case r.Method == http.MethodPost && r.PathValue("id") == "":
		var in struct {
			Language string `json:"language"`
			Cwd      string `json:"cwd"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			writeErr(w, http.StatusBadRequest, "bad JSON")
			return
		}
		body := map[string]string{}
		if in.Language != "" {
			body["language"] = in.Language
		}
		if in.Cwd != "" {
			body["cwd"] = in.Cwd
		}
		var out ctxOut
		if err := br.b.api.call(ctx, http.MethodPost, u, body, &out); err != nil {
			writeClassed(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodGet:
		var out struct {
			Contexts []ctxOut `json:"contexts"`
		}
		if err := br.b.api.call(ctx, http.MethodGet, u, nil, &out); err != nil {
			writeClassed(w, err)
			return
		}
		if out.Contexts == nil {
			out.Contexts = []ctxOut{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out.Contexts)
	case r.Method == http.MethodDelete:
		if err := br.b.api.call(ctx, http.MethodDelete, u+"/"+url.PathEscape(r.PathValue("id")), nil, nil); err != nil {
			writeClassed(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErr(w, http.StatusNotImplemented, "a Daytona provider cannot restart a code context; delete it and create another")
	}
}
