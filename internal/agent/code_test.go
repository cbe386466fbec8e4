package agent_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	_ "image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The code tests use the system python (/usr/bin/python3, the one
// sandboxes get); IPython is not installed there, so they exercise the
// built-in driver. TestCodeIPython covers the IPython engine when some
// python3 on the test's PATH has it.
const systemPath = "PATH=/usr/bin:/bin"

func startCodeAgent(t *testing.T) (*agenttest.Agent, *agentclient.Client) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	return startAgent(t, agenttest.Options{Env: []string{systemPath}, LogLevel: "info"})
}

// run executes req and fails the test on transport errors.
func run(t *testing.T, c *agentclient.Client, req agentclient.ExecuteRequest) *agentclient.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, err := c.RunCode(ctx, req)
	if err != nil {
		t.Fatalf("execute %q: %v", req.Code, err)
	}
	return x
}

func py(code string) agentclient.ExecuteRequest { return agentclient.ExecuteRequest{Code: code} }

func stdout(x *agentclient.Execution) string { return strings.Join(x.Stdout, "") }
func stderr(x *agentclient.Execution) string { return strings.Join(x.Stderr, "") }

func wantNoError(t *testing.T, x *agentclient.Execution) {
	t.Helper()
	if x.Error != nil {
		t.Fatalf("unexpected error %s: %s\n%s", x.Error.Name, x.Error.Value, x.Error.Traceback)
	}
}

func wantError(t *testing.T, x *agentclient.Execution, name, valuePart string) {
	t.Helper()
	if x.Error == nil || x.Error.Name != name || !strings.Contains(x.Error.Value, valuePart) {
		t.Fatalf("want error %s containing %q, got %+v (stdout %q stderr %q)", name, valuePart, x.Error, stdout(x), stderr(x))
	}
}

func TestCodePythonStateAndRestart(t *testing.T) {
	_, c := startCodeAgent(t)
	wantNoError(t, run(t, c, py("x = [1, 2, 3]")))
	wantNoError(t, run(t, c, py("x.append(4)")))
	x := run(t, c, py("print(x)"))
	wantNoError(t, x)
	if stdout(x) != "[1, 2, 3, 4]\n" || x.ExecutionCount != 3 {
		t.Fatalf("stdout %q count %d", stdout(x), x.ExecutionCount)
	}

	ctx := testCtx(t)
	list, err := c.ListContexts(ctx)
	if err != nil || len(list) != 1 || list[0].Language != "python" {
		t.Fatalf("contexts %+v %v", list, err)
	}
	if err := c.RestartContext(ctx, list[0].ID); err != nil {
		t.Fatal(err)
	}
	x = run(t, c, py("print(x)"))
	wantError(t, x, "NameError", "'x' is not defined")
	if x.ExecutionCount != 1 {
		t.Fatalf("count after restart %d", x.ExecutionCount)
	}
}

func TestCodeResultsAndErrors(t *testing.T) {
	_, c := startCodeAgent(t)
	x := run(t, c, py(`
class Rich:
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_markdown_(self): return "**rich**"
    def _repr_svg_(self): return "<svg></svg>"
    def _repr_png_(self): return b"\x89PNG"
    def _repr_json_(self): return {"a": [1, 2]}
    def _repr_latex_(self): return r"$x^2$"
    def __repr__(self): return "Rich()"
import sys
print("out")
print("err", file=sys.stderr)
display(Rich())
Rich()`))
	wantNoError(t, x)
	if stdout(x) != "out\n" || stderr(x) != "err\n" || len(x.Results) != 2 {
		t.Fatalf("stdout %q stderr %q results %d", stdout(x), stderr(x), len(x.Results))
	}
	shown, main := x.Results[0], x.Results[1]
	if *shown.IsMainResult || !*main.IsMainResult {
		t.Fatalf("is_main_result: display %v, last expression %v", *shown.IsMainResult, *main.IsMainResult)
	}
	png, _ := base64.StdEncoding.DecodeString(main.PNG)
	if *main.Text != "Rich()" || main.HTML != "<b>rich</b>" || main.Markdown != "**rich**" || main.SVG != "<svg></svg>" ||
		string(png) != "\x89PNG" || string(main.JSON) != `{"a":[1,2]}` || main.LaTeX != "$x^2$" {
		t.Fatalf("formats %+v", main)
	}

	// A string result is unwrapped like E2B's server does; ';' hides it.
	if x := run(t, c, py("'abc'")); x.Text() != "abc" {
		t.Fatalf("string result %q", x.Text())
	}
	if x := run(t, c, py("1 + 1;")); len(x.Results) != 0 {
		t.Fatalf("suppressed result shown: %+v", x.Results)
	}

	x = run(t, c, py("def f():\n    return 1 / 0\nf()"))
	wantError(t, x, "ZeroDivisionError", "division by zero")
	if !strings.Contains(x.Error.Traceback, "in f") || !strings.Contains(x.Error.Traceback, "return 1 / 0") ||
		strings.Contains(x.Error.Traceback, "agentbox-driver") {
		t.Fatalf("traceback %q", x.Error.Traceback)
	}
	wantError(t, run(t, c, py("def (")), "SyntaxError", "")
	// Exits and interrupts of user code are errors, not the end of the
	// context.
	wantError(t, run(t, c, py("import sys; sys.exit(3)")), "SystemExit", "3")
	wantNoError(t, run(t, c, py("await __import__('asyncio').sleep(0)")))
}

