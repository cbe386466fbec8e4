package httpapi

import (
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/computer"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Screen recording of desktop sandboxes (docs/desktop.md):
//
//	POST /v1/sandboxes/{id}/desktop/record  {"action":"start"|"stop", ...}
//	GET  /v1/sandboxes/{id}/desktop/record  the recording's state
//
// ffmpeg records inside the sandbox (the template's agentbox-record, run
// as a sandbox process with a fixed argument list): the file is the
// sandbox's, in /workspace/recordings, within its disk and CPU limits, and
// ffmpeg stops by itself at the time and size bounds.

// Recording bounds.
const (
	recordDir             = "/workspace/recordings"
	defaultRecordSeconds  = 600
	maxRecordSeconds      = 3600
	defaultRecordFPS      = 10
	maxRecordFPS          = 30
	defaultRecordMaxBytes = 512 << 20
	maxRecordMaxBytes     = 4 << 30
)

var recordName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

func (s *Server) recordRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("POST /v1/sandboxes/{id}/desktop/record", s.record)
	v1("GET /v1/sandboxes/{id}/desktop/record", s.recordStatus)
}

type recordRequest struct {
	Action     string `json:"action"`
	Name       string `json:"name"`
	MaxSeconds int    `json:"max_seconds"`
	FPS        int    `json:"fps"`
	MaxBytes   int64  `json:"max_bytes"`
}

// recordArgs validates a start or stop request into agentbox-record's
// arguments.
func recordArgs(req recordRequest, now time.Time) ([]string, error) {
	switch req.Action {
	case "stop":
		if req.Name != "" || req.MaxSeconds != 0 || req.FPS != 0 || req.MaxBytes != 0 {
			return nil, badRequest("action", "stop takes no other field")
		}
		return []string{"agentbox-record", "stop"}, nil
	case "start":
	default:
		return nil, badRequest("action", "action must be start or stop")
	}
	name := req.Name
	if name == "" {
		name = "recording-" + now.UTC().Format("20060102-150405")
	}
	name = strings.TrimSuffix(name, ".mp4")
	if !recordName().MatchString(name) {
		return nil, badRequest("name", "name must be 1-64 letters, digits, '.', '_' or '-' (the file is %s/<name>.mp4)", recordDir)
	}
	secs := req.MaxSeconds
	if secs == 0 {
		secs = defaultRecordSeconds
	}
	if secs < 1 || secs > maxRecordSeconds {
		return nil, badRequest("max_seconds", "max_seconds must be 1-%d", maxRecordSeconds)
	}
	fps := req.FPS
	if fps == 0 {
		fps = defaultRecordFPS
	}
	if fps < 1 || fps > maxRecordFPS {
		return nil, badRequest("fps", "fps must be 1-%d", maxRecordFPS)
	}
	maxBytes := req.MaxBytes
	if maxBytes == 0 {
		maxBytes = defaultRecordMaxBytes
	}
	if maxBytes < 1<<20 || maxBytes > maxRecordMaxBytes {
		return nil, badRequest("max_bytes", "max_bytes must be 1 MiB to %d GiB", maxRecordMaxBytes>>30)
	}
	return []string{"agentbox-record", "start", recordDir + "/" + name + ".mp4",
		strconv.Itoa(secs), strconv.Itoa(fps), strconv.FormatInt(maxBytes, 10)}, nil
}

// record serves POST /v1/sandboxes/{id}/desktop/record.
func (s *Server) record(w http.ResponseWriter, r *http.Request) error {
	var req recordRequest
	if err := decodeJSON(w, r, maxJSONBody, &req, false); err != nil {
		return err
	}
	cmd, err := recordArgs(req, time.Now())
	if err != nil {
		return err
	}
	return s.runRecord(w, r, cmd)
}

// recordStatus serves GET /v1/sandboxes/{id}/desktop/record.
func (s *Server) recordStatus(w http.ResponseWriter, r *http.Request) error {
	return s.runRecord(w, r, []string{"agentbox-record", "status"})
}

// runRecord runs agentbox-record in the sandbox and answers its state.
func (s *Server) runRecord(w http.ResponseWriter, r *http.Request, cmd []string) error {
	id := sandboxID(r)
	noDesktop := sandbox.Errorf(sandbox.ClassConflict, "sandbox %s cannot record its screen (agentbox-record not found): create it from the desktop template (docs/desktop.md)", id)
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	res, err := dr.ExecBuffered(r.Context(), dataplane.ExecRequest{Cmd: cmd, Timeout: computer.Timeout})
	if err != nil {
		if errors.Is(err, dataplane.ErrExecutableNotFound) {
			return noDesktop
		}
		return err
	}
	msg := strings.TrimSpace(string(res.Stderr))
	if len(msg) > 300 {
		msg = msg[:300]
	}
	switch res.ExitCode {
	case 0:
	case 127:
		return noDesktop
	case 3:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s: %s (stop it first)", id, msg)
	case 4:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s has no running display to record: %s", id, msg)
	default:
		return sandbox.Errorf(sandbox.ClassUnavailable, "agentbox-record %s failed in sandbox %s (exit %d): %s", cmd[1], id, res.ExitCode, msg)
	}
	writeJSON(w, http.StatusOK, parseRecordState(string(res.Stdout)))
	return nil
}

// parseRecordState turns agentbox-record's key=value lines (written by
// code in the sandbox, so parsed strictly and bounded) into the answer.
func parseRecordState(out string) map[string]any {
	st := map[string]any{"recording": false}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "recording":
			st["recording"] = v == "1"
		case "file":
			if strings.HasPrefix(v, recordDir+"/") && len(v) < 200 {
				st["path"] = v
			}
		case "started":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
				st["started_at"] = time.Unix(n, 0).UTC()
			}
		case "max_seconds":
			if n, err := strconv.Atoi(v); err == nil {
				st["max_seconds"] = n
			}
		case "bytes":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				st["bytes"] = n
			}
		case "error":
			if v = strings.TrimSpace(v); v != "" {
				if len(v) > 300 {
					v = v[:300]
				}
				st["error"] = v
			}
		}
	}
	return st
}
