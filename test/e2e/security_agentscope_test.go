package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// asTool calls a tool of agentscope sandbox id through the manager's
// call_tool and returns the status, the tool result's text and isError.
func asTool(t *testing.T, d *daemon, key, id, tool string, args map[string]any) (int, string, bool) {
	t.Helper()
	status, data := d.call(t, "POST", "/call_tool", key, map[string]any{"identity": id, "tool_name": tool, "arguments": args})
	var body struct {
		Data struct {
			Content []struct{ Text string }
			IsError bool
		}
		Detail string
	}
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("%s: bad JSON %.200q: %v", tool, data, err)
	}
	if status != http.StatusOK {
		return status, body.Detail, true
	}
	var text strings.Builder
	for _, c := range body.Data.Content {
		text.WriteString(c.Text)
	}
	return status, text.String(), body.Data.IsError
}

// cpuOf returns the CPU time (user + system) a process used so far.
func cpuOf(t *testing.T, pid int) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which may hold spaces: utime and
	// stime are the 14th and 15th fields of the line, in clock ticks
	// (100 per second on Linux).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// TestSecurityAgentscopeToolsBounded is the review's finding: agentscope's
// filesystem tools ran in the daemon with no admission. read_multiple_files
// of 16 copies of a 33 MB file took the daemon from 41 MB to 2.1 GB,
// edit_file with 1,000 edits of a 33 MB file cost 12 CPU-s, and twelve
// concurrent tool calls of one user all ran past MAX_REQUESTS_PER_USER.
// Now a call's answer is bounded, edits run in the sandbox, and every
// tool call is admitted: the flooding user gets 429, another does not.
func TestSecurityAgentscopeToolsBounded(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+secAliceKey+":alice,"+secBobKey+":bob", "MAX_REQUESTS_PER_USER=4")
	create := func(key string) string {
		status, body := asCall(t, d, "create", key, map[string]any{"sandbox_type": "filesystem"})
		id, _ := body["data"].(string)
		if status != 200 || id == "" {
			t.Fatalf("create: %d %v", status, body)
		}
		t.Cleanup(func() { asCall(t, d, "release", key, map[string]any{"identity": id}) })
		return id
	}
	alice, bob := create(secAliceKey), create(secBobKey)
	// 33 MB of 64-byte lines, 5 MiB of the same, 33 MB of newlines.
	asShell(t, d, secAliceKey, alice, `cd /workspace && (yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 33000000 > big) &&
		head -c 5242880 big > mid && head -c 33000000 /dev/zero | tr '\0' '\n' > nl`)

	pid := d.cmd.Process.Pid
	cpu0 := cpuOf(t, pid)

	paths := make([]any, 16)
	for i := range paths {
		paths[i] = "/workspace/big"
	}
	status, text, isErr := asTool(t, d, secAliceKey, alice, "read_multiple_files", map[string]any{"paths": paths})
	if status != 200 || isErr || len(text) > 64<<10 || strings.Count(text, "is 33000000 bytes; one call returns at most 16 MiB") != 16 {
		t.Errorf("read_multiple_files of 16 copies of a 33 MB file: %d, isError %v, %d bytes: %.300q", status, isErr, len(text), text)
	}
	for i := range paths {
		paths[i] = "mid"
	}
	status, text, isErr = asTool(t, d, secAliceKey, alice, "read_multiple_files", map[string]any{"paths": paths})
	if read := strings.Count(text, "mid:\naaaa"); status != 200 || isErr || read != 3 || strings.Count(text, "mid: Error - file /workspace/mid is 5242880 bytes") != 13 {
		t.Errorf("read_multiple_files of 16 copies of a 5 MiB file: %d, isError %v, %d read whole; want the 3 that fit 16 MiB", status, isErr, read)
	}
	tooMany := make([]any, 257)
	for i := range tooMany {
		tooMany[i] = "mid"
	}
	if _, text, isErr = asTool(t, d, secAliceKey, alice, "read_multiple_files", map[string]any{"paths": tooMany}); !isErr || !strings.Contains(text, "at most 256 paths") {
		t.Errorf("257 paths: isError %v %.200q", isErr, text)
	}

	edits := func(n int, oldText string) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = map[string]any{"oldText": oldText, "newText": "b"}
		}
		return out
	}
	if _, text, isErr = asTool(t, d, secAliceKey, alice, "edit_file", map[string]any{"path": "big", "edits": edits(1000, "a"), "dryRun": true}); !isErr || !strings.Contains(text, "more than the 256 allowed") {
		t.Errorf("1,000 edits: isError %v %.200q", isErr, text)
	}
	// 256 one-character edits of a 33 MB file: done, in the sandbox.
	_, text, isErr = asTool(t, d, secAliceKey, alice, "edit_file", map[string]any{"path": "big", "edits": edits(256, "a"), "dryRun": true})
	if isErr || !strings.HasPrefix(text, "```diff\nIndex: /workspace/big\n") || !strings.Contains(text, "\n+"+strings.Repeat("b", 63)+"\n") {
		t.Errorf("256 edits, dry run: isError %v %.300q", isErr, text)
	}
	_, text, isErr = asTool(t, d, secAliceKey, alice, "edit_file", map[string]any{"path": "nl", "edits": edits(1, "\n\n\nabsent"), "dryRun": true})
	if !isErr || !strings.Contains(text, "Could not find exact match for edit:") {
		t.Errorf("non-matching edit of 33 MB of newlines: isError %v %.200q", isErr, text)
	}

	used := cpuOf(t, pid) - cpu0
	hwm, _ := memoryOf(t, pid)
	t.Logf("daemon: %v of CPU for the calls, peak RSS %d MiB", used, hwm>>10)
	if used > 4*time.Second {
		t.Errorf("the daemon spent %v of CPU on one user's file tool calls; the edits belong in the sandbox", used)
	}
	if hwm > 300<<10 {
		t.Errorf("daemon peak RSS %d MiB after bounded file tool calls", hwm>>10)
	}

	// Admission: twelve concurrent tool calls of one user, through the
	// sandbox API as in the review, against MAX_REQUESTS_PER_USER=4.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type answer struct {
		status     int
		retryAfter string
	}
	answers := make(chan answer, 12)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/proxy/"+alice+"/tools/run_shell_command", strings.NewReader(`{"command":"sleep 3"}`))
			req.Header.Set("Authorization", "Bearer "+secAliceKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("tool call: %v", err)
				return
			}
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	time.Sleep(time.Second) // the floods are running
	if _, text, isErr := asTool(t, d, secBobKey, bob, "run_shell_command", map[string]any{"command": "echo bob"}); isErr || text != "bob\n0" {
		t.Errorf("another user's tool call during the flood: isError %v %q", isErr, text)
	}
	wg.Wait()
	close(answers)
	ran, refused := 0, 0
	for a := range answers {
		switch a.status {
		case http.StatusOK:
			ran++
		case http.StatusTooManyRequests:
			refused++
			if n, err := strconv.Atoi(a.retryAfter); err != nil || n < 1 {
				t.Errorf("429 without a usable Retry-After: %q", a.retryAfter)
			}
		default:
			t.Errorf("flooding tool call: %d", a.status)
		}
	}
	if ran == 0 || ran > 4 || refused != 12-ran {
		t.Errorf("of 12 concurrent tool calls with MAX_REQUESTS_PER_USER=4, %d ran and %d were refused with 429", ran, refused)
	}
}
