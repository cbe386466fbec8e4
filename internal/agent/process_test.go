package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

func sh(script string) agentclient.StartOptions {
	return agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

func TestRunOutputAndExitCode(t *testing.T) {
	_, c := startAgent(t, agenttest.Options{})
	var out, errb bytes.Buffer
	res, err := c.Run(testCtx(t), sh("echo out; echo err >&2; exit 3"), nil, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "out\n" || errb.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errb.String())
	}
	want := agentclient.ExitResult{ExitCode: 3, Exited: true, Status: "exit status 3", Error: "exit status 3"}
	if res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
	res, err = c.Run(testCtx(t), agentclient.StartOptions{Cmd: "true"}, nil, nil, nil)
	if err != nil || res != (agentclient.ExitResult{Exited: true, Status: "exit status 0"}) {
		t.Errorf("true: %+v, %v", res, err)
	}
}

func TestStartEventsInOrder(t *testing.T) {
	_, c := startAgent(t, agenttest.Options{})
	p, err := c.Start(testCtx(t), sh("for i in 1 2 3; do echo $i; done"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() == 0 {
		t.Fatal("no pid")
	}
	var out strings.Builder
	var ended bool
	for ev, err := range p.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ended {
			t.Fatal("event after end")
		}
		switch ev.Kind {
		case agentclient.EventStdout:
			out.Write(ev.Data)
		case agentclient.EventEnd:
			ended = true
		}
	}
	if !ended || out.String() != "1\n2\n3\n" {
		t.Errorf("ended=%v output %q", ended, out.String())
	}
}

func TestStartErrors(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		_, c := startAgent(t, agenttest.Options{GoShim: goShim})
		ctx := testCtx(t)
		_, err := c.Start(ctx, agentclient.StartOptions{Cmd: "definitely-not-a-command"})
		if sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("missing executable: %v", err)
		}
		_, err = c.Start(ctx, agentclient.StartOptions{Cmd: "true", Cwd: "/does/not/exist"})
		if sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("missing cwd: %v", err)
		}
		_, err = c.Start(ctx, agentclient.StartOptions{Cmd: "true", User: "no-such-user"})
		if sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("unknown user: %v", err)
		}
	})
}

func TestCwdAndEnv(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{Env: []string{"FOO=bar", "AGENTBOX_SECRET=hidden"}})
	ctx := testCtx(t)
	var out bytes.Buffer
	if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "pwd"}, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != a.Workdir {
		t.Errorf("default cwd %q, want %q", got, a.Workdir)
	}
	out.Reset()
	if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "pwd", Cwd: "/tmp"}, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "/tmp" {
		t.Errorf("cwd %q", got)
	}
	out.Reset()
	opts := agentclient.StartOptions{Cmd: "env", Env: map[string]string{"EXTRA": "1", "FOO": "override"}}
	if _, err := c.Run(ctx, opts, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	env := out.String()
	if strings.Contains(env, "AGENTBOX_") {
		t.Errorf("AGENTBOX_ variable leaked into the process environment:\n%s", env)
	}
	for _, want := range []string{"FOO=override\n", "EXTRA=1\n", "HOME=", "PATH="} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	envs, err := c.Envs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if envs["FOO"] != "bar" {
		t.Errorf("Envs FOO=%q", envs["FOO"])
	}
	for k := range envs {
		if strings.HasPrefix(k, "AGENTBOX_") {
			t.Errorf("Envs reports %s", k)
		}
	}
}

func TestStdinSendAndClose(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		_, c := startAgent(t, agenttest.Options{GoShim: goShim})
		ctx := testCtx(t)
		p, err := c.Start(ctx, agentclient.StartOptions{Cmd: "cat", Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SendStdin(ctx, []byte("hello ")); err != nil {
			t.Fatal(err)
		}
		if err := p.SendStdin(ctx, []byte("world")); err != nil {
			t.Fatal(err)
		}
		if err := p.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for ev, err := range p.Events() {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == agentclient.EventStdout {
				out.Write(ev.Data)
			}
			if ev.Kind == agentclient.EventEnd && ev.End.ExitCode != 0 {
				t.Errorf("cat: %+v", ev.End)
			}
		}
		if out.String() != "hello world" {
			t.Errorf("output %q", out.String())
		}

		// Run feeds a reader through the input stream and closes stdin.
		in := strings.Repeat("0123456789abcdef", 10000) // 160 KB: several chunks
		out.Reset()
		res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "cat"}, strings.NewReader(in), &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run cat: %+v %v", res, err)
		}
		if out.String() != in {
			t.Errorf("cat echoed %d bytes, want %d", out.Len(), len(in))
		}

		// Without Stdin the process reads /dev/null, and input is refused.
		res, err = c.Run(ctx, agentclient.StartOptions{Cmd: "cat"}, nil, nil, nil)
		if err != nil || res.ExitCode != 0 {
			t.Errorf("cat without stdin: %+v %v", res, err)
		}
		p, err = c.Start(ctx, sh("sleep 5"))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SendStdin(ctx, []byte("x")); sandbox.ClassOf(err) != sandbox.ClassConflict {
			t.Errorf("input without stdin: %v", err)
		}
		_ = p.Signal(ctx, syscall.SIGKILL)
		_, _ = p.Wait()
	})
}

