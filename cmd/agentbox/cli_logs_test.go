package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// logsServer serves GET /v1/sandboxes/sb1/logs from entries, which the
// test appends to, and 404 once gone is set.
type logsServer struct {
	mu      sync.Mutex
	entries []map[string]any
	gone    bool
	polls   int
	limits  []string
}

func (s *logsServer) add(at time.Time, level, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, map[string]any{"timestamp": at, "level": level, "message": msg})
}

func (s *logsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	s.limits = append(s.limits, r.URL.Query().Get("limit"))
	w.Header().Set("Content-Type", "application/json")
	if s.gone || r.URL.Path != "/v1/sandboxes/sb1/logs" {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"code":"not_found","message":"sandbox sb1 not found"}`)
		return
	}
	// The last 4 only, as a ring that dropped older entries would answer.
	logs := s.entries[max(0, len(s.entries)-4):]
	json.NewEncoder(w).Encode(map[string]any{"logs": logs})
}

func (s *logsServer) pollCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// wait blocks until the server has answered n polls.
func (s *logsServer) wait(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s.pollCount() >= n {
			return
		}
	}
	t.Fatalf("fewer than %d polls", n)
}

func TestLogsFollow(t *testing.T) {
	old := logsPollInterval
	logsPollInterval = 10 * time.Millisecond
	t.Cleanup(func() { logsPollInterval = old })

	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprint("json=", asJSON), func(t *testing.T) {
			s := &logsServer{}
			t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			s.add(t0, "info", "sandbox created")
			s.add(t0.Add(time.Millisecond), "info", "agent ready")
			s.add(t0.Add(2*time.Millisecond), "warn", "service slow")
			ts := httptest.NewServer(s)
			defer ts.Close()

			done := make(chan cliResult)
			args := []string{"--url", ts.URL, "logs", "-f", "-n", "2", "sb1"}
			if asJSON {
				args = append([]string{"--json"}, args...)
			}
			go func() { done <- runAll(t, args...) }()
			s.wait(t, 2)
			// Two equal entries (same time and text) are two lines; the
			// window of 4 then drops "sandbox created" and "agent ready",
			// which must not come back.
			t1 := t0.Add(time.Second)
			s.add(t1, "info", "tick")
			s.add(t1, "info", "tick")
			s.wait(t, s.pollCount()+2)
			s.add(t1.Add(time.Second), "info", "service exited")
			s.wait(t, s.pollCount()+2)
			s.mu.Lock()
			s.gone = true
			s.mu.Unlock()
			var r cliResult
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("logs -f did not end when the sandbox was gone")
			}
			if r.code != 0 || r.msg != "" || r.stderr != "" {
				t.Fatalf("exit %d msg %q stderr %q", r.code, r.msg, r.stderr)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				if asJSON {
					var e client.LogEntry
					if err := json.Unmarshal([]byte(line), &e); err != nil {
						t.Fatalf("not a JSON entry per line: %q", line)
					}
					got = append(got, e.Message)
				} else {
					f := strings.SplitN(line, "  ", 3)
					got = append(got, strings.TrimSpace(f[len(f)-1]))
				}
			}
			want := []string{"agent ready", "service slow", "tick", "tick", "service exited"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("printed %q\nwant    %q\n%s", got, want, r.stdout)
			}
			for _, l := range s.limits {
				if l != "" {
					t.Errorf("a poll asked for limit=%s: -n applies to what is printed first, the polls need the server's whole window", l)
				}
			}
		})
	}

	// A sandbox that does not exist is an error at once.
	s := &logsServer{gone: true}
	ts := httptest.NewServer(s)
	defer ts.Close()
	if r := runAll(t, "--url", ts.URL, "logs", "-f", "sb1"); r.code != 1 || !strings.Contains(r.msg, "not found") {
		t.Errorf("missing sandbox: exit %d msg %q", r.code, r.msg)
	}
}
