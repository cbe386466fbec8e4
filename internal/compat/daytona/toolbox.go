package daytona

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// toolbox is an authenticated toolbox route: req is the data-plane
// request on the sandbox the path names, owned by the caller.
type toolbox func(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error

// tb is the path of a toolbox route below the sandbox's proxy URL.
func tb(pattern string) string {
	method, path, _ := strings.Cut(pattern, " ")
	return method + " /toolbox/{sandbox}" + path
}

func (s *Server) registerToolbox(h func(string, handler)) {
	t := func(pattern string, fn toolbox) { h(tb(pattern), s.inSandbox(fn)) }
	t("GET /version", func(w http.ResponseWriter, _ *http.Request, _ *dataplane.Request) error {
		writeJSON(w, http.StatusOK, map[string]string{"version": "agentbox"})
		return nil
	})
	t("GET /user-home-dir", s.homeDir)
	t("GET /work-dir", s.workDir)
	t("POST /process/execute", s.execute)
	t("POST /process/code-run", s.codeRun)
	s.registerFiles(t)
	s.registerSessions(t)
	s.registerGit(t)
	s.registerInterpreter(t)
	s.registerPTY(t)
	for _, route := range []string{"POST /lsp/start", "POST /env", "POST /init", "GET /computeruse/status", "POST /computeruse/start"} {
		h(tb(route), func(w http.ResponseWriter, r *http.Request, _ string) error {
			return unsupported("toolbox " + r.Method + " " + strings.TrimPrefix(r.Pattern[len(r.Method)+1:], Prefix+"/toolbox/{sandbox}"))
		})
	}
}

// inSandbox opens the data-plane request of the sandbox the path names:
// the caller's, running (another tenant's is not found).
func (s *Server) inSandbox(fn toolbox) handler {
	return func(w http.ResponseWriter, r *http.Request, user string) error {
		id := sandbox.ID(r.PathValue("sandbox"))
		req, err := s.dp.Begin(r.Context(), user, id)
		if err != nil {
			if sandbox.ClassOf(err) == sandbox.ClassNotFound {
				return notFound("Sandbox with ID %s not found", id)
			}
			return err
		}
		defer req.End()
		return fn(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)), req)
	}
}

// userKey carries the authenticated user of a toolbox request.
type userKey struct{}

// userOfRequest is the tenant a toolbox request was authenticated as.
func userOfRequest(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// userOf is the user toolbox operations run as: the one the sandbox was
// created with, else the template's.
func (s *Server) userOf(r *http.Request) string {
	rec, err := s.m.Lookup(sandbox.ID(r.PathValue("sandbox")))
	if err != nil {
		return ""
	}
	return rec.Extra[extraUser]
}

// shellOutput runs a short shell command and returns its trimmed output.
func (s *Server) shellOutput(ctx context.Context, req *dataplane.Request, user, script string) (string, error) {
	res, err := req.ExecBuffered(ctx, dataplane.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, User: user, Timeout: 30 * time.Second})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", sandbox.Errorf(sandbox.ClassInternal, "%s: exit %d: %s", script, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

func (s *Server) homeDir(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	dir, err := s.shellOutput(r.Context(), req, s.userOf(r), `printf %s "$HOME"`)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"dir": dir})
	return nil
}

func (s *Server) workDir(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	dir, err := s.shellOutput(r.Context(), req, s.userOf(r), `pwd`)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"dir": dir})
	return nil
}

type executeIn struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd"`
	Envs    map[string]string `json:"envs"`
	Timeout *int              `json:"timeout"` // seconds
}

// timeoutOf is a toolbox timeout in seconds (0 or none: the data plane's
// default).
func timeoutOf(sec *int) (time.Duration, error) {
	if sec == nil || *sec == 0 {
		return 0, nil
	}
	if *sec < 0 {
		return 0, sandbox.Invalid("timeout", "timeout must not be negative")
	}
	return time.Duration(*sec) * time.Second, nil
}

// combined runs cmd and collects stdout and stderr interleaved as they
// came (Daytona's result), capped at the server's output limit.
func (s *Server) combined(ctx context.Context, req *dataplane.Request, ex dataplane.ExecRequest) (dataplane.ExecResult, []byte, error) {
	limit := s.cfg.MaxOutput
	if err := req.Reserve(limit); err != nil {
		return dataplane.ExecResult{}, nil, err
	}
	var out []byte
	res, err := req.Exec(ctx, ex, func(ev dataplane.ExecEvent) error {
		if ev.Type == "stdout" || ev.Type == "stderr" {
			if room := int(limit) - len(out); room > 0 {
				out = append(out, ev.Data[:min(room, len(ev.Data))]...)
			}
		}
		return nil
	})
	if err == nil && res.TimedOut {
		err = &codedError{status: http.StatusRequestTimeout, code: "PROCESS_EXECUTION_TIMEOUT", msg: "command execution timed out"}
	}
	return res, out, err
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in executeIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if strings.TrimSpace(in.Command) == "" {
		return sandbox.Invalid("command", "command is required")
	}
	timeout, err := timeoutOf(in.Timeout)
	if err != nil {
		return err
	}
	res, out, err := s.combined(r.Context(), req, dataplane.ExecRequest{Cmd: []string{"/bin/sh", "-c", in.Command},
		Cwd: in.Cwd, Env: in.Envs, Timeout: timeout, User: s.userOf(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": res.ExitCode, "result": string(out)})
	return nil
}

type codeRunIn struct {
	Code     string            `json:"code"`
	Language string            `json:"language"`
	Argv     []string          `json:"argv"`
	Envs     map[string]string `json:"envs"`
	Timeout  *int              `json:"timeout"`
}

// codeRun runs code as a fresh script of its language (Daytona's codeRun
// is stateless; the stateful interpreter is codeInterpreter).
func (s *Server) codeRun(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in codeRunIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	var cmd []string
	switch in.Language {
	case "", "python":
		cmd = []string{"python3", "-c", in.Code}
	case "javascript":
		cmd = []string{"node", "-e", in.Code}
	case "typescript":
		return unsupported("codeRun in typescript (agentbox's templates have node but no TypeScript runner)")
	default:
		return sandbox.Invalid("language", "unknown language %q", in.Language)
	}
	cmd = append(cmd, in.Argv...) // sys.argv[1:], process.argv[1:]
	timeout, err := timeoutOf(in.Timeout)
	if err != nil {
		return err
	}
	res, out, err := s.combined(r.Context(), req, dataplane.ExecRequest{Cmd: cmd, Env: in.Envs, Timeout: timeout, User: s.userOf(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": res.ExitCode, "result": string(out), "artifacts": map[string]any{"stdout": string(out)}})
	return nil
}