// startWithChild starts a shell that runs a background sleep and waits;
// it returns the process and the pid of the sleep (the grandchild).
func startWithChild(t *testing.T, c *agentclient.Client, opts agentclient.StartOptions) (*agentclient.Process, int) {
	t.Helper()
	opts.Cmd, opts.Args = "/bin/sh", []string{"-c", "sleep 1000 & echo $!; wait"}
	p, err := c.Start(testCtx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	var line []byte
	for !bytes.Contains(line, []byte("\n")) {
		ev, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		line = append(line, ev.Data...)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(line)))
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	return p, child
}

// waitGone waits (bounded) until pid no longer exists (killed and reaped).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("process %d still exists", pid)
}

func TestSignalKillsWholeGroup(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		_, c := startAgent(t, agenttest.Options{GoShim: goShim})
		p, child := startWithChild(t, c, agentclient.StartOptions{})
		if err := p.Signal(testCtx(t), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if res.Exited || res.ExitCode != -1 || res.Status != "signal: terminated" {
			t.Errorf("result %+v", res)
		}
		waitGone(t, child)
	})
}

func TestTimeoutKillsWholeGroup(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		_, c := startAgent(t, agenttest.Options{GoShim: goShim})
		start := time.Now()
		p, child := startWithChild(t, c, agentclient.StartOptions{Timeout: 300 * time.Millisecond})
		res, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		want := agentclient.ExitResult{ExitCode: -1, Status: "killed", Error: "timeout after 300ms"}
		if res != want {
			t.Errorf("result %+v, want %+v", res, want)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("timeout took %v", d)
		}
		waitGone(t, child)
	})
}

func TestPTYOutputAndResize(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		_, c := startAgent(t, agenttest.Options{GoShim: goShim})
		ctx := testCtx(t)
		p, err := c.Start(ctx, agentclient.StartOptions{
			Cmd: "/bin/sh", Args: []string{"-c", "stty size; read x; stty size; tty"},
			PTY: &agentclient.PTYSize{Cols: 100, Rows: 30},
		})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		readUntil := func(s string) {
			t.Helper()
			for !strings.Contains(out.String(), s) {
				ev, err := p.Next()
				if err != nil {
					t.Fatalf("waiting for %q in %q: %v", s, out.String(), err)
				}
				if ev.Kind == agentclient.EventEnd {
					t.Fatalf("ended before %q appeared in %q", s, out.String())
				}
				if ev.Kind != agentclient.EventPTY {
					t.Fatalf("event kind %v in a PTY", ev.Kind)
				}
				out.Write(ev.Data)
			}
		}
		readUntil("30 100")
		if err := p.Resize(ctx, 120, 40); err != nil {
			t.Fatal(err)
		}
		if err := p.SendStdin(ctx, []byte("go\n")); err != nil {
			t.Fatal(err)
		}
		readUntil("40 120")
		readUntil("/dev/pts/")
		res, err := p.Wait()
		if err != nil || res.ExitCode != 0 {
			t.Errorf("pty process: %+v %v", res, err)
		}
	})
}

