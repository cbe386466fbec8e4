package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The doors into a sandbox: the native API, agentscope's sandbox API, the
// E2B data plane, Daytona's toolbox and the tool kit (MCP and function calling). Each works
// through the one data plane, so the same limits and the same
// confinement hold on every one of them.

const (
	doorAliceKey = "door-alice-key"
	doorBobKey   = "door-bob-key"
)

// door is one way of running `sleep <s>` in a sandbox of a user: it
// reports whether the call ran (true) or was refused by the user's
// request limit (false); anything else fails the test.
type door struct {
	name string
	// setup creates the user's sandbox and returns the call.
	setup func(t *testing.T, d *daemon, key string) func(ctx context.Context, seconds int) (ran bool, err error)
}

func doors() []door {
	return []door{
		{"v1", func(t *testing.T, d *daemon, key string) func(context.Context, int) (bool, error) {
			id := createRaw(t, d, key, map[string]any{})
			return func(ctx context.Context, s int) (bool, error) {
				status, body, hdr, err := post(ctx, d.url+"/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"sleep", fmt.Sprint(s)}},
					"Authorization", "Bearer "+key)
				return classify(status, body, hdr, err, `"exit_code":0`)
			}
		}},
		{"agentscope", func(t *testing.T, d *daemon, key string) func(context.Context, int) (bool, error) {
			status, body := asCall(t, d, "create", key, map[string]any{"sandbox_type": "base"})
			id, _ := body["data"].(string)
			if status != 200 || id == "" {
				t.Fatalf("agentscope create: %d %v", status, body)
			}
			t.Cleanup(func() { asCall(t, d, "release", key, map[string]any{"identity": id}) })
			return func(ctx context.Context, s int) (bool, error) {
				status, body, hdr, err := post(ctx, d.url+"/proxy/"+id+"/tools/run_shell_command", map[string]any{"command": fmt.Sprintf("sleep %d", s)},
					"Authorization", "Bearer "+key)
				return classify(status, body, hdr, err, `"returncode"`)
			}
		}},
		{"e2b", func(t *testing.T, d *daemon, key string) func(context.Context, int) (bool, error) {
			status, data := d.call(t, "POST", "/sandboxes", "", map[string]any{"templateID": "base", "timeout": 600}, "X-API-Key", key)
			var sb struct{ SandboxID, EnvdAccessToken string }
			if err := json.Unmarshal(data, &sb); status != 201 || err != nil || sb.EnvdAccessToken == "" {
				t.Fatalf("e2b create: %d %s", status, data)
			}
			t.Cleanup(func() { d.call(t, "DELETE", "/sandboxes/"+sb.SandboxID, "", nil, "X-API-Key", key) })
			return func(ctx context.Context, s int) (bool, error) {
				// A Connect server stream, as the SDKs start commands.
				msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "sleep", "args": []string{fmt.Sprint(s)}}})
				var env bytes.Buffer
				env.WriteByte(0)
				_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
				env.Write(msg)
				req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/process.Process/Start", &env)
				req.Header.Set("Content-Type", "application/connect+json")
				req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
				req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return false, err
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return classify(resp.StatusCode, body, resp.Header, nil, `"exited":true`)
			}
		}},
		{"daytona", func(t *testing.T, d *daemon, key string) func(context.Context, int) (bool, error) {
			status, data := d.call(t, "POST", "/api/sandbox", "", map[string]any{"snapshot": "base"}, "Authorization", "Bearer "+key)
			var sb struct{ ID string }
			if err := json.Unmarshal(data, &sb); status != 200 || err != nil || sb.ID == "" {
				t.Fatalf("daytona create: %d %s", status, data)
			}
			t.Cleanup(func() { d.call(t, "DELETE", "/api/sandbox/"+sb.ID, "", nil, "Authorization", "Bearer "+key) })
			return func(ctx context.Context, s int) (bool, error) {
				status, body, hdr, err := post(ctx, d.url+"/api/toolbox/"+sb.ID+"/process/execute", map[string]any{"command": fmt.Sprintf("sleep %d", s)},
					"Authorization", "Bearer "+key)
				return classify(status, body, hdr, err, `"exitCode":0`)
			}
		}},
		{"function-calling", func(t *testing.T, d *daemon, key string) func(context.Context, int) (bool, error) {
			id := createRaw(t, d, key, map[string]any{})
			return func(ctx context.Context, s int) (bool, error) {
				// The tool kit calls the API with the caller's key: a
				// refusal is a tool error that says so.
				status, body, _, err := post(ctx, d.url+"/v1/sandboxes/"+id+"/tools/shell_exec", map[string]any{"command": fmt.Sprintf("sleep %d", s)},
					"Authorization", "Bearer "+key)
				if err != nil || status != 200 {
					return false, fmt.Errorf("tool call: %d %v %.300s", status, err, body)
				}
				if bytes.Contains(body, []byte("quota_exceeded")) || bytes.Contains(body, []byte("MAX_REQUESTS_PER_USER")) {
					return false, nil
				}
				if bytes.Contains(body, []byte(`"is_error":true`)) || bytes.Contains(body, []byte(`"isError":true`)) {
					return false, fmt.Errorf("tool error: %.300s", body)
				}
				return true, nil
			}
		}},
	}
}

