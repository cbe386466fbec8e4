package agentscope

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The sandbox's own HTTP API, reached at /proxy/{identity}/{path...}. In
// agentscope a FastAPI server inside the container serves it and the
// manager forwards to it with the runtime token; here the daemon serves it
// directly over the agent, so "forwarding" is a function call. The same
// routes also answer under /proxy/{identity}/fastapi/..., the prefix
// agentscope's direct client adds to a sandbox's url.

// maxSandboxAPIBody bounds JSON bodies of the sandbox API.
const maxSandboxAPIBody = 8 << 20

// serveProxy authenticates (an API key, or the sandbox's runtime token),
// finds the sandbox and dispatches to the sandbox API route.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request) {
	identity := r.PathValue("identity")
	rec, ok := s.proxyTarget(w, r, identity)
	if !ok {
		return
	}
	p := "/" + strings.TrimPrefix(strings.TrimPrefix(r.PathValue("path"), "fastapi/"), "fastapi")
	h := s.sandboxRoute(r.Method, p)
	if h == nil {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	// Every route but the health check works in the sandbox: admitted
	// like the native API's exec and file routes (admission.go).
	if p != "/healthz" {
		ctx, done, err := s.begin(r.Context(), rec)
		if err != nil {
			s.writeSandboxError(w, r, rec, err)
			return
		}
		defer done()
		r = r.WithContext(ctx)
	}
	if err := h(w, r, rec); err != nil {
		s.writeSandboxError(w, r, rec, err)
	}
}

// proxyTarget returns the live record the request is for, or answers the
// error (401 for bad credentials, 404 for an unknown sandbox).
func (s *Server) proxyTarget(w http.ResponseWriter, r *http.Request, identity string) (*record, bool) {
	notFound := func() (*record, bool) {
		writeDetail(w, http.StatusNotFound, "sandbox not found: "+identity)
		return nil, false
	}
	var rec *record
	switch token, present := bearer(r); {
	case len(s.cfg.APIKeys) == 0:
		rec = s.lookup(r.Context(), httpapi.DefaultUser, identity)
	case !present:
		unauthorized(w, detailAuthRequired)
		return nil, false
	default:
		if user, err := httpapi.UserForKey(s.cfg.APIKeys, token); err == nil {
			rec = s.lookup(r.Context(), user, identity)
			break
		}
		// Agentscope's direct client calls a sandbox's url with its runtime
		// token: accept that token for its own sandbox only.
		rec = s.reg.byName(r.Context(), s.cfg.Prefix, identity)
		if rec == nil || subtle.ConstantTimeCompare([]byte(rec.Token), []byte(token)) != 1 {
			unauthorized(w, detailAuthInvalid)
			return nil, false
		}
	}
	if rec == nil {
		return notFound()
	}
	httpapi.SetUser(r, rec.Owner)
	rec = s.checkLive(r.Context(), s.follow(r.Context(), rec))
	if !rec.live() {
		return notFound()
	}
	// Identity redirects to a sandbox another replica runs (a session
	// restored there): that replica serves the request.
	if s.cfg.Peers != nil && !s.m.Hosts(rec.ID) && s.cfg.Peers.ServeBy(w, r, rec.ID) {
		return nil, false
	}
	return rec, true
}

// sandboxHandler serves one route of the sandbox API for rec.
type sandboxHandler func(w http.ResponseWriter, r *http.Request, rec *record) error

func (s *Server) sandboxRoute(method, p string) sandboxHandler {
	if name, ok := strings.CutPrefix(p, "/tools/"); ok && method == http.MethodPost {
		return func(w http.ResponseWriter, r *http.Request, rec *record) error { return s.sbTool(w, r, rec, name) }
	}
	routes := map[string]sandboxHandler{
		"GET /healthz":                 s.sbHealthz,
		"GET /mcp/list_tools":          s.sbListTools,
		"POST /mcp/call_tool":          s.sbCallTool,
		"POST /mcp/add_servers":        s.sbAddServers,
		"POST /watcher/commit_changes": s.sbCommit,
		"POST /watcher/generate_diff":  s.sbDiff,
		"GET /watcher/git_logs":        s.sbLogs,
		"GET /workspace/file":          s.wsRead,
		"PUT /workspace/file":          s.wsWrite,
		"POST /workspace/files:batch":  s.wsBatch,
		"GET /workspace/list":          s.wsList,
		"GET /workspace/exists":        s.wsExists,
		"DELETE /workspace/entry":      s.wsRemove,
		"POST /workspace/move":         s.wsMove,
		"POST /workspace/mkdir":        s.wsMkdir,
	}
	return routes[method+" "+p]
}

// httpError is an error with the status and detail to answer.
type httpError struct {
	status int
	detail string
}

func (e *httpError) Error() string { return e.detail }

func detailErr(status int, detail string) error { return &httpError{status, detail} }