func TestConnectFromSecondClientAndList(t *testing.T) {
	a, c1 := startAgent(t, agenttest.Options{})
	c2 := a.Client(t, "")
	ctx := testCtx(t)
	opts := sh("read x; echo got $x")
	opts.Stdin, opts.Tag = true, "job-1"
	p1, err := c1.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Pid != p1.Pid() || list[0].Tag != "job-1" || list[0].Cmd != "/bin/sh" {
		t.Fatalf("list %+v", list)
	}
	p2, err := c2.Connect(ctx, agentclient.Selector{Tag: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	if p2.Pid() != p1.Pid() {
		t.Fatalf("connected to pid %d, started %d", p2.Pid(), p1.Pid())
	}
	if err := p2.SendStdin(ctx, []byte("it\n")); err != nil {
		t.Fatal(err)
	}
	for i, p := range []*agentclient.Process{p1, p2} {
		var out bytes.Buffer
		var res *agentclient.ExitResult
		for ev, err := range p.Events() {
			if err != nil {
				t.Fatal(err)
			}
			out.Write(ev.Data)
			res = ev.End
		}
		if out.String() != "got it\n" || res == nil || res.ExitCode != 0 {
			t.Errorf("client %d saw %q, end %+v", i+1, out.String(), res)
		}
	}
	// The ended process is forgotten.
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, err = c1.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(list) != 0 {
		t.Errorf("ended process still listed: %+v", list)
	}
}

func TestDetachedProcessKeepsRunning(t *testing.T) {
	_, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	p, err := c.Start(ctx, sh("sleep 1000"))
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	p.Close()
	time.Sleep(100 * time.Millisecond)
	p2, err := c.Connect(ctx, agentclient.Selector{Pid: pid})
	if err != nil {
		t.Fatalf("reattach after the starting client left: %v", err)
	}
	if err := c.Kill(ctx, pid); err != nil {
		t.Fatal(err)
	}
	res, err := p2.Wait()
	if err != nil || res.Status != "signal: killed" {
		t.Errorf("after kill: %+v %v", res, err)
	}
}

func TestUnknownProcessNotFound(t *testing.T) {
	_, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	if _, err := c.Connect(ctx, agentclient.Selector{Pid: 999999}); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("connect: %v", err)
	}
	if _, err := c.Connect(ctx, agentclient.Selector{Tag: "nope"}); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("connect by tag: %v", err)
	}
	if err := c.Kill(ctx, 999999); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("kill: %v", err)
	}
}

func TestUserSwitchAsRoot(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		requireRoot(t)
		_, c := startAgent(t, agenttest.Options{GoShim: goShim})
		ctx := testCtx(t)
		var out bytes.Buffer
		res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "sh", Args: []string{"-c", "id -u; id -g; echo $USER $HOME"}, User: "nobody"}, nil, &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		if got := out.String(); got != "65534\n65534\nnobody /nonexistent\n" {
			t.Errorf("as nobody: %q", got)
		}
		out.Reset()
		if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "id", Args: []string{"-u"}, User: "root"}, nil, &out, nil); err != nil || out.String() != "0\n" {
			t.Errorf("as root: %q %v", out.String(), err)
		}
	})
}

func TestNonRootAgentCannotSwitchUser(t *testing.T) {
	requireRoot(t)
	_, c := startAgent(t, agenttest.Options{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}})
	ctx := testCtx(t)
	var out bytes.Buffer
	if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "id", Args: []string{"-u"}}, nil, &out, nil); err != nil || out.String() != "65534\n" {
		t.Fatalf("as self: %q %v", out.String(), err)
	}
	out.Reset()
	if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "id", Args: []string{"-u"}, User: "nobody"}, nil, &out, nil); err != nil || out.String() != "65534\n" {
		t.Errorf("as own name: %q %v", out.String(), err)
	}
	_, err := c.Run(ctx, agentclient.StartOptions{Cmd: "id", User: "root"}, nil, nil, nil)
	if sandbox.ClassOf(err) != sandbox.ClassForbidden {
		t.Errorf("as root from a non-root agent: %v", err)
	}
	// It says why: this agent runs in the host's user namespace, as a
	// sandbox of a backend without user namespaces would, where root
	// would be the host's.
	if err == nil || !strings.Contains(err.Error(), `cannot act as user "root": this sandbox has no user namespace of its own, so its root would be the host's root`) {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if _, err := c.Stat(ctx, "/tmp", "root"); sandbox.ClassOf(err) != sandbox.ClassForbidden {
		t.Errorf("stat as root from a non-root agent: %v", err)
	}
}

// zombieChildren lists the zombie children of pid.
func zombieChildren(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var zombies []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces and parens.
		rest := string(b[bytes.LastIndexByte(b, ')')+2:])
		f := strings.Fields(rest)
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			zombies = append(zombies, child)
		}
	}
	return zombies
}

