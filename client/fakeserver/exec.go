package fakeserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// execRequest is the spec's ExecRequest.
type execRequest struct {
	Cmd     []string          `json:"cmd"`
	Env     map[string]string `json:"env"`
	Cwd     string            `json:"cwd"`
	Timeout float64           `json:"timeout"`
	Stdin   string            `json:"stdin"`
	User    string            `json:"user"`
}

// execEvent is the spec's ExecEvent.
type execEvent struct {
	Type         string  `json:"type"`
	PID          int     `json:"pid,omitempty"`
	Data         string  `json:"data,omitempty"`
	ExitCode     *int    `json:"exit_code,omitempty"`
	Status       string  `json:"status,omitempty"`
	TimedOut     bool    `json:"timed_out,omitempty"`
	OOMKilled    bool    `json:"oom_killed,omitempty"`
	PidsLimitHit bool    `json:"pids_limit_hit,omitempty"`
	DurationMS   float64 `json:"duration_ms,omitempty"`
}

// maxSleep bounds the "sleep" program, so no test can hang on it.
const maxSleep = 10 * time.Second

// run plays one of the fake's scripted programs, emitting output through
// emit, and returns the exit event. The programs (cmd[0]) are:
//
//	echo ARGS...   prints ARGS and a newline
//	cat            prints stdin
//	chunks A B...  prints each argument as a separate output event
//	both           prints "out\n" on stdout and "err\n" on stderr
//	env | pwd | whoami   print the request's env, cwd, user
//	exit N         exits with status N
//	fail           prints "boom\n" on stderr and exits 1
//	sleep [SECS]   sleeps (at most 10 s); killed when the client goes away
//	timeout | oom | forkbomb   end as killed by the timeout, the OOM killer, or with the pids limit hit
//
// Anything else "is not found" (exit 127).
func (s *Server) run(ctx context.Context, id string, req execRequest, emit func(typ, data string)) execEvent {
	start := time.Now()
	code := 0
	ev := execEvent{Type: "exit"}
	args := req.Cmd[1:]
	switch req.Cmd[0] {
	case "echo":
		emit("stdout", strings.Join(args, " ")+"\n")
	case "cat":
		emit("stdout", req.Stdin)
	case "chunks":
		for _, a := range args {
			emit("stdout", a)
		}
	case "both":
		emit("stdout", "out\n")
		emit("stderr", "err\n")
	case "env":
		keys := make([]string, 0, len(req.Env))
		for k := range req.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			emit("stdout", k+"="+req.Env[k]+"\n")
		}
	case "pwd":
		emit("stdout", cmp(req.Cwd, "/home/user")+"\n")
	case "whoami":
		emit("stdout", cmp(req.User, "user")+"\n")
	case "exit":
		if len(args) > 0 {
			code, _ = strconv.Atoi(args[0])
		}
	case "fail":
		emit("stderr", "boom\n")
		code = 1
	case "sleep":
		d := maxSleep
		if len(args) > 0 {
			if f, err := strconv.ParseFloat(args[0], 64); err == nil {
				d = min(time.Duration(f*float64(time.Second)), maxSleep)
			}
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			s.mu.Lock()
			s.killed = append(s.killed, id)
			s.mu.Unlock()
			code, ev.Status = -1, "signal: killed"
		}
	case "timeout":
		code, ev.Status, ev.TimedOut = -1, "signal: killed", true
	case "oom":
		code, ev.Status, ev.OOMKilled = -1, "signal: killed", true
	case "forkbomb":
		emit("stderr", "fork: Resource temporarily unavailable\n")
		code, ev.PidsLimitHit = 1, true
	default:
		emit("stderr", fmt.Sprintf("fake: %s: command not found\n", req.Cmd[0]))
		code = 127
	}
	if ev.Status == "" {
		ev.Status = fmt.Sprintf("exit status %d", code)
	}
	ev.ExitCode = &code
	ev.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	return ev
}

func cmp(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, id string) {
	var req execRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		writeError(w, invalid("cmd", "cmd must name a program"))
		return
	}
	if req.Timeout < 0 {
		writeError(w, invalid("timeout", "timeout must not be negative"))
		return
	}
	if s.snapshot(id).State != "running" {
		writeError(w, errf(409, "conflict", "sandbox %s is not running", id))
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		s.execStream(w, r, id, req)
		return
	}
	var stdout, stderr strings.Builder
	ev := s.run(r.Context(), id, req, func(typ, data string) {
		if typ == "stdout" {
			stdout.WriteString(data)
		} else {
			stderr.WriteString(data)
		}
	})
	writeJSON(w, http.StatusOK, map[string]any{
		"exit_code": *ev.ExitCode, "stdout": stdout.String(), "stderr": stderr.String(),
		"status": ev.Status, "timed_out": ev.TimedOut, "oom_killed": ev.OOMKilled,
		"pids_limit_hit": ev.PidsLimitHit, "truncated": false, "duration_ms": ev.DurationMS,
	})
}

// execStream answers with NDJSON, flushing every event as it happens.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, id string, req execRequest) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(ev execEvent) {
		_ = enc.Encode(ev) // Encode ends each event with "\n"
		if flusher != nil {
			flusher.Flush()
		}
	}
	send(execEvent{Type: "start", PID: 4242})
	exit := s.run(r.Context(), id, req, func(typ, data string) { send(execEvent{Type: typ, Data: data}) })
	send(exit)
}