// TestCodeDataFrameFormats checks what a pandas DataFrame result carries
// (html, text and E2B's data) with a stand-in class: pandas is not
// installed for the system python.
func TestCodeDataFrameFormats(t *testing.T) {
	_, c := startCodeAgent(t)
	x := run(t, c, py(`
class DataFrame:
    __module__ = "pandas.core.frame"
    def __init__(self, cols): self.cols = cols
    def _repr_html_(self): return "<table><tr><td>1</td></tr></table>"
    def __repr__(self): return "   a\n0  1"
    def to_dict(self, orient): return dict(self.cols)
DataFrame({"a": [1, float("nan")], 2: ["x", None]})`))
	wantNoError(t, x)
	r := x.Results[0]
	if r.HTML == "" || *r.Text != "   a\n0  1" || string(r.Data) != `{"a":[1,null],"2":["x",null]}` {
		t.Fatalf("DataFrame result: html %q text %q data %s", r.HTML, *r.Text, r.Data)
	}
}

func TestCodeMatplotlibFigureIsPNG(t *testing.T) {
	if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
		t.Skip("matplotlib is not installed for /usr/bin/python3 (apt install python3-matplotlib)")
	}
	_, c := startCodeAgent(t)
	x := run(t, c, py("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()"))
	wantNoError(t, x)
	if len(x.Results) != 1 || x.Results[0].PNG == "" || *x.Results[0].IsMainResult {
		t.Fatalf("want one PNG display result, got %+v (stderr %q)", x.Results, stderr(x))
	}
	raw, err := base64.StdEncoding.DecodeString(x.Results[0].PNG)
	if err != nil {
		t.Fatal(err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || format != "png" || cfg.Width < 100 || cfg.Height < 100 {
		t.Fatalf("decode PNG: %v %s %+v", err, format, cfg)
	}
	// Figures left open are flushed at the end of the execution, once.
	x = run(t, c, py("fig = plt.figure()\nplt.bar([1], [2])\nprint('drawn')"))
	if len(x.Results) != 1 || x.Results[0].PNG == "" {
		t.Fatalf("open figure not flushed: %+v", x.Results)
	}
	if x = run(t, c, py("1")); len(x.Results) != 1 || x.Results[0].PNG != "" {
		t.Fatalf("figure repeated: %+v", x.Results)
	}
}

func TestCodeTimeoutInterruptKeepsState(t *testing.T) {
	_, c := startCodeAgent(t)
	wantNoError(t, run(t, c, py("x = 41")))
	x := run(t, c, agentclient.ExecuteRequest{Code: "while True:\n    pass", Timeout: 500 * time.Millisecond})
	wantError(t, x, "TimeoutError", "state was kept")
	if !strings.Contains(x.Error.Traceback, "KeyboardInterrupt") {
		t.Fatalf("traceback %q", x.Error.Traceback)
	}
	if x := run(t, c, py("x + 1")); x.Text() != "42" {
		t.Fatalf("after interrupt: %q %+v", x.Text(), x.Error)
	}
}

func TestCodeTimeoutForcedRestartLosesState(t *testing.T) {
	_, c := startCodeAgent(t)
	wantNoError(t, run(t, c, py("x = 41")))
	start := time.Now()
	x := run(t, c, agentclient.ExecuteRequest{Timeout: 300 * time.Millisecond,
		Code: "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"})
	wantError(t, x, "TimeoutError", "state was lost")
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("forced restart took %v", d)
	}
	wantError(t, run(t, c, py("x")), "NameError", "'x'")
	if x := run(t, c, py("6 * 7")); x.Text() != "42" {
		t.Fatalf("after restart: %+v", x)
	}
}

