package api

import (
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v2"
)

// Reference renders docs/api.md from the OpenAPI document: the route table
// is generated, the prose around it is fixed. `go run ./scripts/apidoc`
// writes it; a test fails when the file is stale.
func Reference() (string, error) {
	var doc struct {
		Paths        yaml.MapSlice `yaml:"paths"`
		CommonErrors []int         `yaml:"x-common-errors"`
	}
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		return "", fmt.Errorf("parse openapi.yaml: %w", err)
	}
	var b strings.Builder
	b.WriteString(referenceHead)
	if len(doc.CommonErrors) > 0 {
		codes := make([]string, len(doc.CommonErrors))
		for i, c := range doc.CommonErrors {
			codes[i] = fmt.Sprint(c)
		}
		fmt.Fprintf(&b, "Besides the responses listed for each route, any route may answer %s (with the error\nshape above).\n\n", strings.Join(codes, ", "))
	}
	b.WriteString("| route | method | what | responses | auth |\n|---|---|---|---|---|\n")
	for _, p := range doc.Paths {
		ops, ok := p.Value.(yaml.MapSlice)
		if !ok {
			continue
		}
		for _, op := range ops {
			method := fmt.Sprint(op.Key)
			if method == "parameters" {
				continue
			}
			fields := map[string]any{}
			if m, ok := op.Value.(yaml.MapSlice); ok {
				for _, f := range m {
					fields[fmt.Sprint(f.Key)] = f.Value
				}
			}
			what, _ := fields["summary"].(string)
			if what == "" {
				what, _ = fields["operationId"].(string)
			}
			var codes []string
			if rs, ok := fields["responses"].(yaml.MapSlice); ok {
				for _, r := range rs {
					codes = append(codes, fmt.Sprint(r.Key))
				}
			}
			sort.Strings(codes)
			auth := "yes"
			if sec, ok := fields["security"].([]any); ok && len(sec) == 0 {
				auth = "no"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", p.Key, strings.ToUpper(method), what, strings.Join(codes, ", "), auth)
		}
	}
	b.WriteString(referenceTail)
	return b.String(), nil
}

const referenceHead = `# API reference

The native API, generated from [api/openapi.yaml](../api/openapi.yaml) (the server also
serves it at ` + "`" + `GET /v1/openapi.yaml` + "`" + `; tests keep it and the served routes in step, and check every
exchange of the end-to-end tests against it). Base URL
` + "`" + `http://127.0.0.1:8000` + "`" + ` by default.

- **Auth:** ` + "`" + `Authorization: Bearer <api key>` + "`" + ` on every ` + "`" + `/v1` + "`" + ` route when keys are configured.
  Each key belongs to a user; another user's sandboxes answer 404.
- **Errors:** always ` + "`" + `{"code": "...", "message": "...", "field": "...", "request_id": "..."}` + "`" + `
  with a stable ` + "`" + `code` + "`" + `: ` + "`" + `invalid_argument` + "`" + ` (400, ` + "`" + `field` + "`" + ` names the culprit), ` + "`" + `unauthenticated` + "`" + `
  (401), ` + "`" + `permission_denied` + "`" + ` (403), ` + "`" + `not_found` + "`" + ` (404), ` + "`" + `conflict` + "`" + ` (409), ` + "`" + `too_large` + "`" + ` (413),
  ` + "`" + `quota_exceeded` + "`" + ` (429), ` + "`" + `internal` + "`" + ` (500), ` + "`" + `unavailable` + "`" + ` (503), ` + "`" + `deadline_exceeded` + "`" + ` (504),
  ` + "`" + `insufficient_space` + "`" + ` (507).
- **JSON:** requests must be ` + "`" + `Content-Type: application/json` + "`" + `; unknown fields are errors;
  durations are seconds; sizes are bytes or strings like ` + "`" + `"512M"` + "`" + `.
- **Request ids:** every response has ` + "`" + `X-Request-Id` + "`" + ` (yours, when you send one).
- **Busy:** exec, code and file transfers are heavy requests. Past the caller's
  ` + "`" + `MAX_REQUESTS_PER_USER` + "`" + ` in flight, or the server's ` + "`" + `REQUEST_MEMORY` + "`" + `, they are refused at once
  with 429 ` + "`" + `quota_exceeded` + "`" + ` and a ` + "`" + `Retry-After` + "`" + ` header (seconds); nothing ran
  (see [configuration](configuration.md#request-and-connection-limits)).

`