// post sends a JSON body with headers and returns status, body and
// headers.
func post(ctx context.Context, url string, body any, hdr ...string) (int, []byte, http.Header, error) {
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(data))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

// classify maps a door's HTTP answer: 200 with ok in the body ran, 429
// with a Retry-After was refused, anything else is an error.
func classify(status int, body []byte, hdr http.Header, err error, ok string) (bool, error) {
	switch {
	case err != nil:
		return false, err
	case status == http.StatusOK && bytes.Contains(body, []byte(ok)):
		return true, nil
	case status == http.StatusTooManyRequests:
		if hdr.Get("Retry-After") == "" {
			return false, fmt.Errorf("429 without Retry-After: %.200s", body)
		}
		return false, nil
	}
	return false, fmt.Errorf("status %d: %.300s", status, body)
}

// TestSameAdmissionOnEveryDoor: with MAX_REQUESTS_PER_USER=4, twenty
// concurrent commands of one user through each door get refusals (at
// most four run at once), while another user's command through the same
// door runs.
func TestSameAdmissionOnEveryDoor(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+doorAliceKey+":alice,"+doorBobKey+":bob", "MAX_REQUESTS_PER_USER=4", "MAX_CONNECTIONS=512")
	for _, dr := range doors() {
		t.Run(dr.name, func(t *testing.T) {
			alice := dr.setup(t, d, doorAliceKey)
			bob := dr.setup(t, d, doorBobKey)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var mu sync.Mutex
			ran, refused := 0, 0
			var wg sync.WaitGroup
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := alice(ctx, 3)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("alice: %v", err)
					case ok:
						ran++
					default:
						refused++
					}
				}()
			}
			time.Sleep(time.Second) // alice's commands are running
			if ok, err := bob(ctx, 0); !ok || err != nil {
				t.Errorf("bob through %s while alice is at her limit: ran %v, %v", dr.name, ok, err)
			}
			wg.Wait()
			t.Logf("%s: %d of alice's 20 ran, %d refused", dr.name, ran, refused)
			if ran == 0 || ran > 4 || refused == 0 || ran+refused != 20 {
				t.Errorf("%s: of 20 concurrent commands with MAX_REQUESTS_PER_USER=4, %d ran and %d were refused", dr.name, ran, refused)
			}
		})
	}
}

