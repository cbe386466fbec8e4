package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

func createRaw(t *testing.T, d *daemon, key string, body any) string {
	t.Helper()
	status, data := d.call(t, "POST", "/v1/sandboxes", key, body)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, data)
	}
	id, _ := mustJSON(t, data)["id"].(string)
	if id == "" {
		t.Fatalf("create returned no id: %s", data)
	}
	return id
}

func TestPinnedLifecycleAndExec(t *testing.T) {
	d := startDaemon(t, "BEARER_TOKEN=secret-token")
	const key = "secret-token"
	id := createRaw(t, d, key, map[string]any{"template": "host"})

	status, data := d.call(t, "GET", "/v1/sandboxes/"+id, key, nil)
	if status != 200 || mustJSON(t, data)["id"] != id {
		t.Fatalf("get: %d %s", status, data)
	}
	status, data = d.call(t, "GET", "/v1/sandboxes", key, nil)
	if status != 200 || !strings.Contains(string(data), id) {
		t.Fatalf("list: %d %s", status, data)
	}

	// The pinned buffered form.
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key,
		map[string]any{"cmd": []string{"echo", "hi"}}, "Accept", "application/json")
	var res struct {
		ExitCode *int    `json:"exit_code"`
		Stdout   *string `json:"stdout"`
		Stderr   *string `json:"stderr"`
	}
	if err := json.Unmarshal(data, &res); err != nil || status != 200 || res.ExitCode == nil || *res.ExitCode != 0 ||
		res.Stdout == nil || *res.Stdout != "hi\n" || res.Stderr == nil || *res.Stderr != "" {
		t.Fatalf("exec json: %d %s", status, data)
	}

	// env, cwd, stdin, exit code.
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{
		"cmd": []string{"/bin/sh", "-c", "cat; echo \"$FOO $(pwd)\"; echo err >&2; exit 7"},
		"env": map[string]string{"FOO": "bar"}, "cwd": "/tmp", "stdin": "in-data\n"})
	m := mustJSON(t, data)
	if status != 200 || m["stdout"] != "in-data\nbar /tmp\n" || m["stderr"] != "err\n" || m["exit_code"] != float64(7) {
		t.Fatalf("exec with env/cwd/stdin: %d %s", status, data)
	}

	// The streamed form: events in order, ending with exit.
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key,
		map[string]any{"cmd": []string{"/bin/sh", "-c", "echo one; sleep 0.1; echo two >&2"}}, "Accept", "application/x-ndjson")
	if status != 200 {
		t.Fatalf("exec ndjson: %d %s", status, data)
	}
	var types []string
	var out, errOut string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		ev := mustJSON(t, sc.Bytes())
		types = append(types, ev["type"].(string))
		switch ev["type"] {
		case "stdout":
			out += ev["data"].(string)
		case "stderr":
			errOut += ev["data"].(string)
		case "exit":
			if ev["exit_code"] != float64(0) {
				t.Fatalf("exit event: %v", ev)
			}
		}
	}
	if types[0] != "start" || types[len(types)-1] != "exit" || out != "one\n" || errOut != "two\n" {
		t.Fatalf("ndjson events %v out %q err %q", types, out, errOut)
	}

	status, _ = d.call(t, "DELETE", "/v1/sandboxes/"+id, key, nil)
	if status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
	status, data = d.call(t, "GET", "/v1/sandboxes/"+id, key, nil)
	if status != 404 || mustJSON(t, data)["code"] != "not_found" {
		t.Fatalf("get after delete: %d %s", status, data)
	}
}

