package dataplane

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// ExecRecord is one command run in a sandbox, as its exec history keeps it.
type ExecRecord struct {
	Time       time.Time `json:"time"`
	Cmd        string    `json:"cmd"`
	Truncated  bool      `json:"truncated,omitempty"`
	User       string    `json:"user"`
	ExitCode   int       `json:"exit_code"`
	Status     string    `json:"status,omitempty"`
	TimedOut   bool      `json:"timed_out,omitempty"`
	OOMKilled  bool      `json:"oom_killed,omitempty"`
	Error      string    `json:"error,omitempty"`
	DurationMS float64   `json:"duration_ms"`
}

// The history is bounded on every side: it lives in the replica's memory
// and sandboxes come and go without telling the data plane.
const (
	execHistoryPerSandbox = 100
	execHistorySandboxes  = 4096
	execHistoryCmdMax     = 512
)

// execHistory keeps the last commands of each sandbox, oldest first. Past
// execHistorySandboxes sandboxes, the one whose last command is the oldest
// is forgotten (a gone sandbox's history ages out that way).
type execHistory struct {
	mu   sync.Mutex
	runs map[sandbox.ID][]ExecRecord
}

func (h *execHistory) add(id sandbox.ID, rec ExecRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == nil {
		h.runs = map[sandbox.ID][]ExecRecord{}
	}
	list, ok := h.runs[id]
	if !ok && len(h.runs) >= execHistorySandboxes {
		var oldest sandbox.ID
		var at time.Time
		first := true
		for k, v := range h.runs {
			if last := v[len(v)-1].Time; first || last.Before(at) {
				oldest, at, first = k, last, false
			}
		}
		delete(h.runs, oldest)
	}
	if len(list) >= execHistoryPerSandbox {
		list = append(list[:0:0], list[len(list)-execHistoryPerSandbox+1:]...)
	}
	h.runs[id] = append(list, rec)
}

func (h *execHistory) get(id sandbox.ID) []ExecRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ExecRecord(nil), h.runs[id]...)
}

// cmdLine is the command as the history shows it: the arguments joined
// by spaces, cut at execHistoryCmdMax bytes (on a rune boundary).
func cmdLine(cmd []string) (string, bool) {
	s := strings.Join(cmd, " ")
	if len(s) <= execHistoryCmdMax {
		return s, false
	}
	cut := execHistoryCmdMax
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut], true
}

// recordExec adds a finished (or failed) command to the sandbox's history.
func (r *Request) recordExec(start time.Time, cmd []string, res *ExecResult, err error) {
	line, cut := cmdLine(cmd)
	rec := ExecRecord{Time: start.UTC(), Cmd: line, Truncated: cut, User: r.owner, ExitCode: -1,
		DurationMS: float64(time.Since(start).Microseconds()) / 1000}
	if res != nil {
		rec.ExitCode, rec.Status, rec.TimedOut, rec.OOMKilled = res.ExitCode, res.Status, res.TimedOut, res.OOMKilled
		rec.DurationMS = float64(res.Duration.Microseconds()) / 1000
	}
	switch {
	case err != nil:
		rec.Error = err.Error()
	case res == nil:
		rec.Error = "ended before the command finished: the caller went away"
	}
	r.s.execs.add(r.id, rec)
}

// ExecHistory returns the last commands run in owner's sandbox id through
// this replica, oldest first (ClassNotFound for anyone else's sandbox):
// those of Exec and those started through E2B's envd protocol
// (EnvdTarget), not processes of Start or Run (terminals, servers, the
// daemon's own work) nor code runs.
func (s *Service) ExecHistory(ctx context.Context, owner string, id sandbox.ID) ([]ExecRecord, error) {
	if _, err := s.sandboxes.Get(ctx, owner, id); err != nil {
		return nil, err
	}
	return s.execs.get(id), nil
}