// writeSandboxError maps an error to FastAPI's {"detail"} answer: agent
// failures to reach the sandbox are 502 (upstream failure).
func (s *Server) writeSandboxError(w http.ResponseWriter, r *http.Request, rec *record, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeDetail(w, he.status, he.detail)
		return
	}
	if status, ok := quotaStatus(w, err); ok {
		writeDetail(w, status, errorText(err))
		return
	}
	if errors.Is(err, dataplane.ErrOutsideRoot) {
		// A symbolic link leading out of /workspace, refused in the agent.
		writeDetail(w, http.StatusForbidden, detailOutside)
		return
	}
	switch sandbox.ClassOf(err) {
	case sandbox.ClassNotFound:
		writeDetail(w, http.StatusNotFound, "not found")
	case sandbox.ClassConflict:
		writeDetail(w, http.StatusConflict, errorText(err))
	case sandbox.ClassForbidden:
		writeDetail(w, http.StatusForbidden, errorText(err))
	case sandbox.ClassInvalid:
		writeDetail(w, http.StatusBadRequest, errorText(err))
	case sandbox.ClassTooLarge:
		writeDetail(w, http.StatusRequestEntityTooLarge, errorText(err))
	case sandbox.ClassUnavailable, sandbox.ClassTimeout:
		writeDetail(w, http.StatusBadGateway, "Upstream request failed: "+errorText(err))
	default:
		s.log.Error("agentscope sandbox API failed", "sandbox", rec.Name, "path", r.URL.Path, "err", err)
		writeDetail(w, http.StatusInternalServerError, errorText(err))
	}
}

// readJSON decodes a JSON object body (empty = {}).
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSandboxAPIBody))
	if err != nil {
		return detailErr(http.StatusRequestEntityTooLarge, "request body too large")
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		data = []byte("{}")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return detailErr(http.StatusUnprocessableEntity, "invalid JSON body: "+err.Error())
	}
	return nil
}

func (s *Server) sbHealthz(w http.ResponseWriter, r *http.Request, rec *record) error {
	// Not admitted: a health check must answer under load too.
	dr, done, err := s.work(r.Context(), rec)
	if err != nil {
		return err
	}
	defer done()
	if err := dr.Health(r.Context()); err != nil {
		return sandbox.Wrap(sandbox.ClassUnavailable, err, "the sandbox does not answer")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, err = io.WriteString(w, "OK")
	return err
}

// sbTool is POST /tools/<name>: the body is the tool's arguments.
func (s *Server) sbTool(w http.ResponseWriter, r *http.Request, rec *record, name string) error {
	var args map[string]any
	if err := readJSON(w, r, &args); err != nil {
		return err
	}
	res, err := s.callTool(r.Context(), rec, name, args)
	var unknown errUnknownTool
	if errors.As(err, &unknown) {
		return detailErr(http.StatusNotFound, "Not Found")
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) sbListTools(w http.ResponseWriter, r *http.Request, rec *record) error {
	groups, err := s.mcpToolGroups(r.Context(), rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, groups)
	return nil
}

func (s *Server) sbCallTool(w http.ResponseWriter, r *http.Request, rec *record) error {
	var body struct {
		ToolName  string         `json:"tool_name"`
		Arguments map[string]any `json:"arguments"`
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	res, err := s.callTool(r.Context(), rec, body.ToolName, body.Arguments)
	if sandbox.ClassOf(err) == sandbox.ClassQuota {
		return err
	}
	if err != nil {
		return detailErr(http.StatusInternalServerError, err.Error())
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) sbAddServers(w http.ResponseWriter, r *http.Request, rec *record) error {
	var body struct {
		ServerConfigs map[string]any `json:"server_configs"`
		Overwrite     bool           `json:"overwrite"`
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	if err := s.addMCPServers(r.Context(), rec, body.ServerConfigs, body.Overwrite); err != nil {
		return detailErr(http.StatusInternalServerError, err.Error())
	}
	writeJSON(w, http.StatusOK, "OK")
	return nil
}

func (s *Server) sbCommit(w http.ResponseWriter, r *http.Request, rec *record) error {
	var body struct {
		CommitMessage *string `json:"commit_message"`
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	msg := "Automated commit"
	if body.CommitMessage != nil && *body.CommitMessage != "" {
		msg = *body.CommitMessage
	}
	commit, err := s.gitCommit(r.Context(), rec, msg)
	if err != nil {
		return detailErr(http.StatusInternalServerError, err.Error())
	}
	if commit == "" {
		writeJSON(w, http.StatusOK, map[string]any{"commit": nil, "message": "No changes to commit"})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"commit": commit, "message": msg})
	return nil
}

func (s *Server) sbDiff(w http.ResponseWriter, r *http.Request, rec *record) error {
	var body struct {
		CommitA *string `json:"commit_a"`
		CommitB *string `json:"commit_b"`
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	diffs, err := s.gitDiff(r.Context(), rec, deref(body.CommitA), deref(body.CommitB))
	if err != nil {
		return detailErr(http.StatusInternalServerError, err.Error())
	}
	writeJSON(w, http.StatusOK, map[string]any{"diffs": diffs})
	return nil
}

func (s *Server) sbLogs(w http.ResponseWriter, r *http.Request, rec *record) error {
	logs, err := s.gitLog(r.Context(), rec)
	if err != nil {
		return detailErr(http.StatusInternalServerError, err.Error())
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": logs})
	return nil
}
