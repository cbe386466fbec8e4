package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// freezerState reads the freezer state of a sandbox of d from the host
// (v1 freezer.state, or v2 cgroup.freeze), "" when it has no cgroup.
func freezerState(d *daemon, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(d.dataDir, "native")))
	parent := filepath.Join("agentbox", hex.EncodeToString(sum[:6]), id)
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/freezer", parent, "freezer.state"),
		filepath.Join("/sys/fs/cgroup", parent, "cgroup.freeze"),
	} {
		if data, err := os.ReadFile(f); err == nil {
			return strings.TrimSpace(string(data))
		}
	}
	return ""
}

// waitPreview waits (bounded) until the preview of port answers 200.
func waitPreview(t *testing.T, d *daemon, key, id, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/ports/8080"+path, key, nil)
		if status == 200 {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("preview of %s: %d %s", path, status, data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitState(t *testing.T, c *client.Client, id, want string) *client.Sandbox {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := c.Get(context.Background(), id)
		if err == nil && sb.State == want || want == "" && client.IsNotFound(err) {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: state %+v (%v), want %q", id, sb, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPauseResume drives pause and resume through the native API, the Go
// SDK and the CLI on a real daemon: a Python HTTP server and a variable in
// a code context survive pause → daemon SIGKILL and restart → resume; the
// data plane is a 409 while paused; the clock stops; another tenant gets
// 404; auto-pause pauses at the timeout; delete of a paused sandbox leaves
// no process and no cgroup.
func TestPauseResume(t *testing.T) {
	d := startDaemon(t, "API_KEYS=ka:alice,kb:bob", "AUTO_CLEANUP=false", "PAUSED_TTL=3600")
	ctx := context.Background()
	alice, bob := d.sdk(t, "ka"), d.sdk(t, "kb")
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			_ = alice.Delete(context.Background(), id)
		}
	})

	if info, err := alice.Info(ctx); err != nil || info.Capabilities["pause"] != true {
		t.Fatalf("info capabilities = %+v, %v: want pause true", info, err)
	}
	sb, err := alice.Create(ctx, client.CreateRequest{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	ids = append(ids, id)
	if _, err := alice.Exec(ctx, id, client.ExecRequest{Cmd: []string{"/bin/sh", "-c",
		"echo kept > /workspace/hello.txt; nohup python3 -m http.server 8080 --directory /workspace >/tmp/http.log 2>&1 & echo $! > /tmp/server.pid"}}); err != nil {
		t.Fatal(err)
	}
	if got := waitPreview(t, d, "ka", id, "/hello.txt"); got != "kept\n" {
		t.Fatalf("preview before pause = %q", got)
	}
	mustRun(t, d, "ka", id, map[string]any{"code": "counter = 41"})
	mustRun(t, d, "ka", id, map[string]any{"code": "counter += 1"})

	// Pause: the SDK, then the raw route (idempotent).
	p, err := alice.Pause(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != "paused" || p.PausedAt == nil || p.RemainingSeconds < 500 || p.RemainingSeconds > 600 {
		t.Fatalf("paused sandbox = %+v", p)
	}
	if st := freezerState(d, id); st != "FROZEN" && st != "1" {
		t.Fatalf("freezer state while paused = %q", st)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/pause", "ka", "", "Content-Type", "application/json"); status != 200 || mustJSON(t, data)["state"] != "paused" {
		t.Fatalf("pause again: %d %s", status, data)
	}
	page, err := alice.List(ctx, client.ListOptions{States: []string{"paused"}})
	if err != nil || len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != id {
		t.Fatalf("list paused = %+v %v", page, err)
	}
	if page, _ := alice.List(ctx, client.ListOptions{States: []string{"running"}}); len(page.Sandboxes) != 0 {
		t.Fatalf("list running holds the paused sandbox: %+v", page.Sandboxes)
	}
	// The data plane is a documented conflict; other tenants see nothing.
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "ka", map[string]any{"cmd": []string{"true"}})
	if body := mustJSON(t, data); status != 409 || !strings.Contains(body["message"].(string), "paused; resume it first") {
		t.Fatalf("exec on paused: %d %s", status, data)
	}
	if status, data, _ := runCode(t, d, "ka", id, map[string]any{"code": "1"}); status != 409 {
		t.Fatalf("code on paused: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/ports/8080/hello.txt", "ka", nil); status != 409 {
		t.Fatalf("preview of paused: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/files?path=/workspace/hello.txt", "ka", nil); status != 409 {
		t.Fatalf("download from paused: %d %s", status, data)
	}
	for _, path := range []string{"", "/pause", "/resume"} {
		method := "POST"
		if path == "" {
			method = "GET"
		}
		if status, data := d.call(t, method, "/v1/sandboxes/"+id+path, "kb", nil, "Content-Type", "application/json"); status != 404 {
			t.Fatalf("bob %s %s: %d %s", method, path, status, data)
		}
	}
	if _, err := bob.Resume(ctx, id, 0); !client.IsNotFound(err) {
		t.Fatalf("bob SDK resume: %v", err)
	}

	// The daemon dies; the sandbox stays paused and frozen.
	d.kill()
	if st := freezerState(d, id); st != "FROZEN" && st != "1" {
		t.Fatalf("freezer state with the daemon down = %q", st)
	}
	d.start()
	alice = d.sdk(t, "ka")
	got, err := alice.Get(ctx, id)
	if err != nil || got.State != "paused" || got.RemainingSeconds != p.RemainingSeconds {
		t.Fatalf("after restart: %+v %v (paused with %v s left)", got, err, p.RemainingSeconds)
	}
	if st := freezerState(d, id); st != "FROZEN" && st != "1" {
		t.Fatalf("freezer state after restart = %q", st)
	}

	// Resume: the same server and interpreter state, the time it had left.
	r, err := alice.Resume(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(r.EndAt).Seconds(); r.State != "running" || left > p.RemainingSeconds || left < p.RemainingSeconds-60 {
		t.Fatalf("resumed = %+v (%.0f s left, paused with %.0f)", r, left, p.RemainingSeconds)
	}
	if got := waitPreview(t, d, "ka", id, "/hello.txt"); got != "kept\n" {
		t.Fatalf("preview after resume = %q", got)
	}
	res, err := alice.Exec(ctx, id, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "kill -0 $(cat /tmp/server.pid) && echo same-server"}})
	if err != nil || res.Stdout != "same-server\n" {
		t.Fatalf("server process after resume: %+v %v", res, err)
	}
	if x := mustRun(t, d, "ka", id, map[string]any{"code": "counter"}); x.text() != "42" {
		t.Fatalf("code context variable after resume = %q (%+v)", x.text(), x.err)
	}

	// The clock stops while paused; the CLI pauses and resumes.
	short, err := alice.Create(ctx, client.CreateRequest{Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, short.ID)
	if _, err := alice.Pause(ctx, short.ID); err != nil {
		t.Fatal(err)
	}
	daemonBin, _ := binaries(t)
	cli := func(args ...string) string {
		t.Helper()
		cmd := execCommand(daemonBin, append([]string{"--url", d.url, "--api-key", "ka"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("agentbox %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("pause", short.ID); !strings.Contains(out, short.ID+" paused") { // already paused: a no-op
		t.Fatalf("agentbox pause: %q", out)
	}
	time.Sleep(4 * time.Second) // past its 3 s timeout
	got = waitState(t, alice, short.ID, "paused")
	if got.RemainingSeconds <= 0 || got.RemainingSeconds > 3 {
		t.Fatalf("paused past its timeout: %+v", got)
	}
	if out := cli("resume", "--timeout", "1m", short.ID); !strings.Contains(out, short.ID+" running") {
		t.Fatalf("agentbox resume: %q", out)
	}
	if res, err := alice.Exec(ctx, short.ID, client.ExecRequest{Cmd: []string{"echo", "up"}}); err != nil || res.Stdout != "up\n" {
		t.Fatalf("exec after CLI resume: %+v %v", res, err)
	}

	// Auto-pause at the timeout, then resume with a timeout.
	auto, err := alice.Create(ctx, client.CreateRequest{Timeout: 2 * time.Second, AutoPause: true})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, auto.ID)
	if !auto.AutoPause {
		t.Fatalf("created without auto_pause: %+v", auto)
	}
	waitState(t, alice, auto.ID, "paused")
	r, err = alice.Resume(ctx, auto.ID, 90*time.Second)
	if left := time.Until(r.EndAt); err != nil || left > 90*time.Second || left < 60*time.Second {
		t.Fatalf("resume after auto-pause: %+v %v", r, err)
	}
	if res, err := alice.Exec(ctx, auto.ID, client.ExecRequest{Cmd: []string{"echo", "back"}}); err != nil || res.Stdout != "back\n" {
		t.Fatalf("exec after auto-pause and resume: %+v %v", res, err)
	}

	// Delete while paused: no process, no cgroup left.
	if _, err := alice.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := alice.Delete(ctx, id); err != nil {
		t.Fatalf("delete paused: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sandboxProcesses(t, id) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := sandboxProcessList(id); len(left) > 0 {
		t.Fatalf("processes of the deleted paused sandbox: %v", left)
	}
	if st := freezerState(d, id); st != "" {
		t.Fatalf("cgroup of the deleted paused sandbox is still there (%s)", st)
	}
}

// TestPausedDeletedAtShutdown: with AUTO_CLEANUP (the default) a clean
// shutdown deletes paused sandboxes too, leaving no process, cgroup, mount
// or disk (startDaemon's cleanup checks the data dir and cgroups).
func TestPausedDeletedAtShutdown(t *testing.T) {
	d := startDaemon(t)
	c := d.sdk(t, "")
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.stop()
	if left := sandboxProcessList(sb.ID); len(left) > 0 {
		t.Fatalf("processes of a paused sandbox after shutdown: %v", left)
	}
}

// BenchmarkPauseResumeAPI: pause and resume of a running sandbox through
// the daemon (Go SDK → HTTP → manager → freezer, record written to the
// store), each timed on its own; the reference in the same run is a GET
// of the sandbox (the API round trip without the freezer and the store).
//
//	go test -run '^$' -bench PauseResumeAPI -benchtime 100x ./test/e2e/
func BenchmarkPauseResumeAPI(b *testing.B) {
	base := startBenchDaemon(b)
	c, err := client.New(base)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Timeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Delete(ctx, sb.ID)
	var pauses, resumes, gets []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Get(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := c.Pause(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := c.Resume(ctx, sb.ID, 0); err != nil {
			b.Fatal(err)
		}
		gets, pauses, resumes = append(gets, t1.Sub(t0)), append(pauses, t2.Sub(t1)), append(resumes, time.Since(t2))
	}
	b.StopTimer()
	b.ReportMetric(quantileMs(pauses, 0.5), "pause-p50-ms")
	b.ReportMetric(quantileMs(pauses, 0.99), "pause-p99-ms")
	b.ReportMetric(quantileMs(resumes, 0.5), "resume-p50-ms")
	b.ReportMetric(quantileMs(resumes, 0.99), "resume-p99-ms")
	b.ReportMetric(quantileMs(gets, 0.5), "get-p50-ms")
}
