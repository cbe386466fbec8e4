package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// workspace is where the tools work: file paths are confined to it (and
// to /tmp), and commands start in it.
const workspace = "/workspace"

// envDir holds the variables env_set persists, relative to the sandbox
// user's home: env.sh is sourced by every command, env.json read by
// run_code.
const envDir = ".agentbox"

// envPrefix sources the persisted variables before a command.
const envPrefix = `f="$HOME/.agentbox/env.sh"; [ -f "$f" ] && . "$f"; unset f; `

// Command limits.
const (
	defaultExecTimeout = 120 * time.Second
	maxExecTimeout     = 3600
)

// sh runs script with sh -c in sb (persisted variables loaded, cwd
// /workspace unless given) and returns its buffered output.
func (s *Session) sh(ctx context.Context, sb, cwd string, timeout time.Duration, script string, args ...string) (*client.ExecResult, error) {
	if cwd == "" {
		cwd = workspace
	}
	if timeout == 0 {
		timeout = defaultExecTimeout
	}
	cmd := append([]string{"sh", "-c", envPrefix + script, "agentbox"}, args...)
	return s.c.Exec(ctx, sb, client.ExecRequest{Cmd: cmd, Cwd: cwd, Timeout: timeout})
}

// combined renders a command's output for a model: stdout, then stderr
// under a heading, each capped.
func combined(stdout, stderr string) string {
	var b strings.Builder
	out, _ := truncateText(stdout)
	b.WriteString(out)
	if stderr != "" {
		if b.Len() > 0 && !strings.HasSuffix(out, "\n") {
			b.WriteString("\n")
		}
		errOut, _ := truncateText(stderr)
		b.WriteString("[stderr]\n" + errOut)
	}
	return b.String()
}

// exitNote describes a non-zero end of a command.
func exitNote(x client.ExitInfo) string {
	var notes []string
	if x.TimedOut {
		notes = append(notes, "the command timed out and was killed; raise timeout (seconds) or run it with background=true")
	}
	if x.OOMKilled {
		notes = append(notes, "a process was killed for exceeding the sandbox's memory limit")
	}
	if x.PidsLimitHit {
		notes = append(notes, "the sandbox's process limit refused new processes")
	}
	s := fmt.Sprintf("[exit code %d", x.ExitCode)
	if x.Status != "" && x.ExitCode < 0 {
		s += ", " + x.Status
	}
	s += "]"
	if len(notes) > 0 {
		s += " " + strings.Join(notes, "; ")
	}
	return s
}