func TestTenantsAndAuth(t *testing.T) {
	d := startDaemon(t, "API_KEYS=key-alice:alice,key-bob:bob")
	for _, key := range []string{"", "wrong-key"} {
		status, data := d.call(t, "GET", "/v1/sandboxes", key, nil)
		if status != 401 || mustJSON(t, data)["code"] != "unauthenticated" {
			t.Fatalf("key %q: %d %s", key, status, data)
		}
	}
	if status, _ := d.call(t, "GET", "/metrics", "", nil); status != 403 {
		t.Fatalf("/metrics without METRICS_TOKEN set: %d", status)
	}
	if status, _ := d.call(t, "GET", "/healthz", "", nil); status != 200 {
		t.Fatalf("/healthz: %d", status)
	}
	id := createRaw(t, d, "key-alice", map[string]any{})
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/sandboxes/" + id},
		{"DELETE", "/v1/sandboxes/" + id},
		{"POST", "/v1/sandboxes/" + id + "/exec"},
		{"GET", "/v1/sandboxes/" + id + "/files?path=/etc/hostname"},
		{"POST", "/v1/sandboxes/" + id + "/timeout"},
	} {
		var body any
		if req.method == "POST" {
			body = map[string]any{"cmd": []string{"true"}, "timeout": 10}
			if strings.HasSuffix(req.path, "/timeout") {
				body = map[string]any{"timeout": 10}
			}
		}
		status, data := d.call(t, req.method, req.path, "key-bob", body)
		if status != 404 {
			t.Errorf("bob %s %s: %d %s", req.method, req.path, status, data)
		}
	}
	status, data := d.call(t, "GET", "/v1/sandboxes", "key-bob", nil)
	if status != 200 || strings.Contains(string(data), id) {
		t.Fatalf("bob's list shows alice's sandbox: %s", data)
	}
	// Alice's sandbox survived bob's attempts.
	c := d.sdk(t, "key-alice")
	res, err := c.Exec(context.Background(), id, client.ExecRequest{Cmd: []string{"echo", "mine"}})
	if err != nil || res.Stdout != "mine\n" {
		t.Fatalf("alice exec: %+v %v", res, err)
	}
	// Metrics are the operator's (METRICS_TOKEN), not a tenant's.
	if status, _ := d.call(t, "GET", "/metrics", "key-bob", nil); status != 403 {
		t.Fatalf("/metrics with a tenant key: %d", status)
	}
}