func TestCodeCrashesRestartTheInterpreter(t *testing.T) {
	_, c := startCodeAgent(t)
	for _, tc := range []struct{ name, code, want string }{
		{"exit", "import os\nprint('bye', flush=True)\nos._exit(1)", "exit status 1"},
		{"segfault", "import ctypes\nctypes.string_at(0)", "segmentation fault"},
		// What the OOM killer does to a sandbox that blows its memory.
		{"sigkill", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "out-of-memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantNoError(t, run(t, c, py("state = 1")))
			x := run(t, c, py(tc.code))
			wantError(t, x, "ContextRestarting", tc.want)
			if !strings.Contains(x.Error.Value, "state was lost") {
				t.Fatalf("message %q", x.Error.Value)
			}
			if tc.name == "exit" && stdout(x) != "bye\n" {
				t.Fatalf("output before the exit lost: %q", stdout(x))
			}
			wantError(t, run(t, c, py("state")), "NameError", "'state'")
			if x := run(t, c, py("2 + 2")); x.Text() != "4" {
				t.Fatalf("after %s: %+v", tc.name, x)
			}
		})
	}
}

func TestCodeMemoryErrorKeepsContext(t *testing.T) {
	_, c := startCodeAgent(t)
	wantNoError(t, run(t, c, py("keep = 'yes'\nimport resource\nresource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))")))
	wantError(t, run(t, c, py("blob = bytearray(4 << 30)")), "MemoryError", "")
	if x := run(t, c, py("keep")); x.Text() != "yes" {
		t.Fatalf("state after MemoryError: %+v", x)
	}
}

func TestCodeBashContext(t *testing.T) {
	_, c := startCodeAgent(t)
	ctx := testCtx(t)
	bc, err := c.CreateContext(ctx, "bash", "", "")
	if err != nil {
		t.Fatal(err)
	}
	sh := func(code string) *agentclient.Execution {
		return run(t, c, agentclient.ExecuteRequest{Code: code, ContextID: bc.ID})
	}
	wantNoError(t, sh("cd /tmp\nexport GREETING=hello\nf() { echo \"fn $1\"; }"))
	x := sh("pwd; echo $GREETING; f ok")
	wantNoError(t, x)
	if stdout(x) != "/tmp\nhello\nfn ok\n" {
		t.Fatalf("state not kept: %q", stdout(x))
	}
	// Like E2B's bash kernel: a failing last command is an error with an
	// empty name and the status as value.
	x = sh("echo out; echo err >&2; (exit 3)")
	if x.Error == nil || x.Error.Name != "" || x.Error.Value != "3" || stdout(x) != "out\n" || stderr(x) != "err\n" {
		t.Fatalf("exit status: %+v %q %q", x.Error, stdout(x), stderr(x))
	}
	// Per-execution variables are set and then restored.
	x = run(t, c, agentclient.ExecuteRequest{Code: "echo $GREETING $ONCE", ContextID: bc.ID,
		EnvVars: map[string]string{"GREETING": "hi'there", "ONCE": "1"}})
	if stdout(x) != "hi'there 1\n" {
		t.Fatalf("env vars: %q", stdout(x))
	}
	if x := sh("echo $GREETING ${ONCE-unset}"); stdout(x) != "hello unset\n" {
		t.Fatalf("env vars not restored: %q", stdout(x))
	}
	// stdin is not the shell's command pipe; an interrupted command
	// leaves the shell alive.
	if x := sh("cat; echo after-cat"); stdout(x) != "after-cat\n" {
		t.Fatalf("cat read the command pipe: %q", stdout(x))
	}
	x = run(t, c, agentclient.ExecuteRequest{Code: "sleep 30", ContextID: bc.ID, Timeout: 300 * time.Millisecond})
	wantError(t, x, "TimeoutError", "state was kept")
	if x := sh("pwd"); stdout(x) != "/tmp\n" {
		t.Fatalf("after interrupt: %q", stdout(x))
	}
	// exit ends the shell: it is restarted, with its state lost.
	wantError(t, sh("exit 4"), "ContextRestarting", "exit status 4")
	if x := sh("pwd"); stdout(x) != bc.Cwd+"\n" {
		t.Fatalf("after restart: %q", stdout(x))
	}
}