func shellTools() []*Tool {
	return []*Tool{
		{
			Name: "shell_exec",
			Description: "Run a shell command (bash, else sh) in the sandbox and return its output and exit code. " +
				"Commands start in /workspace unless cwd says otherwise; variables saved with env_set are set. " +
				"Each call is a fresh shell: use cwd instead of cd, and env_set for variables that must persist. " +
				"Long outputs are cut in the middle: redirect to a file (cmd > /workspace/out.txt 2>&1) and page through it with file_read offset/limit. " +
				"For servers and other long-running commands set background=true, then read their log with file_read and stop them with process_kill. " +
				"A non-zero exit code is reported as an error result.",
			Schema: object(req("command"),
				p("command", strMax("The command line, e.g. \"ls -la\" or \"python3 train.py --epochs 3\".", 100000)),
				p("cwd", str("Working directory (default /workspace).")),
				p("timeout", integer("Seconds before the command is killed (default 120).", 1, maxExecTimeout)),
				p("background", boolean("Start the command detached and return at once with its pid and log file, instead of waiting for it.")),
			),
			run: runShellExec,
		},
		{
			Name:        "env_get",
			Description: "Show the environment variables saved with env_set for this sandbox (they apply to every later shell_exec, run_code and terminal). Give name for one variable.",
			Schema:      object(nil, p("name", str("One variable's name; omit to list all saved variables."))),
			run:         runEnvGet,
		},
		{
			Name: "env_set",
			Description: "Save environment variables in this sandbox for every later shell_exec, run_code and new shell_interactive terminal (e.g. API endpoints, PYTHONPATH). " +
				"Values are stored in the sandbox in plain text. Use unset to remove variables.",
			Schema: object(nil,
				p("vars", strMap("Variables to set: {\"NAME\": \"value\"}. Names are letters, digits and _, not starting with a digit.")),
				p("unset", strArray("Names of variables to remove.", 100)),
			),
			run: runEnvSet,
		},
		{
			Name:        "process_list",
			Description: "List the processes running in the sandbox (pid, parent pid, elapsed time, command), e.g. to find a background server to stop.",
			Schema:      object(nil),
			run:         runProcessList,
		},
		{
			Name:        "process_kill",
			Description: "Send a signal to a process in the sandbox (default TERM; KILL when it does not stop). Use process_list to find the pid.",
			Schema: object(req("pid"),
				p("pid", integer("The process id.", 2, 1<<22)),
				p("signal", enum("The signal (default TERM).", "TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2")),
			),
			run: runProcessKill,
		},
		{
			Name: "pip_install",
			Description: "Install Python packages into the sandbox user's site-packages with pip (python3 -m pip install --user). " +
				"Needs network access to the package index: sandboxes without egress fail with a network error.",
			Schema: object(req("packages"),
				p("packages", map[string]any{"type": "array", "items": map[string]any{"type": "string", "maxLength": 200}, "minItems": 1, "maxItems": 50,
					"description": "Requirement specifiers, e.g. [\"requests\", \"numpy==2.1.0\"]."}),
				p("upgrade", boolean("Upgrade packages that are already installed.")),
			),
			run: runPipInstall,
		},
		{
			Name: "npm_install",
			Description: "Install Node.js packages with npm into a project directory (default /workspace; a package.json is created if missing). " +
				"With no packages, installs the project's dependencies. Needs network access to the registry.",
			Schema: object(nil,
				p("packages", map[string]any{"type": "array", "items": map[string]any{"type": "string", "maxLength": 200}, "maxItems": 50,
					"description": "Package specs, e.g. [\"lodash\", \"express@4\"]."}),
				p("path", str("Project directory (default /workspace).")),
				p("dev", boolean("Save as devDependencies.")),
			),
			run: runNpmInstall,
		},
		{
			Name: "http_request",
			Description: "Make an HTTP request from inside the sandbox (with curl), under the sandbox's network policy: " +
				"localhost means the sandbox itself (e.g. a server you started there), and outside hosts are reachable only if the sandbox's egress policy allows them. " +
				"Returns the status line, headers and body (long bodies are cut; binary bodies are refused: save them with shell_exec curl -o instead).",
			Schema: object(req("url"),
				p("url", str("An http:// or https:// URL.")),
				p("method", enum("HTTP method (default GET).", "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")),
				p("headers", strMap("Request headers, e.g. {\"Content-Type\": \"application/json\"}.")),
				p("body", strMax("Request body (text).", 1<<20)),
				p("timeout", integer("Seconds before giving up (default 30).", 1, 300)),
				p("follow_redirects", boolean("Follow redirects (default false).")),
			),
			run: runHTTPRequest,
		},
		{
			Name: "preview_url",
			Description: "Get a URL at which a server listening on a port inside the sandbox (e.g. a web app started with shell_exec background=true) can be reached from outside. " +
				"The server must listen on 0.0.0.0 or 127.0.0.1 in the sandbox. The URL carries an access token valid for ttl seconds. " +
				"When the agentbox server has a preview domain the URL opens in a browser; otherwise it is for programs (curl, HTTP clients).",
			Schema: object(req("port"),
				p("port", integer("The port the server listens on inside the sandbox.", 1, 65535)),
				p("ttl", integer("Seconds the URL stays valid (default 3600).", 60, 7*24*3600)),
			),
			run: runPreviewURL,
		},
	}
}