// swapScript swaps /workspace/d between a real directory (holding a
// canary "INSIDE") and a symbolic link to a directory outside the
// workspace (holding a canary "CANARY") in a tight loop for the given
// seconds: what a hostile sandbox does to a client that checks a path and
// then acts on it.
const swapScript = `
import ctypes, os, sys, time
os.makedirs('/workspace/d', exist_ok=True)
open('/workspace/d/canary', 'w').write('INSIDE')
os.makedirs('/home/user/outside', exist_ok=True)
open('/home/user/outside/canary', 'w').write('CANARY')
if not os.path.islink('/workspace/lnk'):
    os.symlink('/home/user/outside', '/workspace/lnk')
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
print('swapping', flush=True)
end, n = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    # /workspace/d is, atomically, the directory or the link out.
    if libc.renameat2(AT_FDCWD, b'/workspace/d', AT_FDCWD, b'/workspace/lnk', RENAME_EXCHANGE) != 0:
        sys.exit('renameat2: errno %d' % ctypes.get_errno())
    n += 1
if os.path.islink('/workspace/d'):
    libc.renameat2(AT_FDCWD, b'/workspace/d', AT_FDCWD, b'/workspace/lnk', RENAME_EXCHANGE)
print(n)
`

// fileDoor reads and writes a file at a /workspace-relative path through
// one door's confined file API.
type fileDoor struct {
	name  string
	read  func(ctx context.Context, rel string) (string, error) // content, or an error (refused, missing)
	write func(ctx context.Context, rel, content string) error
}

