package agentscope

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// runShellCommand is run_shell_command: /bin/sh -c command in /workspace.
// Content: stdout, stderr (only when not empty), returncode; isError is
// "stderr was not empty", not the exit code (as in agentscope).
func (s *Server) runShellCommand(ctx context.Context, r *record, args map[string]any) map[string]any {
	command, err := argString(args, "command")
	if err != nil {
		return toolError("%v", err)
	}
	if command == "" {
		return toolError("Command is required.")
	}
	dr, done, err := s.work(ctx, r)
	if err != nil {
		return toolError("%s", errorText(err))
	}
	defer done()
	res, err := dr.ExecBuffered(ctx, dataplane.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", command}, Cwd: "/workspace", Timeout: s.cfg.ToolTimeout,
	})
	if err != nil {
		return toolError("%s", errorText(err))
	}
	stderr := string(res.Stderr)
	if res.TimedOut {
		stderr += fmt.Sprintf("\ncommand timed out after %s and was killed\n", s.cfg.ToolTimeout)
	}
	code := res.ExitCode
	if code < 0 {
		code = -9 // Python's returncode for a process killed by SIGKILL
	}
	content := []map[string]any{describedText(string(res.Stdout), "stdout")}
	if stderr != "" {
		content = append(content, describedText(stderr, "stderr"))
	}
	content = append(content, describedText(fmt.Sprint(code), "returncode"))
	return toolResult(stderr != "", content...)
}

// runIPythonCell is run_ipython_cell: the code runs in the sandbox's
// default Python code context (the agent's persistent interpreter), so
// variables, imports and functions stay defined between calls. Content:
// stdout (with the value of a final expression, as IPython shows it),
// plus stderr when not empty (a traceback goes there); isError is "stderr
// was not empty".
func (s *Server) runIPythonCell(ctx context.Context, r *record, args map[string]any) map[string]any {
	code, err := argString(args, "code")
	if err != nil {
		return toolError("%v", err)
	}
	if code == "" {
		return toolError("Code is required.")
	}
	dr, done, err := s.work(ctx, r)
	if err != nil {
		return toolError("%s", errorText(err))
	}
	defer done()
	x, err := dr.RunCode(ctx, dataplane.CodeExecRequest{Code: code, Timeout: s.cfg.ToolTimeout, MaxOutputBytes: s.cfg.MaxOutput})
	if err != nil {
		return toolError("%s", errorText(err))
	}
	stdout := strings.Join(x.Stdout, "")
	for _, res := range x.Results {
		if res.IsMainResult != nil && *res.IsMainResult && res.Text != nil {
			stdout += *res.Text + "\n"
		}
	}
	stderr := strings.Join(x.Stderr, "")
	if x.Error != nil {
		tb := x.Error.Traceback
		if tb == "" {
			tb = x.Error.Name + ": " + x.Error.Value
		}
		if !strings.HasSuffix(tb, "\n") {
			tb += "\n"
		}
		stderr += tb
	}
	content := []map[string]any{describedText(stdout, "stdout")}
	if stderr != "" {
		content = append(content, describedText(stderr, "stderr"))
	}
	return toolResult(stderr != "", content...)
}

// stopProcesses ends the MCP servers of a sandbox that is
// going away.
func (s *Server) stopProcesses(id sandbox.ID) (dropped bool) {
	s.procMu.Lock()
	g := s.mcps[id]
	delete(s.mcps, id)
	s.procMu.Unlock()
	if g != nil {
		g.close()
	}
	return s.browsers.stop(id) || g != nil
}