func runShellExec(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Command    string `json:"command"`
		Cwd        string `json:"cwd"`
		Timeout    int    `json:"timeout"`
		Background bool   `json:"background"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return nil, fail("command is empty")
	}
	cwd := workspace
	if a.Cwd != "" {
		var err error
		if cwd, err = s.resolve(ctx, sb, a.Cwd, false); err != nil {
			return nil, err
		}
	}
	timeout := defaultExecTimeout
	if a.Timeout > 0 {
		timeout = time.Duration(a.Timeout) * time.Second
	}
	runShell := `if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; else exec sh -c "$1"; fi`
	if a.Background {
		log := fmt.Sprintf("/tmp/agentbox-bg/%s.log", randomTag()[:12])
		script := `mkdir -p /tmp/agentbox-bg && ( ` + runShell + ` ) </dev/null >"$2" 2>&1 & echo $!`
		res, err := s.sh(ctx, sb, cwd, 30*time.Second, script, a.Command, log)
		if err != nil {
			return nil, err
		}
		if res.ExitCode != 0 {
			return nil, fail("could not start the command: %s", combined(res.Stdout, res.Stderr))
		}
		pid := strings.TrimSpace(res.Stdout)
		return textResult("Started in the background: pid %s. Its output goes to %s (read it with file_read; it grows while the command runs). Stop it with process_kill pid=%s.", pid, log, pid), nil
	}
	var out, errOut capture
	cmd := []string{"sh", "-c", envPrefix + runShell, "agentbox", a.Command}
	x, err := s.c.Run(ctx, sb, client.ExecRequest{Cmd: cmd, Cwd: cwd, Timeout: timeout}, &out, &errOut)
	if err != nil {
		return nil, err
	}
	text := out.String()
	if errOut.total > 0 {
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += "[stderr]\n" + errOut.String()
	}
	if out.truncated() || errOut.truncated() {
		text += fmt.Sprintf("\n[output truncated: %d bytes of stdout, %d of stderr. To see all of it, rerun with the output redirected to a file (e.g. `%s > /workspace/out.txt 2>&1`) and read it with file_read using offset and limit, or filter it with grep/head/tail.]",
			out.total, errOut.total, "cmd")
	}
	if x.ExitCode != 0 || x.TimedOut {
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		return &Result{IsError: true, Content: []Content{{Type: "text", Text: text + exitNote(x)}}}, nil
	}
	if text == "" {
		text = "(no output)"
	}
	return textResult("%s", text), nil
}

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`) })

// loadEnv returns the persisted variables of sb (cached in the kit).
func (s *Session) loadEnv(ctx context.Context, sb string) (map[string]string, error) {
	st := s.kit.state(s.opts.Owner, sb)
	st.mu.Lock()
	env := st.env
	st.mu.Unlock()
	if env != nil {
		return env, nil
	}
	env = map[string]string{}
	data, err := s.download(ctx, s.c, sb, envDir+"/env.json", 1<<20)
	switch {
	case client.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(data, &env); err != nil {
			return nil, fail("the saved environment (~/%s/env.json) is damaged: %v; fix it with env_set", envDir, err)
		}
	}
	st.mu.Lock()
	st.env = env
	st.mu.Unlock()
	return env, nil
}

func runEnvGet(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Name string `json:"name"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	env, err := s.loadEnv(ctx, sb)
	if err != nil {
		return nil, err
	}
	if a.Name != "" {
		v, ok := env[a.Name]
		if !ok {
			return textResult("%s is not set (by env_set).", a.Name), nil
		}
		return textResult("%s=%s", a.Name, v), nil
	}
	if len(env) == 0 {
		return textResult("No variables saved with env_set."), nil
	}
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s=%s\n", k, env[k])
	}
	return textResult("%s", strings.TrimSuffix(b.String(), "\n")), nil
}

func runEnvSet(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Vars  map[string]string `json:"vars"`
		Unset []string          `json:"unset"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if len(a.Vars) == 0 && len(a.Unset) == 0 {
		return nil, fail("give vars to set or unset to remove")
	}
	for k, v := range a.Vars {
		if !envName().MatchString(k) {
			return nil, fail("invalid variable name %q: use letters, digits and _, not starting with a digit", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, fail("the value of %s contains a NUL byte", k)
		}
	}
	env, err := s.loadEnv(ctx, sb)
	if err != nil {
		return nil, err
	}
	next := map[string]string{}
	for k, v := range env {
		next[k] = v
	}
	for _, k := range a.Unset {
		delete(next, k)
	}
	for k, v := range a.Vars {
		next[k] = v
	}
	if len(next) > 256 {
		return nil, fail("at most 256 saved variables")
	}
	js, _ := json.MarshalIndent(next, "", "  ")
	if len(js) > 1<<20 {
		return nil, fail("the saved variables would take more than 1 MiB")
	}
	names := make([]string, 0, len(next))
	for k := range next {
		names = append(names, k)
	}
	sort.Strings(names)
	var sh strings.Builder
	sh.WriteString("# written by agentbox env_set\n")
	for _, k := range names {
		fmt.Fprintf(&sh, "export %s=%s\n", k, shellQuote(next[k]))
	}
	for _, k := range a.Unset {
		if _, still := next[k]; !still && envName().MatchString(k) {
			fmt.Fprintf(&sh, "unset %s\n", k)
		}
	}
	if err := s.upload(ctx, s.c, sb, envDir+"/env.json", js); err != nil {
		return nil, err
	}
	if err := s.upload(ctx, s.c, sb, envDir+"/env.sh", []byte(sh.String())); err != nil {
		return nil, err
	}
	st := s.kit.state(s.opts.Owner, sb)
	st.mu.Lock()
	st.env = next
	st.mu.Unlock()
	return textResult("Saved %d variable(s); %d set in total. They apply to later commands, code runs and new terminals.", len(a.Vars)+len(a.Unset), len(next)), nil
}

func runProcessList(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	script := `if command -v ps >/dev/null 2>&1; then ps -eo pid,ppid,etime,args; else
echo "  PID  PPID COMMAND"; for d in /proc/[0-9]*; do p=${d#/proc/}; c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null);
pp=$(sed -n 's/^PPid:[[:space:]]*//p' $d/status 2>/dev/null); [ -n "$c" ] && echo "$p $pp $c"; done; fi`
	res, err := s.sh(ctx, sb, "", 30*time.Second, script)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fail("listing processes failed: %s", combined(res.Stdout, res.Stderr))
	}
	// Drop the listing's own processes.
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n") {
		if strings.Contains(l, "ps -eo pid,ppid,etime,args") || strings.Contains(l, "agentbox/env.sh") {
			continue
		}
		keep = append(keep, l)
	}
	out, _ := truncateText(strings.Join(keep, "\n"))
	return textResult("%s", out), nil
}