func TestCodeContextsRunInParallelAndSerialise(t *testing.T) {
	_, c := startCodeAgent(t)
	ctx := testCtx(t)
	a, err := c.CreateContext(ctx, "python", "", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateContext(ctx, "python", "", "")
	if err != nil {
		t.Fatal(err)
	}
	wantNoError(t, run(t, c, agentclient.ExecuteRequest{Code: "only_a = 1", ContextID: a.ID}))
	wantError(t, run(t, c, agentclient.ExecuteRequest{Code: "only_a", ContextID: b.ID}), "NameError", "only_a")

	// Each execution prints when it started and ended; two contexts
	// overlap, two executions of one context do not.
	const timed = "import time\nt0 = time.time()\ntime.sleep(0.5)\nprint(t0, time.time())"
	spans := func(ids ...string) [][2]float64 {
		out := make([][2]float64, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				x := run(t, c, agentclient.ExecuteRequest{Code: timed, ContextID: id})
				if _, err := fmt.Sscan(stdout(x), &out[i][0], &out[i][1]); err != nil {
					t.Errorf("span %q: %v", stdout(x), err)
				}
			})
		}
		wg.Wait()
		return out
	}
	s := spans(a.ID, b.ID)
	if !(s[0][0] < s[1][1] && s[1][0] < s[0][1]) {
		t.Fatalf("contexts did not run in parallel: %v", s)
	}
	s = spans(a.ID, a.ID)
	if s[0][0] < s[1][1] && s[1][0] < s[0][1] {
		t.Fatalf("executions of one context overlapped: %v", s)
	}
}