const referenceTail = `
## Exec

` + "`" + `POST /v1/sandboxes/{id}/exec` + "`" + ` with ` + "`" + `{"cmd": ["prog", "arg"], "env"?, "cwd"?, "timeout"?, "stdin"?, "user"?}` + "`" + `.
` + "`" + `cmd` + "`" + ` is not run through a shell; use ` + "`" + `["sh","-c","..."]` + "`" + ` for one. The default timeout is
60 s (never longer than the sandbox's remaining life); when it passes the command and every
process it started are killed (also those that detached with setsid or a double fork) and the
result says ` + "`" + `"timed_out": true` + "`" + `.

- ` + "`" + `Accept: application/json` + "`" + ` (default): one result
  ` + "`" + `{"exit_code", "stdout", "stderr", "status", "timed_out", "oom_killed", "pids_limit_hit", "truncated", "duration_ms"}` + "`" + `.
  Each stream keeps at most ` + "`" + `MAX_EXEC_OUTPUT` + "`" + ` bytes (then ` + "`" + `truncated` + "`" + ` is true).
- ` + "`" + `Accept: application/x-ndjson` + "`" + `: the same run as events, one JSON object per line, flushed as
  they happen: ` + "`" + `{"type":"start","pid"}` + "`" + `, ` + "`" + `{"type":"stdout","data"}` + "`" + `, ` + "`" + `{"type":"stderr","data"}` + "`" + `,
  and last ` + "`" + `{"type":"exit","exit_code","status","timed_out","oom_killed","pids_limit_hit","duration_ms"}` + "`" + `.
- If the client disconnects, the command is killed.
- ` + "`" + `exit_code` + "`" + ` is -1 when a signal ended the process; ` + "`" + `oom_killed` + "`" + ` / ` + "`" + `pids_limit_hit` + "`" + ` say that
  the sandbox's memory or process limit acted during the run.

## Files

` + "`" + `GET/PUT/DELETE /v1/sandboxes/{id}/files?path=...` + "`" + ` stream file content both ways (uploads are
written to a temporary file and renamed: a failed or oversized upload leaves the old file
untouched; parents are created). Relative paths are relative to ` + "`" + `/home/user` + "`" + `. ` + "`" + `stat` + "`" + `, ` + "`" + `list` + "`" + `
(` + "`" + `depth` + "`" + ` 1-32), ` + "`" + `mkdir` + "`" + `, ` + "`" + `move` + "`" + ` complete the set. A full sandbox disk is 507.

## PTY

` + "`" + `GET /v1/sandboxes/{id}/pty?cols=&rows=&cmd=&cwd=` + "`" + ` upgrades to a websocket: binary messages
are keyboard input and terminal output; the client sends ` + "`" + `{"type":"resize","cols","rows"}` + "`" + `
text messages; the server sends ` + "`" + `{"type":"exit","exit_code"}` + "`" + ` before closing.

## Sessions

` + "`" + `POST /v1/sessions/{session_id}/connect {"user_id"?, "types"?: ["base", ...]}` + "`" + ` returns the
session's sandboxes, one per type, creating missing ones (key ` + "`" + `<session_id>_<user_id>` + "`" + `, as
agentscope's SandboxService). Session sandboxes idle for ` + "`" + `HEARTBEAT_TIMEOUT` + "`" + ` are recycled.
` + "`" + `POST .../release` + "`" + ` destroys them. With replicas sharing Redis a session spans them: any
replica finds its sandboxes on every replica, concurrent connects create one sandbox per type,
and a release destroys each sandbox on the replica that runs it (docs/scale-out.md). A
connect or release holds the session (so do agentscope's creates, restores and releases of
the same key): a call waits up to 5 minutes for another holder, then answers 503.

`