func runProcessKill(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		PID    int    `json:"pid"`
		Signal string `json:"signal"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.Signal == "" {
		a.Signal = "TERM"
	}
	res, err := s.sh(ctx, sb, "", 30*time.Second, `kill -s "$1" "$2"`, a.Signal, strconv.Itoa(a.PID))
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fail("kill -s %s %d failed: %s (check the pid with process_list)", a.Signal, a.PID, strings.TrimSpace(combined(res.Stdout, res.Stderr)))
	}
	return textResult("Sent SIG%s to process %d.", a.Signal, a.PID), nil
}

// checkSpecs refuses package specs that would be read as options.
func checkSpecs(specs []string) error {
	for _, p := range specs {
		if strings.TrimSpace(p) == "" || strings.HasPrefix(strings.TrimSpace(p), "-") {
			return fail("invalid package %q: give package names or specifiers, not options", p)
		}
	}
	return nil
}

// installResult reports a package manager's run.
func installResult(tool string, res *client.ExecResult) (*Result, error) {
	out := combined(res.Stdout, res.Stderr)
	if res.ExitCode != 0 {
		hint := ""
		low := strings.ToLower(out)
		if strings.Contains(low, "network is unreachable") || strings.Contains(low, "name resolution") ||
			strings.Contains(low, "could not resolve") || strings.Contains(low, "enotfound") || strings.Contains(low, "eai_again") ||
			strings.Contains(low, "connection refused") || strings.Contains(low, "newconnectionerror") {
			hint = "\nThe sandbox could not reach the package index: it may have no network (create one with sandbox_create network=\"egress\") or its egress policy may not allow the registry."
		}
		return &Result{IsError: true, Content: []Content{{Type: "text", Text: fmt.Sprintf("%s failed (exit code %d):\n%s%s", tool, res.ExitCode, out, hint)}}}, nil
	}
	return textResult("%s succeeded.\n%s", tool, out), nil
}

func runPipInstall(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Packages []string `json:"packages"`
		Upgrade  bool     `json:"upgrade"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if err := checkSpecs(a.Packages); err != nil {
		return nil, err
	}
	script := `export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1; exec python3 -m pip install --user --progress-bar off "$@"`
	args := a.Packages
	if a.Upgrade {
		args = append([]string{"--upgrade"}, args...)
	}
	res, err := s.sh(ctx, sb, "", 10*time.Minute, script, args...)
	if err != nil {
		return nil, err
	}
	return installResult("pip install", res)
}

