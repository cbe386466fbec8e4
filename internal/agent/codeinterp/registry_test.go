package codeinterp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// execHost runs interpreters with os/exec, so the registry's logic can be
// tested (with -race) in the test process; the agent's reaper-safe host is
// covered by the agent's integration tests.
type execHost struct{ dir string }

func (h execHost) Resolve(user, cwd string) (string, string, error) {
	if cwd == "" {
		cwd = h.dir
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return "", "", errorf(KindInvalid, "bad cwd %q", cwd)
	}
	return user, cwd, nil
}

func (h execHost) Env(string) (map[string]string, error) {
	return map[string]string{"PATH": "/usr/bin:/bin", "HOME": h.dir}, nil
}

func (h execHost) LookPath(name string, env map[string]string) (string, error) {
	for _, d := range filepath.SplitList(env["PATH"]) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("not found")
}

type execProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *execProc) Pid() int              { return p.cmd.Process.Pid }
func (p *execProc) Done() <-chan struct{} { return p.done }
func (p *execProc) Status() string        { <-p.done; return p.cmd.ProcessState.String() }
func (p *execProc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
		return syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

func (h execHost) Spawn(spec SpawnSpec) (Proc, *Pipes, error) {
	cmd := &exec.Cmd{Path: spec.Path, Args: spec.Argv, Env: spec.Env, Dir: spec.Dir,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	parent := &Pipes{}
	var child []*os.File
	pipe := func(childReads bool) (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			panic(err)
		}
		if childReads {
			child = append(child, r)
			return w, r
		}
		child = append(child, w)
		return r, w
	}
	var c0, c3 *os.File
	if spec.StdinPipe {
		parent.Stdin, c0 = pipe(true)
		cmd.Stdin = c0
	}
	var c1, c2, c4 *os.File
	parent.Stdout, c1 = pipe(false)
	parent.Stderr, c2 = pipe(false)
	cmd.Stdout, cmd.Stderr = c1, c2
	devNull, _ := os.Open(os.DevNull)
	child = append(child, devNull)
	c3 = devNull
	if spec.Control {
		parent.Control, c3 = pipe(true)
	}
	parent.Events, c4 = pipe(false)
	cmd.ExtraFiles = []*os.File{c3, c4}
	err := cmd.Start()
	for _, f := range child {
		if f != c1 && f != c2 {
			f.Close()
		}
	}
	parent.StdoutMark, parent.StderrMark = c1, c2
	if err != nil {
		parent.Close()
		return nil, nil, err
	}
	p := &execProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, parent, nil
}

func newTestRegistry(t *testing.T) *Registry {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	r := NewRegistry(Config{Host: execHost{dir: t.TempDir()}, Grace: 500 * time.Millisecond})
	t.Cleanup(r.Close)
	return r
}

// exec runs code and returns the events' types and the texts by type.
func execCode(t *testing.T, c *Context, code string, timeout time.Duration) (types []string, text map[string]string) {
	t.Helper()
	text = map[string]string{}
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Execute(ctx, ExecRequest{Code: code, Timeout: timeout}, func(ev Event) error {
		mu.Lock()
		defer mu.Unlock()
		types = append(types, ev.Type)
		switch {
		case ev.Type == TypeError:
			text["error"] = *ev.Name + ": " + *ev.Value
		case ev.Text != nil:
			text[ev.Type] += *ev.Text
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if types[len(types)-1] != TypeEndOfExecution {
		t.Fatalf("stream of %q ends with %v", code, types)
	}
	return types, text
}

func TestRegistryRecovery(t *testing.T) {
	r := newTestRegistry(t)
	c, err := r.Default("")
	if err != nil {
		t.Fatal(err)
	}
	if _, tx := execCode(t, c, "x = 1\nprint('a')\nx", 0); tx["stdout"] != "a\n" || tx["result"] != "1" {
		t.Fatalf("first: %v", tx)
	}
	if _, tx := execCode(t, c, "while True: pass", 200*time.Millisecond); !strings.Contains(tx["error"], "state was kept") {
		t.Fatalf("interrupt: %v", tx)
	}
	if _, tx := execCode(t, c, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", 200*time.Millisecond); !strings.Contains(tx["error"], "state was lost") {
		t.Fatalf("forced restart: %v", tx)
	}
	if _, tx := execCode(t, c, "import os\nos._exit(2)", 0); !strings.Contains(tx["error"], "ContextRestarting") {
		t.Fatalf("crash: %v", tx)
	}
	if _, tx := execCode(t, c, "'alive'", 0); tx["result"] != "alive" {
		t.Fatalf("after crash: %v", tx)
	}
	// Dying while idle is noted on the next execution.
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	k.kill("test")
	<-k.proc.Done()
	if _, tx := execCode(t, c, "1", 0); !strings.Contains(tx["stderr"], "had exited since the last execution") || tx["result"] != "1" {
		t.Fatalf("idle death: %v", tx)
	}
}

func TestRegistryConcurrentContexts(t *testing.T) {
	r := newTestRegistry(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			info, err := r.Create(ctx, CreateRequest{Language: "python"})
			if err != nil {
				t.Error(err)
				return
			}
			c, _ := r.Get(info.ID)
			for j := range 5 {
				_, tx := execCode(t, c, "print(1)\n2", 0)
				if tx["stdout"] != "1\n" || tx["result"] != "2" {
					t.Errorf("context %d cell %d: %v", i, j, tx)
				}
			}
			if i%2 == 0 {
				if err := r.Restart(ctx, info.ID); err != nil {
					t.Error(err)
				}
			} else if err := r.Delete(info.ID); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(r.List()); n != 3 { // the default and two restarted ones
		t.Fatalf("%d contexts left", n)
	}
}

// TestRegistryOutputBeforeResult: what a cell printed before a result
// reaches the client before that result, although the two travel on
// different pipes read by different goroutines. Repeated, because losing
// the order is a race.
func TestRegistryOutputBeforeResult(t *testing.T) {
	r := newTestRegistry(t)
	c, err := r.Default("")
	if err != nil {
		t.Fatal(err)
	}
	code := "print('a')\nimport sys\nsys.stdout.write('partial')\n" +
		"try:\n    from IPython.display import display\n    display(1)\nexcept ImportError:\n    print(1)\nprint('b')\n2"
	for i := range 30 {
		// Output chunks may be split anywhere: consecutive ones are joined.
		var order []string
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.Execute(ctx, ExecRequest{Code: code}, func(ev Event) error {
			switch {
			case ev.Type == TypeStdout && len(order) > 0 && strings.HasPrefix(order[len(order)-1], "out:"):
				order[len(order)-1] += *ev.Text
			case ev.Type == TypeStdout:
				order = append(order, "out:"+*ev.Text)
			case ev.Type == TypeResult:
				order = append(order, "result:"+*ev.Text)
			}
			return nil
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("%q", order)
		// With IPython, display(1) is a result between the two prints;
		// without it the cell prints 1.
		withIPython := fmt.Sprintf("%q", []string{"out:a\npartial", "result:1", "out:b\n", "result:2"})
		without := fmt.Sprintf("%q", []string{"out:a\npartial1\nb\n", "result:2"})
		if got != withIPython && got != without {
			t.Fatalf("run %d: events in order %s, want %s or %s", i, got, withIPython, without)
		}
	}
}
