package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// execution is a collected code execution of the native API.
type execution struct {
	types   []string
	stdout  string
	stderr  string
	results []map[string]any
	err     map[string]any // the error event, if any
	count   float64
	ctype   string
}

func (x *execution) text() string {
	for _, r := range x.results {
		if r["is_main_result"] == true {
			s, _ := r["text"].(string)
			return s
		}
	}
	return ""
}

func (x *execution) errName() string {
	if x.err == nil {
		return ""
	}
	return fmt.Sprint(x.err["name"])
}

// runCode posts body to /v1/sandboxes/{id}/code and collects the NDJSON
// stream; a non-200 answer is returned as status and body.
func runCode(t *testing.T, d *daemon, key, id string, body map[string]any) (int, []byte, *execution) {
	t.Helper()
	data, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/v1/sandboxes/"+id+"/code", bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST code: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes(), nil
	}
	x := &execution{ctype: resp.Header.Get("Content-Type")}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		ev := mustJSON(t, sc.Bytes())
		typ, _ := ev["type"].(string)
		x.types = append(x.types, typ)
		switch typ {
		case "stdout":
			x.stdout += ev["text"].(string)
		case "stderr":
			x.stderr += ev["text"].(string)
		case "result":
			x.results = append(x.results, ev)
		case "error":
			x.err = ev
		case "number_of_executions":
			x.count, _ = ev["execution_count"].(float64)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read stream: %v", err)
	}
	if len(x.types) == 0 || x.types[len(x.types)-1] != "end_of_execution" {
		t.Fatalf("stream did not end with end_of_execution: %v", x.types)
	}
	return http.StatusOK, nil, x
}

// mustRun is runCode for executions that must be accepted.
func mustRun(t *testing.T, d *daemon, key, id string, body map[string]any) *execution {
	t.Helper()
	status, data, x := runCode(t, d, key, id, body)
	if status != http.StatusOK {
		t.Fatalf("code %v: %d %s", body, status, data)
	}
	return x
}