func TestCodeOutputCapAndStreaming(t *testing.T) {
	_, c := startCodeAgent(t)
	const limit = 64 << 10
	x := run(t, c, agentclient.ExecuteRequest{MaxOutputBytes: limit,
		Code: "import os\nfor i in range(200000):\n    print(i)\nos.system('yes | head -c 200000')\nprint('done')"})
	wantNoError(t, x)
	if n := len(stdout(x)); n != limit {
		t.Fatalf("stdout %d bytes, want the cap %d", n, limit)
	}
	if !strings.Contains(stderr(x), "stdout of this execution exceeded 65536 bytes") {
		t.Fatalf("truncation not reported: %q", stderr(x))
	}
	if x := run(t, c, py("print('next')")); stdout(x) != "next\n" {
		t.Fatalf("after a flood: %q", stdout(x))
	}

	// Output is streamed as produced, with keepalives in between, from
	// subprocesses too; the stream starts with the count and ends with
	// end_of_execution.
	ctx := testCtx(t)
	s, err := c.Execute(ctx, agentclient.ExecuteRequest{KeepaliveInterval: time.Second,
		Code: "import subprocess, time\nprint('first', flush=True)\ntime.sleep(1.5)\nsubprocess.run(['echo', 'child'])\ntime.sleep(1)"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var types []string
	var firstAt, childAt time.Duration
	start := time.Now()
	_, err = s.Collect(func(ev agentclient.CodeEvent) {
		types = append(types, ev.Type)
		if ev.Text != nil && *ev.Text == "first\n" {
			firstAt = time.Since(start)
		}
		if ev.Text != nil && *ev.Text == "child\n" {
			childAt = time.Since(start)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if types[0] != "number_of_executions" || types[len(types)-1] != "end_of_execution" || !strings.Contains(strings.Join(types, ","), "keepalive") {
		t.Fatalf("event types %v", types)
	}
	if firstAt == 0 || childAt == 0 || firstAt > time.Second || childAt < firstAt+time.Second {
		t.Fatalf("output not streamed: first at %v, child at %v", firstAt, childAt)
	}
}

func TestCodeClientDisconnectInterrupts(t *testing.T) {
	a, c := startCodeAgent(t)
	flag := filepath.Join(a.Workdir, "side-effect")
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.Execute(ctx, py(fmt.Sprintf("import time\nx = 'kept'\nprint('assigned', flush=True)\ntime.sleep(3)\nopen(%q, 'w').write('too late')", flag)))
	if err != nil {
		t.Fatal(err)
	}
	// Leave once the assignment has run, so the interrupt lands in the sleep.
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("stream ended before the assignment: %v", err)
		}
		if ev.Type == "stdout" {
			break
		}
	}
	cancel()
	s.Close()

	start := time.Now()
	x := run(t, c, py("x"))
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("next execution waited %v", d)
	}
	if x.Text() != "kept" {
		t.Fatalf("state after the interrupt: %+v", x)
	}
	time.Sleep(3500 * time.Millisecond)
	if _, err := os.Stat(flag); err == nil {
		t.Fatal("the abandoned execution went on after its client left")
	}
}

func TestCodeEnvCwdAndContextRoutes(t *testing.T) {
	a, c := startCodeAgent(t)
	ctx := testCtx(t)
	dir := filepath.Join(a.Workdir, "sub")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pc, err := c.CreateContext(ctx, "python", dir, "")
	if err != nil || pc.Cwd != dir || pc.Language != "python" || len(pc.ID) != 36 {
		t.Fatalf("create %+v %v", pc, err)
	}
	x := run(t, c, agentclient.ExecuteRequest{ContextID: pc.ID, EnvVars: map[string]string{"ONCE": "1"},
		Code: "import os\nprint(os.getcwd(), os.environ.get('ONCE'))"})
	if stdout(x) != dir+" 1\n" {
		t.Fatalf("cwd and env: %q", stdout(x))
	}
	if x := run(t, c, agentclient.ExecuteRequest{ContextID: pc.ID, Code: "import os\nos.environ.get('ONCE', 'unset')"}); x.Text() != "unset" {
		t.Fatalf("env not restored: %q", x.Text())
	}
	// The default environment changing (POST /init) reaches running
	// interpreters.
	if err := c.SetEnv(ctx, map[string]string{"FROM_INIT": "yes"}); err != nil {
		t.Fatal(err)
	}
	if x := run(t, c, agentclient.ExecuteRequest{ContextID: pc.ID, Code: "os.environ.get('FROM_INIT')"}); x.Text() != "yes" {
		t.Fatalf("init env: %q", x.Text())
	}

	list, err := c.ListContexts(ctx)
	if err != nil || len(list) != 2 || list[0].Language != "python" || list[1].ID != pc.ID {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := c.DeleteContext(ctx, pc.ID); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		c.DeleteContext(ctx, pc.ID), c.RestartContext(ctx, pc.ID),
		func() error {
			_, err := c.RunCode(ctx, agentclient.ExecuteRequest{ContextID: pc.ID, Code: "1"})
			return err
		}(),
	} {
		if sandbox.ClassOf(err) != sandbox.ClassNotFound {
			t.Fatalf("deleted context: %v", err)
		}
	}
	for _, req := range []agentclient.ExecuteRequest{
		{Code: "1", Language: "cobol"},
		{Code: "1", Language: "python", ContextID: list[0].ID},
		{Code: "1", EnvVars: map[string]string{"BAD-NAME": "x"}},
	} {
		if _, err := c.RunCode(ctx, req); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Fatalf("%+v: %v", req, err)
		}
	}
	if _, err := c.CreateContext(ctx, "python", "/nonexistent", ""); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("bad cwd: %v", err)
	}
	if os.Geteuid() == 0 {
		uc, err := c.CreateContext(ctx, "python", "", "nobody")
		if err != nil {
			t.Fatal(err)
		}
		x := run(t, c, agentclient.ExecuteRequest{ContextID: uc.ID, Code: "import os\nos.getuid()"})
		if x.Text() != "65534" {
			t.Fatalf("context as nobody runs as %q %+v", x.Text(), x.Error)
		}
	}
}

