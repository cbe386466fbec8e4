package httpapi

import (
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
)

// Requests carry stdin inline; this bounds the whole body.
const maxExecBody = 80 << 20

type execBody struct {
	Cmd     []string          `json:"cmd"`
	Env     map[string]string `json:"env"`
	Cwd     string            `json:"cwd"`
	Timeout float64           `json:"timeout"`
	Stdin   inlineBytes       `json:"stdin"`
	User    string            `json:"user"`
}

// execResultOut is the answer of a buffered exec, as writeExecResult
// streams it.
type execResultOut struct {
	ExitCode     int     `json:"exit_code"`
	Stdout       string  `json:"stdout"`
	Stderr       string  `json:"stderr"`
	Status       string  `json:"status"`
	TimedOut     bool    `json:"timed_out"`
	OOMKilled    bool    `json:"oom_killed"`
	PidsLimitHit bool    `json:"pids_limit_hit"`
	Truncated    bool    `json:"truncated"`
	DurationMS   float64 `json:"duration_ms"`
}

type execEventOut struct {
	Type         string   `json:"type"`
	Pid          uint32   `json:"pid,omitempty"`
	Data         *string  `json:"data,omitempty"`
	ExitCode     *int     `json:"exit_code,omitempty"`
	Status       string   `json:"status,omitempty"`
	TimedOut     bool     `json:"timed_out,omitempty"`
	OOMKilled    bool     `json:"oom_killed,omitempty"`
	PidsLimitHit bool     `json:"pids_limit_hit,omitempty"`
	DurationMS   *float64 `json:"duration_ms,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	dr, err := s.beginWithBody(r, maxExecBody, 1)
	if err != nil {
		return err
	}
	defer dr.End()
	var body execBody
	if err := decodeLargeJSON(w, r, maxExecBody, &body); err != nil {
		return err
	}
	if len(body.Cmd) == 0 {
		return badRequest("cmd", "cmd is required: the program and its arguments")
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	req := dataplane.ExecRequest{Cmd: body.Cmd, Env: body.Env, Cwd: body.Cwd, Timeout: timeout, User: body.User}
	if body.Stdin != nil {
		// Shares the body's array: the one copy of stdin in the daemon.
		req.Stdin = body.Stdin
	}
	if wantsNDJSON(r) {
		return execStream(w, r, dr, req)
	}
	res, err := dr.ExecBuffered(r.Context(), req)
	if err != nil {
		return err
	}
	return writeExecResult(w, res)
}

// wantsNDJSON reports whether the client asked for the streamed form.
func wantsNDJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && (mt == "application/x-ndjson" || mt == "application/jsonl") {
			return true
		}
	}
	return false
}

// execStream writes one JSON event per line, flushing each, so callers see
// output as it is produced. The 200 status goes out with the start event;
// failures before it are normal JSON errors.
func execStream(w http.ResponseWriter, r *http.Request, dr *dataplane.Request, req dataplane.ExecRequest) error {
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	started := false
	_, err := dr.Exec(r.Context(), req, func(ev dataplane.ExecEvent) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		out := execEventOut{Type: ev.Type, Pid: ev.Pid}
		if ev.Data != nil {
			d := strings.ToValidUTF8(string(ev.Data), "\uFFFD")
			out.Data = &d
		}
		if res := ev.Result; res != nil {
			code, dur := res.ExitCode, ms(res.Duration)
			out.ExitCode, out.Status, out.DurationMS = &code, res.Status, &dur
			out.TimedOut, out.OOMKilled, out.PidsLimitHit = res.TimedOut, res.OOMKilled, res.PidsLimitHit
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
		return rc.Flush()
	})
	return err
}

// execHistory answers the sandbox's last commands, newest first.
func (s *Server) execHistory(w http.ResponseWriter, r *http.Request) error {
	recs, err := s.dp.ExecHistory(r.Context(), userOf(r), sandboxID(r))
	if err != nil {
		return err
	}
	slices.Reverse(recs)
	if recs == nil {
		recs = []dataplane.ExecRecord{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"execs": recs})
	return nil
}
