package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

func TestExecBuffered(t *testing.T) {
	_, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	cases := []struct {
		req            client.ExecRequest
		code           int
		stdout, stderr string
		check          func(*client.ExecResult) bool
	}{
		{req: client.ExecRequest{Cmd: []string{"echo", "hi", "there"}}, stdout: "hi there\n"},
		{req: client.ExecRequest{Cmd: []string{"exit", "3"}}, code: 3},
		{req: client.ExecRequest{Cmd: []string{"fail"}}, code: 1, stderr: "boom\n"},
		{req: client.ExecRequest{Cmd: []string{"cat"}, Stdin: "fed in"}, stdout: "fed in"},
		{req: client.ExecRequest{Cmd: []string{"pwd"}, Cwd: "/tmp"}, stdout: "/tmp\n"},
		{req: client.ExecRequest{Cmd: []string{"env"}, Env: map[string]string{"K": "V"}}, stdout: "K=V\n"},
		{req: client.ExecRequest{Cmd: []string{"timeout"}, Timeout: 2 * time.Second}, code: -1,
			check: func(r *client.ExecResult) bool { return r.TimedOut && r.Status == "signal: killed" }},
		{req: client.ExecRequest{Cmd: []string{"oom"}}, code: -1,
			check: func(r *client.ExecResult) bool { return r.OOMKilled }},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.req.Cmd, " "), func(t *testing.T) {
			res, err := c.Exec(ctx, sb.ID, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.code || res.Stdout != tc.stdout || res.Stderr != tc.stderr {
				t.Errorf("result = %+v", res)
			}
			if tc.check != nil && !tc.check(res) {
				t.Errorf("result = %+v", res)
			}
		})
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{}); !client.IsInvalidArgument(err) {
		t.Errorf("exec without cmd: %v", err)
	}
	if _, err := c.Exec(ctx, "missing", client.ExecRequest{Cmd: []string{"true"}}); !client.IsNotFound(err) {
		t.Errorf("exec in missing sandbox: %v", err)
	}
}

func TestExecStreamEvents(t *testing.T) {
	fs, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	s, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"both"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var types []string
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type+":"+ev.Data)
		if ev.Type == client.EventStart && ev.PID == 0 {
			t.Error("start event without pid")
		}
	}
	if want := []string{"start:", "stdout:out\n", "stderr:err\n", "exit:"}; !slices.Equal(types, want) {
		t.Errorf("events = %q, want %q", types, want)
	}
	if x, ok := s.Exit(); !ok || x.ExitCode != 0 || x.Status != "exit status 0" {
		t.Errorf("exit = %+v, %v", x, ok)
	}
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("Next after exit: %v", err)
	}
	if h := fs.Headers(); h[len(h)-1].Get("Accept") != "application/x-ndjson" {
		t.Errorf("Accept = %q", h[len(h)-1].Get("Accept"))
	}

	fs.SetState(sb.ID, "stopped")
	if _, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo"}}); !client.IsConflict(err) {
		t.Errorf("exec in stopped sandbox: %v", err)
	}
}

// ndjsonServer answers exec with the given pieces, flushing and pausing
// between them so they arrive in separate reads.
func ndjsonServer(t *testing.T, pieces ...string) *client.Client {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, p := range pieces {
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestExecStreamLineSplitAcrossReads(t *testing.T) {
	c := ndjsonServer(t,
		`{"type":"start","pid":7}`+"\n"+`{"type":"std`,
		`out","data":"hel`,
		`lo\n"}`+"\n\n",
		`{"type":"stderr","data":"x"}`+"\n"+`{"type":"exit","exit_code":2,"status":"exit status 2","pids_limit_hit":true,"duration_ms":12.5}`,
	)
	var stdout, stderr strings.Builder
	x, err := c.Run(t.Context(), "sb", client.ExecRequest{Cmd: []string{"x"}}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "hello\n" || stderr.String() != "x" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if x.ExitCode != 2 || !x.PidsLimitHit || x.Duration() != 12500*time.Microsecond {
		t.Errorf("exit = %+v", x)
	}
}

func TestExecStreamWithoutExitIsAnError(t *testing.T) {
	c := ndjsonServer(t, `{"type":"stdout","data":"partial"}`+"\n")
	_, err := c.Run(t.Context(), "sb", client.ExecRequest{Cmd: []string{"x"}}, nil, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want unexpected EOF", err)
	}
	c = ndjsonServer(t, "not json\n")
	if _, err := c.Run(t.Context(), "sb", client.ExecRequest{Cmd: []string{"x"}}, nil, nil); err == nil || !strings.Contains(err.Error(), "bad event") {
		t.Fatalf("got %v, want a bad event error", err)
	}
}

func TestRunStreamsToWriters(t *testing.T) {
	_, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	var out strings.Builder
	x, err := c.Run(ctx, sb.ID, client.ExecRequest{Cmd: []string{"chunks", "a", "b", "c"}}, &out, nil)
	if err != nil || x.ExitCode != 0 || out.String() != "abc" {
		t.Fatalf("run = %+v, %q, %v", x, out.String(), err)
	}
	x, err = c.Run(ctx, sb.ID, client.ExecRequest{Cmd: []string{"exit", "42"}}, nil, nil)
	if err != nil || x.ExitCode != 42 {
		t.Fatalf("run exit 42 = %+v, %v", x, err)
	}
	_, err = c.Run(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "x"}}, failWriter{}, nil)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("write failure: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

func TestCancelAbortsExecStream(t *testing.T) {
	fs, c, ctx := setup(t)
	sb := mustCreate(t, ctx, c)
	runCtx, cancel := context.WithCancel(ctx)
	s, err := c.ExecStream(runCtx, sb.ID, client.ExecRequest{Cmd: []string{"sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(); err != nil || ev.Type != client.EventStart {
		t.Fatalf("first event = %+v, %v", ev, err)
	}
	start := time.Now()
	cancel()
	_, err = s.Next()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("cancel took %s", time.Since(start))
	}
	eventually(t, "the server to kill the command", func() bool { return slices.Contains(fs.Killed(), sb.ID) })

	// Close before the exit event has the same effect.
	s2, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Next(); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	eventually(t, "the second kill", func() bool { return len(fs.Killed()) == 2 })
}