func TestCodeExecution(t *testing.T) {
	d := startDaemon(t, "API_KEYS=key-alice:alice,key-bob:bob")
	const key = "key-alice"
	id := createRaw(t, d, key, map[string]any{})

	mustRun(t, d, key, id, map[string]any{"code": "x = [1, 2, 3]"})
	mustRun(t, d, key, id, map[string]any{"code": "x.append(4)"})
	x := mustRun(t, d, key, id, map[string]any{"code": "print(x)\nlen(x)"})
	if x.stdout != "[1, 2, 3, 4]\n" || x.text() != "4" || x.count != 3 || x.types[0] != "number_of_executions" ||
		x.ctype != "application/x-ndjson" || x.err != nil {
		t.Fatalf("state: %+v", x)
	}
	x = mustRun(t, d, key, id, map[string]any{"code": "{}['missing']"})
	if x.errName() != "KeyError" || !strings.Contains(fmt.Sprint(x.err["traceback"]), "{}['missing']") {
		t.Fatalf("error: %+v", x.err)
	}
	x = mustRun(t, d, key, id, map[string]any{"code": "import os\nos.environ['ONCE'], os.getcwd()", "env_vars": map[string]string{"ONCE": "1"}})
	if x.text() != "('1', '/workspace')" {
		t.Fatalf("env and cwd: %q %+v", x.text(), x.err)
	}

	// Recovery: a timeout interrupts and keeps the state; a crash
	// restarts the interpreter and says the state was lost.
	x = mustRun(t, d, key, id, map[string]any{"code": "while True: pass", "timeout": 1})
	if x.errName() != "TimeoutError" || !strings.Contains(fmt.Sprint(x.err["value"]), "kept") {
		t.Fatalf("timeout: %+v", x.err)
	}
	if x = mustRun(t, d, key, id, map[string]any{"code": "len(x)"}); x.text() != "4" {
		t.Fatalf("after timeout: %+v", x)
	}
	x = mustRun(t, d, key, id, map[string]any{"code": "import ctypes\nctypes.string_at(0)"})
	if x.errName() != "ContextRestarting" || !strings.Contains(fmt.Sprint(x.err["value"]), "state was lost") {
		t.Fatalf("segfault: %+v", x.err)
	}
	if x = mustRun(t, d, key, id, map[string]any{"code": "'alive'"}); x.text() != "alive" {
		t.Fatalf("after segfault: %+v", x)
	}

	if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() == nil {
		x = mustRun(t, d, key, id, map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()"})
		if len(x.results) != 1 {
			t.Fatalf("figure: %+v stderr %q", x.results, x.stderr)
		}
		raw, _ := base64.StdEncoding.DecodeString(fmt.Sprint(x.results[0]["png"]))
		if _, format, err := image.DecodeConfig(bytes.NewReader(raw)); err != nil || format != "png" {
			t.Fatalf("figure PNG: %v %s", err, format)
		}
	}

	// Contexts: bash keeps cd and export; the default python context is
	// listed first.
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/code/contexts", key, map[string]any{"language": "bash", "cwd": "/tmp"})
	bash := mustJSON(t, data)
	if status != http.StatusCreated || bash["language"] != "bash" || bash["cwd"] != "/tmp" {
		t.Fatalf("create bash context: %d %s", status, data)
	}
	bashID := bash["id"].(string)
	mustRun(t, d, key, id, map[string]any{"code": "cd /workspace && export V=kept", "context_id": bashID})
	if x = mustRun(t, d, key, id, map[string]any{"code": "echo $PWD $V", "context_id": bashID}); x.stdout != "/workspace kept\n" {
		t.Fatalf("bash state: %q", x.stdout)
	}
	if x = mustRun(t, d, key, id, map[string]any{"code": "false", "context_id": bashID}); x.err == nil || x.err["value"] != "1" {
		t.Fatalf("bash status: %+v", x.err)
	}
	status, data = d.call(t, "GET", "/v1/sandboxes/"+id+"/code/contexts", key, nil)
	list, _ := mustJSON(t, data)["contexts"].([]any)
	if status != 200 || len(list) != 2 || list[0].(map[string]any)["language"] != "python" || list[1].(map[string]any)["id"] != bashID {
		t.Fatalf("list: %d %s", status, data)
	}
	if status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/code/contexts/"+bashID+"/restart", key, nil, "Content-Type", "application/json"); status != http.StatusNoContent {
		t.Fatalf("restart: %d %s", status, data)
	}
	if x = mustRun(t, d, key, id, map[string]any{"code": "echo ${V-gone} $PWD", "context_id": bashID}); x.stdout != "gone /tmp\n" {
		t.Fatalf("after restart: %q", x.stdout)
	}
	if status, data = d.call(t, "DELETE", "/v1/sandboxes/"+id+"/code/contexts/"+bashID, key, nil); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, data)
	}
	if _, err := exec.LookPath("node"); err == nil {
		if x = mustRun(t, d, key, id, map[string]any{"code": "[1, 2].map(v => v * 2)", "language": "javascript"}); x.text() != "[ 2, 4 ]" {
			t.Fatalf("javascript: %+v", x)
		}
	}

	// Refusals come before the stream, in the native error shape.
	for _, tc := range []struct {
		body   map[string]any
		status int
		code   string
	}{
		{map[string]any{"code": "1", "context_id": bashID}, 404, "not_found"},
		{map[string]any{"code": "1", "context_id": bashID, "language": "python"}, 400, "invalid_argument"},
		{map[string]any{"code": "1", "language": "cobol"}, 400, "invalid_argument"},
		{map[string]any{"context_id": bashID}, 400, "invalid_argument"},
	} {
		status, data, _ := runCode(t, d, key, id, tc.body)
		if status != tc.status || mustJSON(t, data)["code"] != tc.code {
			t.Errorf("%v: %d %s", tc.body, status, data)
		}
	}

	// Another user cannot reach alice's sandbox at all.
	for _, req := range []struct{ method, path string }{
		{"POST", "/v1/sandboxes/" + id + "/code"},
		{"POST", "/v1/sandboxes/" + id + "/code/contexts"},
		{"GET", "/v1/sandboxes/" + id + "/code/contexts"},
		{"POST", "/v1/sandboxes/" + id + "/code/contexts/" + bashID + "/restart"},
		{"DELETE", "/v1/sandboxes/" + id + "/code/contexts/" + bashID},
	} {
		var body any
		if req.method == "POST" {
			body = map[string]any{}
			if strings.HasSuffix(req.path, "/code") {
				body = map[string]any{"code": "open('/workspace/pwned', 'w')"}
			}
		}
		if status, data := d.call(t, req.method, req.path, "key-bob", body); status != 404 || mustJSON(t, data)["code"] != "not_found" {
			t.Errorf("bob %s %s: %d %s", req.method, req.path, status, data)
		}
	}
	if x = mustRun(t, d, key, id, map[string]any{"code": "import os\nos.path.exists('/workspace/pwned')"}); x.text() != "False" {
		t.Fatalf("bob reached the sandbox: %+v", x)
	}
}

