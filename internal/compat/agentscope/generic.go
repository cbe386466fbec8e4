package agentscope

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

//go:embed pydriver.py
var pyDriver string

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
	res, err := s.m.ExecBuffered(ctx, r.Owner, r.ID, manager.ExecRequest{
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
// persistent interpreter, so variables, imports and functions stay
// defined between calls. Content: stdout, plus stderr when not empty (a
// traceback goes there); isError is "stderr was not empty".
func (s *Server) runIPythonCell(ctx context.Context, r *record, args map[string]any) map[string]any {
	code, err := argString(args, "code")
	if err != nil {
		return toolError("%v", err)
	}
	if code == "" {
		return toolError("Code is required.")
	}
	py, err := s.python(ctx, r)
	if err != nil {
		return toolError("start the Python interpreter: %s", errorText(err))
	}
	out, errOut, err := py.run(ctx, code, s.cfg.ToolTimeout)
	if err != nil {
		s.dropPython(r.ID, py)
		return toolError("%s", err.Error())
	}
	content := []map[string]any{describedText(out, "stdout")}
	if errOut != "" {
		content = append(content, describedText(errOut, "stderr"))
	}
	return toolResult(errOut != "", content...)
}

// pyRunner is one sandbox's persistent interpreter.
type pyRunner struct {
	mu    sync.Mutex // one cell at a time
	proc  *pipeProc
	lines chan string
}

// python returns r's interpreter, starting it on first use.
func (s *Server) python(ctx context.Context, r *record) (*pyRunner, error) {
	s.procMu.Lock()
	py := s.pythons[r.ID]
	s.procMu.Unlock()
	if py != nil && !py.proc.Exited() {
		return py, nil
	}
	client, err := s.m.Agent(ctx, r.Owner, r.ID)
	if err != nil {
		return nil, err
	}
	proc, err := startPipeProc(s.ctx, client, agentclient.StartOptions{
		Cmd: "python3", Args: []string{"-u", "-c", pyDriver}, Cwd: "/workspace",
		Env: map[string]string{"PYTHONIOENCODING": "utf-8"},
	})
	if err != nil {
		return nil, err
	}
	py = &pyRunner{proc: proc, lines: make(chan string, 1)}
	go py.readLines()
	s.procMu.Lock()
	if old := s.pythons[r.ID]; old != nil && !old.proc.Exited() {
		s.procMu.Unlock()
		proc.Close() // lost a race with another first call
		return old, nil
	}
	s.pythons[r.ID] = py
	s.procMu.Unlock()
	return py, nil
}

func (p *pyRunner) readLines() {
	defer close(p.lines)
	sc := bufio.NewScanner(p.proc)
	sc.Buffer(make([]byte, 64<<10), 80<<20)
	for sc.Scan() {
		p.lines <- sc.Text()
	}
}

// run executes one cell and returns its stdout and stderr. An error means
// the interpreter is unusable (timed out and killed, or died).
func (p *pyRunner) run(ctx context.Context, code string, timeout time.Duration) (string, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	req, _ := json.Marshal(map[string]string{"code": code})
	if _, err := p.proc.Write(append(req, '\n')); err != nil {
		return "", "", fmt.Errorf("send code to the interpreter: %w", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", "", fmt.Errorf("the Python interpreter exited: %s", p.proc.Stderr())
		}
		var res struct{ Stdout, Stderr string }
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return "", "", fmt.Errorf("bad answer from the interpreter: %w", err)
		}
		return res.Stdout, res.Stderr, nil
	case <-t.C:
		return "", "", fmt.Errorf("the cell ran longer than %s; the interpreter was restarted and its state is lost", timeout)
	case <-ctx.Done():
		return "", "", errors.Join(sandbox.Errorf(sandbox.ClassTimeout, "the call was cancelled; the interpreter was restarted"), ctx.Err())
	}
}

func (s *Server) dropPython(id sandbox.ID, py *pyRunner) {
	s.procMu.Lock()
	if s.pythons[id] == py {
		delete(s.pythons, id)
	}
	s.procMu.Unlock()
	py.proc.Close()
}

// stopProcesses ends the interpreter and MCP servers of a sandbox that is
// going away.
func (s *Server) stopProcesses(id sandbox.ID) {
	s.procMu.Lock()
	py, g := s.pythons[id], s.mcps[id]
	delete(s.pythons, id)
	delete(s.mcps, id)
	s.procMu.Unlock()
	if py != nil {
		py.proc.Close()
	}
	if g != nil {
		g.close()
	}
}
