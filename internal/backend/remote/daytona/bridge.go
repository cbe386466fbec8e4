package daytona

import (
	"bytes"
	"context"
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

	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/api/proto/process"
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
	return strings.TrimRight(st.ToolboxURL, "/") + "/" + url.PathEscape(st.RemoteID), nil
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

// processBridge is envd's process service over the toolbox's
// process/execute: a command runs to its end and its combined output
// comes as stdout. Stdin, PTYs and attaching to running processes need
// the toolbox's sessions and are not bridged.
type processBridge struct {
	processconnect.UnimplementedProcessHandler
	br *bridge
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

func (p *processBridge) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	pc := req.Msg.GetProcess()
	if pc == nil || pc.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	if req.Msg.Pty != nil || req.Msg.GetStdin() {
		return connect.NewError(connect.CodeUnimplemented, errors.New("a Daytona provider's sandbox runs commands without stdin or a PTY through agentbox"))
	}
	base, err := p.br.target(req.Header())
	if err != nil {
		return connectErr(err)
	}
	words := []string{shellQuote(pc.GetCmd())}
	for _, a := range pc.GetArgs() {
		words = append(words, shellQuote(a))
	}
	in := map[string]any{"command": strings.Join(words, " ")}
	if pc.Cwd != nil && pc.GetCwd() != "" {
		in["cwd"] = pc.GetCwd()
	}
	if len(pc.GetEnvs()) > 0 {
		in["envs"] = pc.GetEnvs()
	}
	if t := req.Msg.GetTimeoutMs(); t > 0 {
		in["timeout"] = max(1, int(t/1000))
	}
	if err := stream.Send(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 1}}}}); err != nil {
		return err
	}
	var out executeOut
	if err := p.br.b.api.call(ctx, http.MethodPost, base+"/process/execute", in, &out); err != nil {
		return connectErr(err)
	}
	if out.Result != "" {
		if err := stream.Send(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Data{
			Data: &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte(out.Result)}}}}}); err != nil {
			return err
		}
	}
	return stream.Send(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_End{
		End: &process.ProcessEvent_EndEvent{ExitCode: int32(out.ExitCode), Exited: true, Status: fmt.Sprintf("exit status %d", out.ExitCode)}}}})
}

func (p *processBridge) List(context.Context, *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	return connect.NewResponse(&process.ListResponse{}), nil
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

// execute is the code interpreter's POST /execute over the toolbox's
// process/code-run: stateless (Daytona's codeRun runs each cell as a
// fresh script), its output one stdout event, a failure an error event.
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
	if in.ContextID != "" {
		writeErr(w, http.StatusNotImplemented, "code contexts are not available at a Daytona provider through agentbox; run code without a context")
		return
	}
	lang := in.Language
	switch lang {
	case "", "python", "python3":
		lang = "python"
	case "js", "javascript", "node":
		lang = "javascript"
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