func TestZombiesAreReaped(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	for i := 0; i < 30; i++ {
		// The background sleep is orphaned and re-parented to the agent.
		if res, err := c.Run(ctx, sh("sleep 0 & exit 0"), nil, nil, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("run %d: %+v %v", i, res, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		z := zombieChildren(t, a.Pid())
		if len(z) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("zombie children of the agent remain: %v", z)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAgentStopsChildrenOnSIGTERM(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	p, child := startWithChild(t, c, agentclient.StartOptions{})
	_ = p
	a.Stop(t)
	waitGone(t, child)
}

func TestAsPID1InPIDNamespace(t *testing.T) {
	requireRoot(t)
	a, c := startAgent(t, agenttest.Options{PIDNamespace: true})
	ctx := testCtx(t)
	var out bytes.Buffer
	if _, err := c.Run(ctx, sh("cat /proc/1/comm; echo $$"), nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Fields(out.String()); len(lines) != 2 || lines[0] != "agentbox-agent" {
		t.Fatalf("inside the namespace: %q", out.String())
	}
	for i := 0; i < 20; i++ {
		if _, err := c.Run(ctx, sh("sleep 0 & exit 0"), nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(zombieChildren(t, a.Pid())) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("PID 1 left zombies: %v", zombieChildren(t, a.Pid()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// PID 1 ignores SIGTERM (a sandbox process could send it, see
	// TestSecurityAgentSurvivesSignalsFromSandbox); SIGKILL ends it and
	// with it the namespace and every process in it.
	if _, err := c.Start(ctx, sh("sleep 1000")); err != nil {
		t.Fatal(err)
	}
	children := childPids(t, a.Pid())
	if len(children) == 0 {
		t.Fatal("the started process is not a child of the agent")
	}
	if err := syscall.Kill(a.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, sh("true"), nil, nil, nil); err != nil {
		t.Fatalf("agent stopped serving after SIGTERM: %v\n%s", err, a.Stderr.String())
	}
	a.Stop(t)
	waitGone(t, a.Pid())
	for _, pid := range children {
		waitGone(t, pid)
	}
}

// childPids returns the (host) pids of pid's children.
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// TestChildStreamsNotLeaked runs processes with and without a stdin pipe
// and checks that the agent keeps none of the children's ends of their
// streams: its descriptor count comes back to where it was, and a child
// without a stdin pipe reads end-of-file at once.
func TestChildStreamsNotLeaked(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", a.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	run := func(stdin bool) {
		t.Helper()
		var in *strings.Reader
		if stdin {
			in = strings.NewReader("piped\n")
		}
		var out bytes.Buffer
		var res agentclient.ExitResult
		var err error
		if stdin {
			res, err = c.Run(testCtx(t), sh("cat"), in, &out, nil)
		} else {
			res, err = c.Run(testCtx(t), sh("cat; echo eof"), nil, &out, nil)
		}
		want := map[bool]string{true: "piped\n", false: "eof\n"}[stdin]
		if err != nil || res.ExitCode != 0 || out.String() != want {
			t.Fatalf("stdin pipe %v: %+v %v, output %q, want %q", stdin, res, err, out.String(), want)
		}
	}
	run(false) // warm: the shared /dev/null, a shim, the connection
	run(true)
	before := fds()
	for i := range 20 {
		run(i%2 == 0)
	}
	// Shims come and go and connections may idle: allow them, not one
	// descriptor per process.
	if after := fds(); after > before+4 {
		t.Errorf("agent descriptors grew from %d to %d over 20 processes", before, after)
	}
}

// TestLargeRequestReachesShim starts a process whose environment (1 MiB)
// is larger than a unix socket takes in one write: the request reaches
// the exec shim in pieces, the descriptors with the first.
func TestLargeRequestReachesShim(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		_, c := startAgent(t, agenttest.Options{GoShim: goShim})
		env := map[string]string{}
		for i := range 10 {
			env[fmt.Sprintf("BIG%d", i)] = strings.Repeat(strconv.Itoa(i), 100<<10)
		}
		var out bytes.Buffer
		opts := sh(`echo ${#BIG0} ${#BIG9} $(printf %s "$BIG9" | cut -c1-3); cat`)
		opts.Env = env
		res, err := c.Run(testCtx(t), opts, strings.NewReader("stdin ok\n"), &out, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		if want := "102400 102400 999\nstdin ok\n"; out.String() != want {
			t.Errorf("output %q, want %q", out.String(), want)
		}
	})
}