// TestSecurityConfinementRaceOnEveryDoor: sandbox code swaps a directory
// of /workspace for a link to a directory outside it in a tight loop
// while a client reads and writes through it 1,000 times on every door
// that confines paths to /workspace; nothing outside is ever read or
// written.
func TestSecurityConfinementRaceOnEveryDoor(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+doorAliceKey+":alice", "MAX_REQUESTS_PER_USER=64", "MAX_CONNECTIONS=512")
	key := doorAliceKey
	auth := func(req *http.Request) { req.Header.Set("Authorization", "Bearer "+key) }
	do := func(ctx context.Context, method, url string, body io.Reader, hdr ...string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, body)
		if err != nil {
			return 0, nil, err
		}
		auth(req)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	// Native and tool-kit doors share one sandbox, agentscope's another.
	native := createRaw(t, d, key, map[string]any{})
	status, body := asCall(t, d, "create", key, map[string]any{"sandbox_type": "filesystem"})
	as, _ := body["data"].(string)
	if status != 200 || as == "" {
		t.Fatalf("agentscope create: %d %v", status, body)
	}
	t.Cleanup(func() { asCall(t, d, "release", key, map[string]any{"identity": as}) })
	toolText := func(b []byte) (string, bool) {
		var res struct {
			Content []struct{ Text string }
			IsError bool `json:"isError"`
			IsErr2  bool `json:"is_error"`
		}
		_ = json.Unmarshal(b, &res)
		var s strings.Builder
		for _, c := range res.Content {
			s.WriteString(c.Text)
		}
		return s.String(), res.IsError || res.IsErr2
	}
	fileDoors := []struct {
		sandbox string
		fileDoor
	}{
		{native, fileDoor{"v1 files (Agentbox-Root)",
			func(ctx context.Context, rel string) (string, error) {
				st, b, err := do(ctx, "GET", d.url+"/v1/sandboxes/"+native+"/files?path="+rel, nil, "Agentbox-Root", "/workspace")
				if err == nil && st != 200 {
					err = fmt.Errorf("%d", st)
				}
				return string(b), err
			},
			func(ctx context.Context, rel, content string) error {
				st, _, err := do(ctx, "PUT", d.url+"/v1/sandboxes/"+native+"/files?path="+rel, strings.NewReader(content), "Agentbox-Root", "/workspace")
				if err == nil && st != 201 {
					err = fmt.Errorf("%d", st)
				}
				return err
			}}},
		{native, fileDoor{"tool kit (function calling)",
			func(ctx context.Context, rel string) (string, error) {
				st, b, _, err := post(ctx, d.url+"/v1/sandboxes/"+native+"/tools/file_read", map[string]any{"path": rel}, "Authorization", "Bearer "+key)
				text, isErr := toolText(b)
				if err == nil && (st != 200 || isErr) {
					err = fmt.Errorf("%d %.100s", st, text)
				}
				return text, err
			},
			func(ctx context.Context, rel, content string) error {
				st, b, _, err := post(ctx, d.url+"/v1/sandboxes/"+native+"/tools/file_write", map[string]any{"path": rel, "content": content}, "Authorization", "Bearer "+key)
				if text, isErr := toolText(b); err == nil && (st != 200 || isErr) {
					err = fmt.Errorf("%d %.100s", st, text)
				}
				return err
			}}},
		{as, fileDoor{"agentscope workspace routes",
			func(ctx context.Context, rel string) (string, error) {
				st, b, err := do(ctx, "GET", d.url+"/proxy/"+as+"/workspace/file?path="+rel, nil)
				if err == nil && st != 200 {
					err = fmt.Errorf("%d", st)
				}
				return string(b), err
			},
			func(ctx context.Context, rel, content string) error {
				st, _, err := do(ctx, "PUT", d.url+"/proxy/"+as+"/workspace/file?path="+rel, strings.NewReader(content))
				if err == nil && st != 200 {
					err = fmt.Errorf("%d", st)
				}
				return err
			}}},
		{as, fileDoor{"agentscope filesystem tools",
			func(ctx context.Context, rel string) (string, error) {
				st, b, _, err := post(ctx, d.url+"/proxy/"+as+"/tools/read_file", map[string]any{"path": rel}, "Authorization", "Bearer "+key)
				text, isErr := toolText(b)
				if err == nil && (st != 200 || isErr) {
					err = fmt.Errorf("%d %.100s", st, text)
				}
				return text, err
			},
			func(ctx context.Context, rel, content string) error {
				st, b, _, err := post(ctx, d.url+"/proxy/"+as+"/tools/write_file", map[string]any{"path": rel, "content": content}, "Authorization", "Bearer "+key)
				if text, isErr := toolText(b); err == nil && (st != 200 || isErr) {
					err = fmt.Errorf("%d %.100s", st, text)
				}
				return err
			}}},
	}

	swap := func(sandboxID string, seconds int) (stop func() string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+60)*time.Second)
		done := make(chan string, 1)
		go func() {
			st, b, _, err := post(ctx, d.url+"/v1/sandboxes/"+sandboxID+"/exec",
				map[string]any{"cmd": []string{"python3", "-c", swapScript, fmt.Sprint(seconds)}, "timeout": seconds + 30}, "Authorization", "Bearer "+key)
			done <- fmt.Sprintf("%d %v %.300s", st, err, b)
		}()
		return func() string { defer cancel(); return <-done }
	}
	for _, fd := range fileDoors {
		t.Run(fd.name, func(t *testing.T) {
			sb := fd.sandbox // agentscope's identity is the sandbox's id (no CONTAINER_PREFIX_KEY)
			const seconds = 40
			stop := swap(sb, seconds)
			// Wait until the swapper runs.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+30)*time.Second)
			defer cancel()
			for i := 0; ; i++ {
				if c, err := fd.read(ctx, "d/canary"); err == nil && c == "INSIDE" || i > 100 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			reads, leaked, writes := 0, 0, 0
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 250; i++ {
						if i%2 == 0 {
							c, err := fd.read(ctx, "d/canary")
							mu.Lock()
							if err == nil {
								reads++
							}
							if strings.Contains(c, "CANARY") {
								leaked++
							}
							mu.Unlock()
						} else if err := fd.write(ctx, fmt.Sprintf("d/new-%d-%d", w, i), "x"); err == nil {
							mu.Lock()
							writes++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			out := stop()
			t.Logf("%s: 500 reads (%d succeeded), 500 writes (%d succeeded) during the swaps; swapper: %s", fd.name, reads, writes, out)
			if leaked > 0 {
				t.Errorf("%s read the canary outside /workspace %d times", fd.name, leaked)
			}
			if reads == 0 || writes == 0 {
				t.Errorf("%s: %d reads and %d writes succeeded: the race never ran inside", fd.name, reads, writes)
			}
			// Nothing was written outside.
			st, b, _, err := post(context.Background(), d.url+"/v1/sandboxes/"+sb+"/exec",
				map[string]any{"cmd": []string{"sh", "-c", "ls -A /home/user/outside; cat /home/user/outside/canary"}}, "Authorization", "Bearer "+key)
			if err != nil || st != 200 || !strings.Contains(string(b), `"stdout":"canary\nCANARY"`) {
				t.Errorf("%s: outside /workspace after the race: %d %v %.300s", fd.name, st, err, b)
			}
		})
	}
}

// BenchmarkDoorExec measures the round trip of `true` through each door of
// a daemon (AGENTBOX_BIN): the native API, agentscope's tool route, E2B's
// data plane (a Connect stream) and the tool kit's function calling. Run
// it against two builds to compare (docs/benchmarks.md).
func BenchmarkDoorExec(b *testing.B) {
	url := startBenchDaemon(b, "API_KEYS="+doorAliceKey+":alice")
	hdr := []string{"Authorization", "Bearer " + doorAliceKey}
	ctx := context.Background()
	mustPost := func(path string, body any, h ...string) []byte {
		st, out, _, err := post(ctx, url+path, body, h...)
		if err != nil || st/100 != 2 {
			b.Fatalf("POST %s: %d %v %s", path, st, err, out)
		}
		return out
	}
	var sb struct{ ID string }
	_ = json.Unmarshal(mustPost("/v1/sandboxes", map[string]any{}, hdr...), &sb)
	var as struct{ Data string }
	_ = json.Unmarshal(mustPost("/create", map[string]any{"sandbox_type": "base"}, hdr...), &as)
	var e2 struct{ SandboxID, EnvdAccessToken string }
	_ = json.Unmarshal(mustPost("/sandboxes", map[string]any{"templateID": "base"}, "X-API-Key", doorAliceKey), &e2)
	envd := func() error {
		msg := []byte(`{"process":{"cmd":"true"}}`)
		var env bytes.Buffer
		env.WriteByte(0)
		_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
		env.Write(msg)
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/process.Process/Start", &env)
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("E2b-Sandbox-Id", e2.SandboxID)
		req.Header.Set("X-Access-Token", e2.EnvdAccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if !bytes.Contains(out, []byte(`"exited":true`)) {
			return fmt.Errorf("envd: %d %s", resp.StatusCode, out)
		}
		return nil
	}
	call := func(path string, body any, want string, h ...string) func() error {
		return func() error {
			st, out, _, err := post(ctx, url+path, body, h...)
			if err != nil || st != 200 || !bytes.Contains(out, []byte(want)) {
				return fmt.Errorf("POST %s: %d %v %.200s", path, st, err, out)
			}
			return nil
		}
	}
	for _, door := range []struct {
		name string
		op   func() error
	}{
		{"v1", call("/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}, `"exit_code":0`, hdr...)},
		{"agentscope", call("/proxy/"+as.Data+"/tools/run_shell_command", map[string]any{"command": "true"}, `"returncode"`, hdr...)},
		{"e2b", envd},
		{"function-calling", call("/v1/sandboxes/"+sb.ID+"/tools/shell_exec", map[string]any{"command": "true"}, `"content"`, hdr...)},
	} {
		b.Run(door.name, func(b *testing.B) {
			var samples []time.Duration
			for i := 0; i < 3; i++ { // warm
				if err := door.op(); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				start := time.Now()
				if err := door.op(); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
			slices.Sort(samples)
			at := func(q float64) float64 {
				return float64(samples[min(int(q*float64(len(samples))), len(samples)-1)].Microseconds()) / 1000
			}
			b.ReportMetric(at(0.5), "p50-ms")
			b.ReportMetric(at(0.99), "p99-ms")
		})
	}
}