func TestCodeRestartOrDeleteDuringExecution(t *testing.T) {
	_, c := startCodeAgent(t)
	ctx := testCtx(t)
	pc, err := c.CreateContext(ctx, "python", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"restart", "delete"} {
		s, err := c.Execute(ctx, agentclient.ExecuteRequest{ContextID: pc.ID, Code: "import time\ntime.sleep(30)"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
		if op == "restart" {
			err = c.RestartContext(ctx, pc.ID)
		} else {
			err = c.DeleteContext(ctx, pc.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		x, err := s.Collect(nil)
		s.Close()
		if err != nil || x.Error == nil {
			t.Fatalf("%s: execution ended with %+v %v", op, x, err)
		}
		want := map[string]string{"restart": "ContextRestarting", "delete": "ContextDeleted"}[op]
		if x.Error.Name != want {
			t.Fatalf("%s: error %+v", op, x.Error)
		}
	}
}

func TestCodeMissingInterpreters(t *testing.T) {
	empty := t.TempDir()
	_, c := startAgent(t, agenttest.Options{Env: []string{"PATH=" + empty}, LogLevel: "info"})
	ctx := testCtx(t)
	_, err := c.CreateContext(ctx, "javascript", "", "")
	if sandbox.ClassOf(err) != sandbox.ClassInvalid || !strings.Contains(err.Error(), "node") {
		t.Fatalf("javascript without node: %v", err)
	}
	if _, err := c.RunCode(ctx, py("1")); sandbox.ClassOf(err) != sandbox.ClassInvalid || !strings.Contains(err.Error(), "python3") {
		t.Fatalf("python without python3: %v", err)
	}
	if list, err := c.ListContexts(ctx); err != nil || len(list) != 0 {
		t.Fatalf("contexts without python: %+v %v", list, err)
	}
}

func TestCodeJavaScript(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed")
	}
	_, c := startCodeAgent(t)
	js := func(code string) *agentclient.Execution {
		return run(t, c, agentclient.ExecuteRequest{Code: code, Language: "js"})
	}
	x := js("const xs = [1, 2]; console.log('hi'); xs")
	wantNoError(t, x)
	if stdout(x) != "hi\n" || x.Text() != "[ 1, 2 ]" {
		t.Fatalf("first: %q %q", stdout(x), x.Text())
	}
	if x := js("xs.push(3); xs.length"); x.Text() != "3" {
		t.Fatalf("state: %+v", x)
	}
	if x := js("new Promise(r => setTimeout(() => r('later'), 50))"); x.Text() != "later" {
		t.Fatalf("promise: %+v", x)
	}
	x = js("throw new TypeError('bad')")
	wantError(t, x, "TypeError", "bad")
	x = run(t, c, agentclient.ExecuteRequest{Code: "while (true) {}", Language: "javascript", Timeout: 300 * time.Millisecond})
	wantError(t, x, "TimeoutError", "state was kept")
	if x := js("xs.length"); x.Text() != "3" {
		t.Fatalf("after interrupt: %+v", x)
	}
}

// TestCodeIPython runs the IPython engine with the first python3 on the
// test's PATH that has IPython.
func TestCodeIPython(t *testing.T) {
	pyBin, err := exec.LookPath("python3")
	if err != nil || exec.Command(pyBin, "-c", "import IPython").Run() != nil {
		t.Skip("no python3 with IPython on PATH")
	}
	_, c := startAgent(t, agenttest.Options{Env: []string{"PATH=" + filepath.Dir(pyBin) + ":" + os.Getenv("PATH")}, LogLevel: "info"})
	x := run(t, c, py("%cd /tmp\nimport os\nv = [1, 2]\nprint('hi')\nv"))
	wantNoError(t, x)
	if stdout(x) != "/tmp\nhi\n" || x.Text() != "[1, 2]" || x.ExecutionCount != 1 {
		t.Fatalf("ipython: %q %q %d", stdout(x), x.Text(), x.ExecutionCount)
	}
	x = run(t, c, py("from IPython.display import HTML, display\ndisplay(HTML('<i>x</i>'))\nos.getcwd()"))
	if len(x.Results) != 2 || x.Results[0].HTML != "<i>x</i>" || x.Text() != "/tmp" {
		t.Fatalf("display: %+v", x.Results)
	}
	wantError(t, run(t, c, py("1/0")), "ZeroDivisionError", "division by zero")
	x = run(t, c, agentclient.ExecuteRequest{Code: "while True: pass", Timeout: 300 * time.Millisecond})
	wantError(t, x, "TimeoutError", "kept")
	if x := run(t, c, py("len(v)")); x.Text() != "2" || x.ExecutionCount != 5 {
		t.Fatalf("after interrupt: %q count %d", x.Text(), x.ExecutionCount)
	}
}