func TestExpiryAndTimeouts(t *testing.T) {
	d := startDaemon(t, "MAX_TIMEOUT=3600")
	c := d.sdk(t, "")
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.Create(ctx, client.CreateRequest{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetTimeout(ctx, long.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.Get(ctx, sb.ID)
		if client.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox did not expire: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := c.Get(ctx, long.ID)
	if err != nil || time.Until(got.EndAt) < 30*time.Second {
		t.Fatalf("extended sandbox: %+v %v", got, err)
	}
	if _, err := c.SetTimeout(ctx, long.ID, 2*time.Hour); !client.IsInvalidArgument(err) {
		t.Fatalf("timeout over MAX_TIMEOUT: %v", err)
	}
	if _, err := c.Create(ctx, client.CreateRequest{Timeout: 2 * time.Hour}); !client.IsInvalidArgument(err) {
		t.Fatalf("create over MAX_TIMEOUT: %v", err)
	}
}

func TestQuotaPerUser(t *testing.T) {
	d := startDaemon(t, "MAX_SANDBOXES_PER_USER=1")
	createRaw(t, d, "", map[string]any{})
	status, data := d.call(t, "POST", "/v1/sandboxes", "", map[string]any{})
	if status != 429 || mustJSON(t, data)["code"] != "quota_exceeded" {
		t.Fatalf("second sandbox: %d %s", status, data)
	}
}

func TestPoolHitThenRefill(t *testing.T) {
	d := startDaemon(t, "POOL_SIZE=2")
	waitPool := func(want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, data := d.call(t, "GET", "/v1/info", "", nil)
			pools, _ := mustJSON(t, data)["pools"].(map[string]any)
			if pools["host"] == float64(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool never reached %d: %s\n%s", want, data, d.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPool(2)
	c := d.sdk(t, "")
	sb, err := c.Create(context.Background(), client.CreateRequest{Env: map[string]string{"WHO": "pooled"}, Metadata: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if !sb.FromPool {
		t.Fatalf("create with a full pool was not a pool hit: %+v", sb)
	}
	res, err := c.Exec(context.Background(), sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo $WHO"}})
	if err != nil || res.Stdout != "pooled\n" {
		t.Fatalf("pool hit did not get its env: %+v %v", res, err)
	}
	waitPool(2)
	_, data := d.call(t, "GET", "/metrics", "", nil)
	if !strings.Contains(string(data), `agentbox_pool_hits_total{template="host"} 1`) {
		t.Fatalf("pool hit not counted in metrics")
	}
}

func TestSessions(t *testing.T) {
	d := startDaemon(t)
	c := d.sdk(t, "")
	ctx := context.Background()
	s1, err := c.ConnectSession(ctx, "chat-1", client.ConnectSessionRequest{UserID: "u1", Types: []string{"base", "filesystem"}})
	if err != nil {
		t.Fatal(err)
	}
	if s1.SessionKey != "chat-1_u1" || len(s1.Sandboxes) != 2 {
		t.Fatalf("connect: %+v", s1)
	}
	s2, err := c.ConnectSession(ctx, "chat-1", client.ConnectSessionRequest{UserID: "u1", Types: []string{"base", "filesystem"}})
	if err != nil || s2.Sandboxes[0].ID != s1.Sandboxes[0].ID || s2.Sandboxes[1].ID != s1.Sandboxes[1].ID {
		t.Fatalf("reconnect gave other sandboxes: %+v %v", s2, err)
	}
	other, err := c.ConnectSession(ctx, "chat-1", client.ConnectSessionRequest{UserID: "u2"})
	if err != nil || other.Sandboxes[0].ID == s1.Sandboxes[0].ID {
		t.Fatalf("another user's session shares sandboxes: %+v %v", other, err)
	}
	released, err := c.ReleaseSession(ctx, "chat-1", "u1")
	if err != nil || len(released) != 2 {
		t.Fatalf("release: %v %v", released, err)
	}
	if _, err := c.Get(ctx, s1.Sandboxes[0].ID); !client.IsNotFound(err) {
		t.Fatalf("released sandbox still there: %v", err)
	}
}

func TestFilesRoundTrip(t *testing.T) {
	d := startDaemon(t, "MAX_UPLOAD_SIZE=4M")
	c := d.sdk(t, "")
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	if _, err := c.Upload(ctx, sb.ID, "/workspace/dir/blob.bin", bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatal(err)
	}
	rc, _, err := c.Download(ctx, sb.ID, "/workspace/dir/blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes, differ from the upload", len(got))
	}
	// Over the upload cap: 413, and the existing file is untouched.
	big := bytes.NewReader(make([]byte, 5<<20))
	status, body := d.call(t, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/workspace/dir/blob.bin", "", io.Reader(big))
	if status != 413 {
		t.Fatalf("oversized upload: %d %s", status, body)
	}
	rc, _, err = c.Download(ctx, sb.ID, "/workspace/dir/blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("a refused upload damaged the existing file")
	}
	if _, err := c.MakeDir(ctx, sb.ID, "/workspace/a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Move(ctx, sb.ID, "/workspace/dir/blob.bin", "/workspace/a/b/moved.bin"); err != nil {
		t.Fatal(err)
	}
	entries, err := c.ListFiles(ctx, sb.ID, "/workspace", 3)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Path)
	}
	if !strings.Contains(strings.Join(names, ","), "/workspace/a/b/moved.bin") {
		t.Fatalf("list: %v", names)
	}
	st, err := c.Stat(ctx, sb.ID, "/workspace/a/b/moved.bin")
	if err != nil || st.Size != int64(len(data)) || st.Type != "file" {
		t.Fatalf("stat: %+v %v", st, err)
	}
	if err := c.Remove(ctx, sb.ID, "/workspace/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, sb.ID, "/workspace/a"); !client.IsNotFound(err) {
		t.Fatalf("stat removed: %v", err)
	}
	// Writing past the sandbox's disk cap is 507, and the daemon carries on.
	_, err = c.Upload(ctx, sb.ID, "/workspace/huge", io.LimitReader(zeros{}, 2<<30), -1, nil)
	if err == nil {
		t.Fatal("2 GiB upload into a 1 GiB disk succeeded")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestHostileInput(t *testing.T) {
	d := startDaemon(t)
	id := createRaw(t, d, "", map[string]any{})
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"bad json", "POST", "/v1/sandboxes", "{not json", 400, "invalid_argument", ""},
		{"unknown field", "POST", "/v1/sandboxes", `{"templat":"host"}`, 400, "invalid_argument", "templat"},
		{"wrong type", "POST", "/v1/sandboxes", `{"timeout":"soon"}`, 400, "invalid_argument", "timeout"},
		{"negative timeout", "POST", "/v1/sandboxes", `{"timeout":-5}`, 400, "invalid_argument", "timeout"},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"ubuntu:latest"}`, 400, "invalid_argument", "template"},
		{"huge body", "POST", "/v1/sandboxes", `{"metadata":{"k":"` + strings.Repeat("x", 5<<20) + `"}}`, 413, "too_large", ""},
		{"unknown id", "GET", "/v1/sandboxes/doesnotexist", nil, 404, "not_found", ""},
		{"bad id", "GET", "/v1/sandboxes/..%2F..%2Fetc", nil, 404, "not_found", ""},
		{"exec no cmd", "POST", "/v1/sandboxes/" + id + "/exec", `{}`, 400, "invalid_argument", "cmd"},
		{"exec missing program", "POST", "/v1/sandboxes/" + id + "/exec", `{"cmd":["/no/such/program"]}`, 400, "invalid_argument", ""},
		{"file without path", "GET", "/v1/sandboxes/" + id + "/files", nil, 400, "invalid_argument", "path"},
		{"traversal to host file", "GET", "/v1/sandboxes/" + id + "/files?path=" + url.QueryEscape("../../../../../etc/shadow"), nil, 404, "not_found", ""},
		{"directory download", "GET", "/v1/sandboxes/" + id + "/files?path=/workspace", nil, 400, "invalid_argument", ""},
		{"unknown route", "GET", "/v1/nothing", nil, 404, "not_found", ""},
		{"bad limit", "GET", "/v1/sandboxes?limit=0", nil, 400, "invalid_argument", "limit"},
		{"bad next token", "GET", "/v1/sandboxes?next_token=not-a-token!", nil, 400, "invalid_argument", ""},
	}
	for _, c := range cases {
		status, data := d.call(t, c.method, c.path, "", c.body)
		if status != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, status, c.status, data)
			continue
		}
		m := mustJSON(t, data)
		if m["code"] != c.code || (c.field != "" && m["field"] != c.field) || m["message"] == "" {
			t.Errorf("%s: body %s, want code %s field %q", c.name, data, c.code, c.field)
		}
	}
	// After all that, the sandbox and the daemon are fine.
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{"cmd": []string{"echo", "ok"}})
	if status != 200 || mustJSON(t, data)["stdout"] != "ok\n" {
		t.Fatalf("after hostile input: %d %s", status, data)
	}
}

func TestExecReportsLimits(t *testing.T) {
	d := startDaemon(t)
	status, data := d.call(t, "POST", "/v1/sandboxes", "", map[string]any{"resources": map[string]any{"memory": "64M", "pids": 32}})
	if status != 201 {
		t.Fatalf("create: %d %s", status, data)
	}
	id := mustJSON(t, data)["id"].(string)
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{
		"cmd": []string{"python3", "-c", "x = bytearray(300 << 20)"}})
	m := mustJSON(t, data)
	if status != 200 || m["oom_killed"] != true || m["exit_code"] == float64(0) {
		t.Fatalf("memory blow-up: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{
		"cmd": []string{"/bin/sh", "-c", "while :; do :; done"}, "timeout": 1})
	m = mustJSON(t, data)
	if status != 200 || m["timed_out"] != true {
		t.Fatalf("spin with timeout: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{
		"cmd": []string{"/bin/bash", "-c", "for i in $(seq 64); do sleep 2 & done; wait"}, "timeout": 5})
	m = mustJSON(t, data)
	if status != 200 || m["pids_limit_hit"] != true {
		t.Fatalf("too many processes: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{"cmd": []string{"echo", "fine"}})
	if status != 200 || mustJSON(t, data)["stdout"] != "fine\n" {
		t.Fatalf("sandbox after limits: %d %s", status, data)
	}

	// A stop and start gives the sandbox new cgroups: the counters an exec
	// compares (which the daemon keeps open) must be those of the new ones.
	for _, op := range []string{"stop", "start"} {
		if status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/"+op, "", map[string]any{}); status != 200 {
			t.Fatalf("%s: %d %s", op, status, data)
		}
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{"cmd": []string{"true"}})
	if m := mustJSON(t, data); status != 200 || m["oom_killed"] == true || m["pids_limit_hit"] == true {
		t.Fatalf("plain exec after restart: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{
		"cmd": []string{"python3", "-c", "x = bytearray(300 << 20)"}})
	if m := mustJSON(t, data); status != 200 || m["oom_killed"] != true {
		t.Fatalf("memory blow-up after restart: %d %s", status, data)
	}
}

func TestPTY(t *testing.T) {
	d := startDaemon(t)
	c := d.sdk(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pty, err := c.PTY(ctx, sb.ID, client.PTYOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer pty.Close()
	if err := pty.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := pty.Write([]byte("stty size; echo marker-$((40+2)); exit 5\n")); err != nil {
		t.Fatal(err)
	}
	out := readUntil(pty, "marker-42")
	code, err := pty.Wait()
	if err != nil || code != 5 {
		t.Fatalf("pty exit = %d %v; output %q", code, err, out.String())
	}
	if !strings.Contains(out.String(), "40 120") {
		t.Fatalf("resize not applied: %q", out.String())
	}
}

func TestConcurrentClients(t *testing.T) {
	d := startDaemon(t)
	c := d.sdk(t, "")
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for j := 0; j < 3; j++ {
				sb, err := c.Create(ctx, client.CreateRequest{})
				if err != nil {
					errs <- err
					return
				}
				res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", fmt.Sprint(i, j)}})
				if err != nil || res.Stdout != fmt.Sprintln(i, j) {
					errs <- fmt.Errorf("exec %d/%d: %+v %v", i, j, res, err)
					return
				}
				if err := c.Delete(ctx, sb.ID); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(i)
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestKeylessServerRefusesBrowsers(t *testing.T) {
	d := startDaemon(t)
	// DNS rebinding: a foreign host name pointing at 127.0.0.1.
	status, data := d.call(t, "GET", "/v1/sandboxes", "", nil, "Host", "evil.example:8000")
	if status != 403 {
		t.Fatalf("foreign Host: %d %s", status, data)
	}
	// A cross-site page posting to the local server.
	status, data = d.call(t, "POST", "/v1/sandboxes", "", map[string]any{}, "Origin", "https://evil.example")
	if status != 403 {
		t.Fatalf("cross-origin create: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes", "", "{}", "Content-Type", "text/plain")
	if status != 400 {
		t.Fatalf("non-JSON content type: %d %s", status, data)
	}
	// Another local origin is another program (or a preview page).
	status, _ = d.call(t, "GET", "/v1/sandboxes", "", nil, "Origin", "http://localhost:3000")
	if status != 403 {
		t.Fatalf("other local origin: %d", status)
	}
	status, _ = d.call(t, "GET", "/v1/sandboxes", "", nil, "Origin", d.url)
	if status != 200 {
		t.Fatalf("same origin refused: %d", status)
	}
}

// readUntil reads r until its output contains marker or r ends (a
// terminal's output comes in pieces; the caller checks what it got).
func readUntil(r io.Reader, marker string) *bytes.Buffer {
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), marker) {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return &out
}
