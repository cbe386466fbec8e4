package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/fakeserver"
)

func TestCreate(t *testing.T) {
	fs := fakeserver.New(t)
	r := runCLI(t, fs.URL, "", "create", "--json", "--timeout", "5m", "--env", "A=1", "--meta", "k=v",
		"--memory", "512M", "--cpus", "0.5", "--pids", "64", "--disk", "1G")
	if r.code != 0 {
		t.Fatalf("exit %d: %s %s", r.code, r.msg, r.stderr)
	}
	var sb struct {
		ID        string            `json:"id"`
		Metadata  map[string]string `json:"metadata"`
		Env       map[string]string `json:"env"`
		CreatedAt time.Time         `json:"created_at"`
		EndAt     time.Time         `json:"end_at"`
		Resources map[string]any    `json:"resources"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil {
		t.Fatalf("stdout is not a sandbox: %v\n%s", err, r.stdout)
	}
	if sb.ID == "" || sb.Metadata["k"] != "v" || sb.Env["A"] != "1" || sb.EndAt.Sub(sb.CreatedAt) != 5*time.Minute {
		t.Errorf("sandbox = %+v", sb)
	}
	if sb.Resources["memory"] != float64(512<<20) || sb.Resources["disk"] != float64(1<<30) || sb.Resources["pids"] != float64(64) {
		t.Errorf("resources = %v (sizes must be sent as integers)", sb.Resources)
	}

	r = runCLI(t, fs.URL, "", "create")
	if id := strings.TrimSpace(r.stdout); r.code != 0 || !fs.Exists(id) {
		t.Errorf("human create printed %q (exit %d)", r.stdout, r.code)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	fs, id := newFake(t)
	for _, args := range [][]string{
		{"create", "--env", "novalue"},
		{"create", "--memory", "lots"},
		{"create", "--bogus-flag"},
		{"create", "extra-arg"},
		{"exec", id},
		{"exec", id, "--"},
		{"cp", "a", "b"},
		{"cp", id + ":/x", id + ":/y"},
		{"timeout", id, "soon"},
		{"kill"},
	} {
		r := runCLI(t, fs.URL, "", args...)
		if r.code != 2 || r.msg == "" {
			t.Errorf("%v: exit %d, msg %q; want a usage error (2)", args, r.code, r.msg)
		}
	}
}

func TestErrorsHumanAndJSON(t *testing.T) {
	fs, _ := newFake(t)
	r := runCLI(t, fs.URL, "", "stats", "missing")
	if r.code != 1 || r.msg != "sandbox missing not found" || r.stderr != "" {
		t.Errorf("human: exit %d msg %q stderr %q", r.code, r.msg, r.stderr)
	}
	r = runCLI(t, fs.URL, "", "--json", "stats", "missing")
	var e map[string]string
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e["code"] != "not_found" || e["request_id"] == "" {
		t.Errorf("--json stderr = %q (%v)", r.stderr, err)
	}
	// Printed once: the JSON on stderr, and nothing from main after it.
	if r.code != 1 || r.msg != "" || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("--json: exit %d msg %q stderr %q; want the error once, as JSON", r.code, r.msg, r.stderr)
	}
	r = runCLI(t, fs.URL, "", "--json", "create", "--pids", "x")
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e["code"] != "invalid_argument" || r.code != 2 || r.msg != "" {
		t.Errorf("bad flag value with --json: exit %d stderr %q msg %q", r.code, r.stderr, r.msg)
	}
	r = runCLI(t, fs.URL, "", "--json", "cp", "a", "b")
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e["code"] != "invalid_argument" || r.code != 2 || r.msg != "" {
		t.Errorf("usage error with --json: exit %d stderr %q msg %q", r.code, r.stderr, r.msg)
	}

	fs.SetAPIKey("right")
	r = runCLI(t, fs.URL, "", "--api-key", "wrong", "ls")
	if r.code != 1 || !strings.Contains(r.msg, "API key") {
		t.Errorf("wrong key: exit %d msg %q", r.code, r.msg)
	}
	if r = runCLI(t, fs.URL, "", "--api-key", "right", "ls"); r.code != 0 {
		t.Errorf("right key: exit %d msg %q", r.code, r.msg)
	}
	t.Setenv("AGENTBOX_API_KEY", "right")
	if r = runCLI(t, fs.URL, "", "ls"); r.code != 0 {
		t.Errorf("key from env: exit %d msg %q", r.code, r.msg)
	}
}

func TestLsTable(t *testing.T) {
	fs := fakeserver.New(t)
	fs.PageSize = 2 // ls must follow pagination
	old := fs.AddSandbox("host", map[string]string{"b": "2", "a": "1"}, 2*time.Hour+5*time.Minute, 30*time.Minute+30*time.Second)
	for range 3 {
		fs.AddSandbox("base", nil, time.Second, time.Hour)
	}
	expired := fs.AddSandbox("host", nil, 0, -time.Minute)
	fs.SetState(expired, "stopped")

	r := runCLI(t, fs.URL, "", "ls")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.msg)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 {
		t.Fatalf("want header + 5 rows, got:\n%s", r.stdout)
	}
	if h := strings.Join(strings.Fields(lines[0]), " "); h != "ID TEMPLATE STATE AGE ENDS IN METADATA" {
		t.Errorf("header = %q", h)
	}
	if got := strings.Fields(lines[1]); got[0] != expired || got[2] != "stopped" || got[4] != "expired" {
		t.Errorf("newest row = %q", lines[1])
	}
	if got, want := strings.Fields(lines[5]), []string{old, "host", "running", "2h5m", "30m", "a=1,b=2"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("oldest row = %q, want %q", got, want)
	}

	r = runCLI(t, fs.URL, "", "--json", "ls", "--state", "running", "--meta", "a=1")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0]["id"] != old {
		t.Errorf("ls --json filtered = %s (%v)", r.stdout, err)
	}
	r = runCLI(t, fs.URL, "", "--json", "ls", "--meta", "a=nope")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("empty ls --json = %q", r.stdout)
	}
	r = runCLI(t, fs.URL, "", "--json", "ls")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 5 {
		t.Errorf("ls --json across pages: %d sandboxes (%v)", len(list), err)
	}
}

func TestExec(t *testing.T) {
	fs, id := newFake(t)
	cases := []struct {
		stdin          string
		args           []string
		code           int
		stdout, stderr string
		msg            string
	}{
		{args: []string{"exec", id, "--", "echo", "hi", "-n"}, stdout: "hi -n\n"},
		{args: []string{"exec", id, "echo", "no", "dashes"}, stdout: "no dashes\n"},
		{args: []string{"exec", id, "--", "exit", "3"}, code: 3},
		{args: []string{"exec", id, "both"}, stdout: "out\n", stderr: "err\n"},
		{args: []string{"exec", "-e", "X=1", "-w", "/tmp", id, "env"}, stdout: "X=1\n"},
		{args: []string{"exec", "--cwd", "/srv", id, "pwd"}, stdout: "/srv\n"},
		{args: []string{"exec", "-u", "root", id, "whoami"}, stdout: "root\n"},
		{args: []string{"exec", "-i", id, "cat"}, stdin: "piped in\n", stdout: "piped in\n"},
		{args: []string{"exec", id, "cat"}, stdin: "not sent unless -i"},
		{args: []string{"exec", "--timeout", "2s", id, "timeout"}, code: 124, msg: "timed out: killed after --timeout 2s"},
		{args: []string{"exec", id, "oom"}, code: 137, msg: "out of memory"},
		{args: []string{"exec", id, "forkbomb"}, code: 1, stderr: "fork: Resource temporarily unavailable\n", msg: "process limit"},
		{args: []string{"exec", id, "nosuchprogram"}, code: 127, stderr: "fake: nosuchprogram: command not found\n"},
		{args: []string{"exec", "missing", "echo"}, code: 1, msg: "sandbox missing not found"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			r := runCLI(t, fs.URL, tc.stdin, tc.args...)
			if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr || !strings.Contains(r.msg, tc.msg) {
				t.Errorf("got exit %d stdout %q stderr %q msg %q\nwant exit %d stdout %q stderr %q msg ~%q",
					r.code, r.stdout, r.stderr, r.msg, tc.code, tc.stdout, tc.stderr, tc.msg)
			}
		})
	}
}

func TestExecStdinLimits(t *testing.T) {
	fs, id := newFake(t)
	r := runCLI(t, fs.URL, "\xff\xfe binary", "exec", "-i", id, "cat")
	if r.code != 1 || !strings.Contains(r.msg, "not UTF-8") {
		t.Errorf("binary stdin: exit %d msg %q", r.code, r.msg)
	}
	r = runCLI(t, fs.URL, strings.Repeat("x", maxExecStdin+1), "exec", "-i", id, "cat")
	if r.code != 1 || !strings.Contains(r.msg, "larger than 64 MiB") {
		t.Errorf("huge stdin: exit %d msg %q", r.code, r.msg)
	}
}

func TestExecJSON(t *testing.T) {
	fs, id := newFake(t)
	r := runCLI(t, fs.URL, "", "--json", "exec", id, "--", "exit", "5")
	var res map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res["exit_code"] != float64(5) {
		t.Errorf("exec --json = %q (%v)", r.stdout, err)
	}
	if r.code != 5 {
		t.Errorf("exit %d, want 5", r.code)
	}
}

func TestKillLogsTimeoutStats(t *testing.T) {
	fs, id := newFake(t)
	other := fs.AddSandbox("host", nil, 0, time.Hour)

	r := runCLI(t, fs.URL, "", "logs", id, "--limit", "2")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 2 || !strings.Contains(lines[1], "WARN") {
		t.Errorf("logs: exit %d\n%s", r.code, r.stdout)
	}
	r = runCLI(t, fs.URL, "", "logs", id)
	if !strings.Contains(r.stdout, "sandbox created template=host") {
		t.Errorf("logs fields: %s", r.stdout)
	}

	r = runCLI(t, fs.URL, "", "timeout", id, "2h")
	if r.code != 0 || !strings.HasPrefix(r.stdout, id+" ends at ") || !strings.Contains(r.stdout, "(in 2h)") {
		t.Errorf("timeout: exit %d %q", r.code, r.stdout)
	}
	r = runCLI(t, fs.URL, "", "--json", "timeout", id, "90")
	var sb map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil || sb["id"] != id {
		t.Errorf("timeout --json: %q", r.stdout)
	}

	r = runCLI(t, fs.URL, "", "stats", id)
	for _, want := range []string{"1.0 MiB (peak 2.0 MiB) of 512.0 MiB", "3 of 256", "1.50 s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stats lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runCLI(t, fs.URL, "", "kill", id, "missing", other)
	if r.stdout != id+"\n"+other+"\n" || r.code != 1 || !strings.Contains(r.msg, "missing: sandbox missing not found") {
		t.Errorf("kill: exit %d stdout %q msg %q", r.code, r.stdout, r.msg)
	}
	if fs.Exists(id) || fs.Exists(other) {
		t.Error("kill left a sandbox")
	}
}

func TestCompletion(t *testing.T) {
	fs, id := newFake(t)
	second := fs.AddSandbox("host", nil, 0, time.Hour)
	r := runCLI(t, fs.URL, "", "__complete", "kill", id, "")
	if !strings.Contains(r.stdout, second+"\thost running") || strings.Contains(r.stdout, id+"\t") {
		t.Errorf("kill completion:\n%s", r.stdout)
	}
	r = runCLI(t, fs.URL, "", "__complete", "exec", "sb")
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, second) {
		t.Errorf("exec completion:\n%s", r.stdout)
	}
	r = runCLI(t, fs.URL, "", "__complete", "cp", id[:3])
	// "ID:" suggestions, and no space after them (directive 2).
	if !strings.Contains(r.stdout, id+":\thost running") || !strings.HasSuffix(strings.TrimSpace(r.stdout), "\n:2") {
		t.Errorf("cp completion:\n%s", r.stdout)
	}
	// A dead server: no suggestions, no error, no hang.
	r = runCLI(t, "http://127.0.0.1:1", "", "__complete", "stats", "")
	if strings.Contains(r.stdout, "sb") || r.code != 0 {
		t.Errorf("completion with no server: exit %d\n%s", r.code, r.stdout)
	}
	r = runCLI(t, fs.URL, "", "completion", "bash")
	if r.code != 0 || !strings.Contains(r.stdout, "bash completion") {
		t.Errorf("completion bash: exit %d, %d bytes", r.code, len(r.stdout))
	}
}

func TestShell(t *testing.T) {
	fs, id := newFake(t)
	r := runCLI(t, fs.URL, "hello\nexit 5\n", "shell", "--cmd", "sh", id)
	if r.code != 5 || !strings.Contains(r.stdout, "pty 80x24 sh") {
		t.Errorf("shell: exit %d msg %q stdout %q", r.code, r.msg, r.stdout)
	}
	r = runCLI(t, fs.URL, "", "shell", "missing")
	if r.code != 1 || !strings.Contains(r.msg, "not found") {
		t.Errorf("shell missing: exit %d msg %q", r.code, r.msg)
	}
}

func TestCreateNoServiceFlag(t *testing.T) {
	cmd := newCreateCmd()
	if err := cmd.Flags().Parse([]string{"--no-service"}); err != nil {
		t.Fatal(err)
	}
	on, _ := cmd.Flags().GetBool("no-service")
	req, err := createOptions{noService: on}.request()
	if err != nil || !req.NoService {
		t.Fatalf("--no-service: %+v %v", req, err)
	}
}
func TestServerNotRunningHint(t *testing.T) {
	url := refusedURL(t)
	r := runAll(t, "--url", url, "ls")
	want := "connection refused: is the server running? (tried " + url + " from --url; start one with agentbox serve, or point --url or AGENTBOX_URL at yours)"
	if r.code != 1 || !strings.Contains(r.msg, want) {
		t.Errorf("--url: exit %d msg %q\nwant ~%q", r.code, r.msg, want)
	}

	t.Setenv(client.EnvURL, url)
	r = runAll(t, "stats", "sb1")
	if r.code != 1 || !strings.Contains(r.msg, "(tried "+url+" from AGENTBOX_URL;") {
		t.Errorf("AGENTBOX_URL: exit %d msg %q", r.code, r.msg)
	}

	r = runAll(t, "--json", "kill", "sb1")
	var e map[string]string
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e["code"] != "unavailable" || !strings.Contains(e["message"], "is the server running?") {
		t.Errorf("--json: stderr %q (%v)", r.stderr, err)
	}
	if r.code != 1 || r.msg != "" {
		t.Errorf("--json: exit %d msg %q; want the error once, as JSON", r.code, r.msg)
	}

	// The default URL says so; other failures get no hint.
	refused := fmt.Errorf("list sandboxes: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	if got := unreachable(refused, client.DefaultURL, ", the default").Error(); !strings.Contains(got, "(tried http://127.0.0.1:8000, the default;") {
		t.Errorf("default URL: %q", got)
	}
	other := errors.New("sandbox sb1 not found")
	if unreachable(other, url, "") != other {
		t.Error("a hint on an error that is not connection refused")
	}
}

func TestTemplateFlagCompletion(t *testing.T) {
	fs := fakeserver.New(t)
	fs.AddTemplate("python:3.12", 1<<20, 1, 0)
	fs.AddTemplate("tools", 1<<20, 1, 0)
	for _, cmd := range []string{"create", "mcp", "run"} {
		r := runAll(t, "--url", fs.URL, "__complete", cmd, "--template", "")
		for _, want := range []string{"host\thost\n", "python:3.12\timage\n", "tools\timage\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s --template: no %q in\n%s", cmd, want, r.stdout)
			}
		}
		if !strings.HasSuffix(r.stdout, ":4\n") { // no file completion
			t.Errorf("%s --template: directive in\n%s", cmd, r.stdout)
		}
	}
	r := runAll(t, "--url", fs.URL, "__complete", "create", "--template", "py")
	if !strings.Contains(r.stdout, "python:3.12\t") || strings.Contains(r.stdout, "tools") || strings.Contains(r.stdout, "host") {
		t.Errorf("prefix py:\n%s", r.stdout)
	}
	// No server: no suggestions, no error, no hang.
	r = runAll(t, "--url", refusedURL(t), "__complete", "create", "--template", "")
	if r.code != 0 || strings.Contains(r.stdout, "\t") {
		t.Errorf("no server: exit %d\n%s", r.code, r.stdout)
	}
	// A run without a server has host (and dir:PATH) only.
	t.Setenv(client.EnvURL, "")
	r = runAll(t, "__complete", "run", "--template", "")
	if !strings.HasPrefix(r.stdout, "host\t") || strings.Contains(r.stdout, "python") {
		t.Errorf("run without a server:\n%s", r.stdout)
	}
}

// TestKeylessWarning: a key sent to a keyless server (whose answers to it
// carry a Warning: internal/daemon keylessNotice) is said to be unchecked, once per command, on
// stderr; nothing is said without a key or with --json (stderr is then the
// error's JSON).
func TestKeylessWarning(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			w.Header().Set("Warning", `299 agentbox "authentication is off on this server: the API key sent was not checked"`)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"sandboxes":[]}`)
	}))
	t.Cleanup(hs.Close)
	r := runCLI(t, hs.URL, "", "--api-key", "k1", "ls")
	if r.code != 0 || strings.Count(r.stderr, "authentication is off") != 1 || !strings.Contains(r.stderr, "the API key sent was not checked;") {
		t.Errorf("a key to a keyless server: exit %d stderr %q, want the warning once", r.code, r.stderr)
	}
	if r := runCLI(t, hs.URL, "", "ls"); r.code != 0 || r.stderr != "" {
		t.Errorf("no key: exit %d stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, hs.URL, "", "--api-key", "k1", "--json", "ls"); r.code != 0 || r.stderr != "" {
		t.Errorf("--json: exit %d stderr %q", r.code, r.stderr)
	}
}