// TestCodeMemoryBlowUp fills the memory of a 128M sandbox from a code
// context: whether Python gets a MemoryError or the OOM killer takes the
// interpreter, the context stays usable.
func TestCodeMemoryBlowUp(t *testing.T) {
	d := startDaemon(t)
	id := createRaw(t, d, "", map[string]any{"resources": map[string]any{"memory": "128M"}})
	mustRun(t, d, "", id, map[string]any{"code": "keep = 'yes'"})
	x := mustRun(t, d, "", id, map[string]any{"code": "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))"})
	switch x.errName() {
	case "MemoryError":
	case "ContextRestarting":
		if !strings.Contains(fmt.Sprint(x.err["value"]), "state was lost") {
			t.Fatalf("restart message: %v", x.err["value"])
		}
	default:
		t.Fatalf("memory blow-up ended with %+v (stderr %q)", x.err, x.stderr)
	}
	t.Logf("memory blow-up: %s: %v", x.errName(), x.err["value"])
	if x = mustRun(t, d, "", id, map[string]any{"code": "del blocks\n6 * 7"}); x.text() != "42" && x.errName() != "NameError" {
		t.Fatalf("context after the blow-up: %+v", x)
	}
	if x = mustRun(t, d, "", id, map[string]any{"code": "6 * 7"}); x.text() != "42" {
		t.Fatalf("context after the blow-up: %+v", x)
	}
}

// BenchmarkCodeColdStart measures the first execution in a new sandbox:
// creating the sandbox is excluded, starting the python interpreter is
// not. It needs a built daemon (AGENTBOX_BIN, see the Makefile).
func BenchmarkCodeColdStart(b *testing.B) {
	url := startBenchDaemon(b)
	post := func(path, body string) []byte {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		if resp.StatusCode/100 != 2 {
			b.Fatalf("POST %s: %d %s", path, resp.StatusCode, buf.Bytes())
		}
		return buf.Bytes()
	}
	var samples []time.Duration
	for b.Loop() {
		b.StopTimer()
		var sb struct{ ID string }
		_ = json.Unmarshal(post("/v1/sandboxes", "{}"), &sb)
		b.StartTimer()
		start := time.Now()
		out := post("/v1/sandboxes/"+sb.ID+"/code", `{"code":"1+1"}`)
		samples = append(samples, time.Since(start))
		b.StopTimer()
		if !bytes.Contains(out, []byte(`"text":"2"`)) {
			b.Fatalf("result: %s", out)
		}
		req, _ := http.NewRequest("DELETE", url+"/v1/sandboxes/"+sb.ID, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		b.StartTimer()
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[min(int(q*float64(len(samples))), len(samples)-1)].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// startBenchDaemon starts `agentbox serve` with settings (NAME=VALUE) for
// a benchmark (the harness's helpers take a *testing.T).
func startBenchDaemon(b *testing.B, settings ...string) string {
	bin := os.Getenv("AGENTBOX_BIN")
	if bin == "" {
		b.Skip("set AGENTBOX_BIN (make build) to benchmark through a daemon")
	}
	testutil.RequireRoot(b)
	settings = withSharedSecretsKey(settings)
	lockCachedTemplates(b, settings)
	agentBin := testutil.AgentBinary(b)
	dir := testutil.ShortTempDir(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ln := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(cleanEnv(), "AGENT_PATH="+agentBin, fmt.Sprintf("PORT=%d", ln), "HOST=127.0.0.1",
		"AGENTBOX_DATA_DIR="+dir, "LOG_LEVEL=warn")
	cmd.Env = append(cmd.Env, settings...)
	var logs testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", ln)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
	}
	b.Fatalf("daemon not ready:\n%s", logs.String())
	return ""
}