func runNpmInstall(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Packages []string `json:"packages"`
		Path     string   `json:"path"`
		Dev      bool     `json:"dev"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if err := checkSpecs(a.Packages); err != nil {
		return nil, err
	}
	dir := workspace
	if a.Path != "" {
		var err error
		if dir, err = s.resolve(ctx, sb, a.Path, false); err != nil {
			return nil, err
		}
		if e, err := s.fs().Stat(ctx, sb, dir); err != nil || e.Type != "dir" {
			if _, err := s.fs().MakeDir(ctx, sb, dir); err != nil {
				return nil, err
			}
		}
	}
	script := `[ -f package.json ] || echo '{"private": true}' > package.json; exec npm install --no-audit --no-fund --no-progress "$@"`
	var args []string
	if a.Dev {
		args = append(args, "--save-dev")
	}
	args = append(args, a.Packages...)
	res, err := s.sh(ctx, sb, dir, 10*time.Minute, script, args...)
	if err != nil {
		return nil, err
	}
	return installResult("npm install", res)
}

func runHTTPRequest(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		URL             string            `json:"url"`
		Method          string            `json:"method"`
		Headers         map[string]string `json:"headers"`
		Body            *string           `json:"body"`
		Timeout         int               `json:"timeout"`
		FollowRedirects bool              `json:"follow_redirects"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	low := strings.ToLower(a.URL)
	if !strings.HasPrefix(low, "http://") && !strings.HasPrefix(low, "https://") {
		return nil, fail("url must start with http:// or https://")
	}
	if a.Method == "" {
		a.Method = "GET"
	}
	if a.Timeout == 0 {
		a.Timeout = 30
	}
	cmd := []string{"curl", "-sS", "-i", "--max-time", strconv.Itoa(a.Timeout), "-X", a.Method}
	if a.Method == "HEAD" {
		cmd = append(cmd, "-I")
	}
	if a.FollowRedirects {
		cmd = append(cmd, "-L", "--max-redirs", "10")
	}
	names := make([]string, 0, len(a.Headers))
	for k := range a.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := a.Headers[k]
		if strings.ContainsAny(k, ":\r\n") || strings.ContainsAny(v, "\r\n") || k == "" {
			return nil, fail("invalid header %q", k)
		}
		cmd = append(cmd, "-H", k+": "+v)
	}
	req := client.ExecRequest{Cwd: workspace, Timeout: time.Duration(a.Timeout+10) * time.Second}
	if a.Body != nil {
		cmd = append(cmd, "--data-binary", "@-")
		req.Stdin = *a.Body
	}
	req.Cmd = append(cmd, "--", a.URL)
	res, err := s.c.Exec(ctx, sb, req)
	if client.IsExecutableNotFound(err) || (err == nil && res.ExitCode == 127) {
		return nil, fail("curl is not installed in this sandbox; use run_code with Python's urllib instead")
	}
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fail("request failed (curl exit code %d): %s. The sandbox's network policy may not allow this host, or nothing listens there.", res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	head, body := splitHTTP(res.Stdout)
	// The exec API hands output over as UTF-8 with invalid bytes replaced.
	if strings.ContainsRune(body, 0) || strings.ContainsRune(body, '\uFFFD') {
		return textResult("%s\n\n[binary body of about %d bytes not shown: save it with shell_exec, e.g. curl -o /workspace/file %s]", strings.TrimSpace(head), len(body), shellQuote(a.URL)), nil
	}
	text, cut := truncateText(body)
	if cut || res.Truncated {
		text += "\n[body truncated: save it with shell_exec (curl -o /workspace/body.txt URL) and page through it with file_read offset/limit]"
	}
	return textResult("%s\n\n%s", strings.TrimSpace(head), text), nil
}

// splitHTTP splits curl -i output into the header block(s) and the body.
func splitHTTP(s string) (head, body string) {
	rest := s
	for {
		i := strings.Index(rest, "\r\n\r\n")
		if i < 0 {
			return head + rest, ""
		}
		block := rest[:i]
		head += block + "\n"
		rest = rest[i+4:]
		// 1xx interim responses and redirects followed with -L come first.
		if !strings.HasPrefix(rest, "HTTP/") {
			return head, rest
		}
	}
}

func runPreviewURL(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Port int `json:"port"`
		TTL  int `json:"ttl"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	tok, err := s.c.CreatePreviewToken(ctx, sb, a.Port, time.Duration(a.TTL)*time.Second)
	if err != nil {
		return nil, err
	}
	return textResult("Preview URL for port %d (valid until %s): %s\nIf nothing answers there, start a server that listens on port %d in the sandbox first.",
		a.Port, tok.ExpiresAt.Format(time.RFC3339), tok.URL, a.Port), nil
}
