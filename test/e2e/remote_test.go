package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// remoteProviderKey is the operator's key at the provider daemon (an
// E2B-style key, as the SDKs want one).
const remoteProviderKey = "e2b_0123456789abcdef0123456789abcdef"

// startProvider starts an agentbox daemon playing the remote E2B
// provider, on loopback with a data dir and port of its own.
func startProvider(t *testing.T, settings ...string) *daemon {
	t.Helper()
	return startDaemon(t, append([]string{"NETWORK=off", "API_KEYS=" + remoteProviderKey + ":operator", "MAX_SANDBOXES_PER_USER=0"}, settings...)...)
}

// remoteSettings are the front daemon's settings for provider p.
func remoteSettings(p *daemon, more ...string) []string {
	return append([]string{"NETWORK=off", "API_KEYS=k1:alice,k2:bob", "SANDBOX_PROVIDER=e2b", "E2B_API_KEY=" + remoteProviderKey,
		"E2B_API_URL=" + p.url, "E2B_SANDBOX_URL=" + p.url, "E2B_DOMAIN=localhost"}, more...)
}

// providerSandboxes lists the provider's sandboxes of the operator's key
// through its E2B API: their E2B IDs and metadata.
func providerSandboxes(t *testing.T, p *daemon) map[string]map[string]string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.url+"/v2/sandboxes?state=running,paused", nil)
	req.Header.Set("X-API-Key", remoteProviderKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("provider list: %d %s", resp.StatusCode, body)
	}
	var list []struct {
		SandboxID string            `json:"sandboxID"`
		Metadata  map[string]string `json:"metadata"`
		State     string            `json:"state"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, s := range list {
		s.Metadata["state"] = s.State
		out[s.SandboxID] = s.Metadata
	}
	return out
}

// remoteOf returns the provider's sandbox carrying agentbox id.
func remoteOf(t *testing.T, p *daemon, id string) (string, map[string]string) {
	t.Helper()
	for rid, md := range providerSandboxes(t, p) {
		if md["agentbox-sandbox"] == id {
			return rid, md
		}
	}
	return "", nil
}

func TestRemoteE2BProvider(t *testing.T) {
	prov := startProvider(t)
	front := startDaemon(t, remoteSettings(prov)...)
	c := front.sdk(t, "k1")
	ctx := context.Background()

	local, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Template: "e2b:base", Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Provider != "e2b" || sb.Template != "e2b:base" || local.Provider != "" {
		t.Fatalf("provider: remote %q (template %q), local %q", sb.Provider, sb.Template, local.Provider)
	}
	rid, md := remoteOf(t, prov, sb.ID)
	if rid == "" || md["agentbox-node"] == "" {
		t.Fatalf("no sandbox at the provider labelled %s: %v", sb.ID, providerSandboxes(t, prov))
	}
	if len(providerSandboxes(t, prov)) != 1 {
		t.Fatalf("the local sandbox reached the provider: %v", providerSandboxes(t, prov))
	}

	t.Run("exec", func(t *testing.T) {
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo $GREETING; echo err >&2; exit 3"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Stdout != "hi\n" || r.Stderr != "err\n" || r.ExitCode != 3 {
			t.Fatalf("exec: %+v", r)
		}
	})
	t.Run("files", func(t *testing.T) {
		data := bytes.Repeat([]byte("remote!"), 100000)
		if _, err := c.Upload(ctx, sb.ID, "/tmp/f.bin", bytes.NewReader(data), int64(len(data)), nil); err != nil {
			t.Fatal(err)
		}
		rc, _, err := c.Download(ctx, sb.ID, "/tmp/f.bin")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("download: %d bytes, want %d", len(got), len(data))
		}
		entries, err := c.ListFiles(ctx, sb.ID, "/tmp", 1)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range entries {
			found = found || e.Name == "f.bin"
		}
		if !found {
			t.Fatalf("list /tmp: %+v", entries)
		}
		// The file is at the provider, not in the local sandbox.
		if _, err := c.Stat(ctx, local.ID, "/tmp/f.bin"); err == nil {
			t.Fatal("the remote file is in the local sandbox")
		}
	})
	t.Run("code", func(t *testing.T) {
		cc, err := c.CreateCodeContext(ctx, sb.ID, "python", "")
		if err != nil {
			t.Fatal(err)
		}
		if r, err := c.RunCode(ctx, sb.ID, client.CodeRequest{ContextID: cc.ID, Code: "x = 41\nprint('set')"}); err != nil || r.Error != nil || r.Stdout != "set\n" {
			t.Fatalf("run code: %+v %v", r, err)
		}
		r, err := c.RunCode(ctx, sb.ID, client.CodeRequest{ContextID: cc.ID, Code: "x + 1"})
		if err != nil || len(r.Results) == 0 || r.Results[0].Text != "42" {
			t.Fatalf("state kept: %+v %v", r, err)
		}
	})
	t.Run("e2b-door", func(t *testing.T) {
		// A tenant's E2B client reaches the remote sandbox through this
		// daemon's own E2B data plane, with this daemon's token.
		body := `{"process":{"cmd":"/bin/sh","args":["-c","echo via-door"]}}`
		req, _ := http.NewRequest(http.MethodPost, front.url+"/process.Process/Start", connectFrame(body))
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("E2b-Sandbox-Id", sb.ID)
		req.Header.Set("X-Access-Token", sb.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), "dmlhLWRvb3IK") { // base64 "via-door\n"
			t.Fatalf("E2B door: %d %q", resp.StatusCode, out)
		}
		// The code interpreter's port goes to the provider's.
		req, _ = http.NewRequest(http.MethodPost, front.url+"/execute", strings.NewReader(`{"code":"6*7"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("E2b-Sandbox-Id", sb.ID)
		req.Header.Set("E2b-Sandbox-Port", "49999")
		req.Header.Set("X-Access-Token", sb.AccessToken)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"text":"42"`) {
			t.Fatalf("E2B door, code port: %d %q", resp.StatusCode, out)
		}
	})
	t.Run("provider-key-hidden", func(t *testing.T) {
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'"}})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := c.Get(ctx, sb.ID)
		raw, _ := json.Marshal(got)
		for what, s := range map[string]string{"sandbox env": r.Stdout, "API answer": string(raw)} {
			if strings.Contains(s, remoteProviderKey) {
				t.Fatalf("the provider key is in the %s", what)
			}
		}
	})
	t.Run("pty", func(t *testing.T) {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		pty, err := c.PTY(pctx, sb.ID, client.PTYOptions{Cols: 100, Rows: 30})
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
		if code, err := pty.Wait(); err != nil || code != 5 || !strings.Contains(out.String(), "40 120") {
			t.Fatalf("pty: exit %d %v, output %q", code, err, out.String())
		}
	})
	t.Run("preview", func(t *testing.T) {
		server, _ := os.ReadFile("testdata/preview_server.py")
		if _, err := c.Upload(ctx, sb.ID, "/tmp/server.py", bytes.NewReader(server), int64(len(server)), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "nohup python3 /tmp/server.py 8080 >/tmp/server.log 2>&1 &"}}); err != nil {
			t.Fatal(err)
		}
		var status int
		var data []byte
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if status, data = front.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/ports/8080/hello?x=1", "k1", nil); status == http.StatusOK {
				break
			}
		}
		if status != http.StatusOK || !strings.Contains(string(data), "path=/hello?x=1") {
			t.Fatalf("preview of the remote sandbox: %d %s", status, data)
		}
		// Whole words: the API key "k1" is short enough to turn up inside
		// the sandbox id the server echoes (seen: "b9vk1qv9...").
		for _, secret := range []string{"k1", sb.AccessToken, remoteProviderKey} {
			if regexp.MustCompile(`\b` + regexp.QuoteMeta(secret) + `\b`).Match(data) {
				t.Fatalf("a credential reached the sandbox's server: %s", data)
			}
		}
	})
	t.Run("pause", func(t *testing.T) {
		if _, err := c.Pause(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, md := remoteOf(t, prov, sb.ID); md["state"] != "paused" {
			t.Fatalf("provider state after pause: %v", md)
		}
		if _, err := c.Resume(ctx, sb.ID, 0); err != nil {
			t.Fatal(err)
		}
		if _, md := remoteOf(t, prov, sb.ID); md["state"] != "running" {
			t.Fatalf("provider state after resume: %v", md)
		}
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/tmp/f.bin"}})
		if err != nil || !strings.HasPrefix(r.Stdout, "remote!") {
			t.Fatalf("after resume: %v", err)
		}
	})
	t.Run("list", func(t *testing.T) {
		page, err := c.List(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		providers := map[string]string{}
		for _, s := range page.Sandboxes {
			providers[s.ID] = s.Provider
		}
		if p, ok := providers[sb.ID]; !ok || p != "e2b" || providers[local.ID] != "" {
			t.Fatalf("list: %v", providers)
		}
		// Another tenant sees neither.
		if p, err := front.sdk(t, "k2").List(ctx, client.ListOptions{}); err != nil || len(p.Sandboxes) != 0 {
			t.Fatalf("bob's list: %+v %v", p, err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if rid, _ := remoteOf(t, prov, sb.ID); rid != "" {
			t.Fatalf("the provider still has %s", rid)
		}
		if err := c.Delete(ctx, local.ID); err != nil {
			t.Fatal(err)
		}
	})
}

// connectFrame is one enveloped Connect message with JSON body msg.
func connectFrame(msg string) io.Reader {
	b := make([]byte, 5+len(msg))
	b[1], b[2], b[3], b[4] = byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg))
	copy(b[5:], msg)
	return bytes.NewReader(b)
}

// createAtProvider creates a sandbox at the provider directly with
// metadata md, as a daemon that crashed before recording it would have.
func createAtProvider(t *testing.T, p *daemon, md map[string]string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"templateID": "base", "timeout": 300, "metadata": md})
	req, _ := http.NewRequest(http.MethodPost, p.url+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-Key", remoteProviderKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create at the provider: %d %v", resp.StatusCode, err)
	}
	return out.SandboxID
}

func TestRemoteOverflowPlacement(t *testing.T) {
	prov := startProvider(t)
	front := startDaemon(t, remoteSettings(prov, "NODE_MAX_SANDBOXES=1", `PROVIDER_ROUTES={"base":"overflow:e2b:base","gpu":"e2b:base"}`, "PROVIDER_MAX_PER_USER=2")...)
	c := front.sdk(t, "k1")
	ctx := context.Background()
	first, err := c.Create(ctx, client.CreateRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Provider != "" {
		t.Fatalf("first sandbox went to %q with room on the host", first.Provider)
	}
	// The host is full (NODE_MAX_SANDBOXES=1): base overflows.
	second, err := c.Create(ctx, client.CreateRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if second.Provider != "e2b" {
		t.Fatalf("second sandbox: provider %q, want e2b (overflow)", second.Provider)
	}
	if rid, _ := remoteOf(t, prov, second.ID); rid == "" {
		t.Fatal("the overflowed sandbox is not at the provider")
	}
	// A template without an overflow route is refused as before.
	if _, err := c.Create(ctx, client.CreateRequest{Template: "host"}); err == nil || !strings.Contains(err.Error(), "NODE_MAX_SANDBOXES") {
		t.Fatalf("host template on a full host: %v", err)
	}
	// An always-route goes to the provider, full host or not.
	third, err := c.Create(ctx, client.CreateRequest{Template: "gpu"})
	if err != nil || third.Provider != "e2b" {
		t.Fatalf("always-routed template: %+v %v", third, err)
	}
	// PROVIDER_MAX_PER_USER=2: alice has two remote sandboxes.
	if _, err := c.Create(ctx, client.CreateRequest{Template: "e2b:base"}); err == nil || !strings.Contains(err.Error(), "PROVIDER_MAX_PER_USER") {
		t.Fatalf("third remote sandbox: %v", err)
	}
	// Bob has his own allowance.
	bob, err := front.sdk(t, "k2").Create(ctx, client.CreateRequest{Template: "e2b:base"})
	if err != nil || bob.Provider != "e2b" {
		t.Fatalf("bob's remote sandbox: %+v %v", bob, err)
	}
	if n := len(providerSandboxes(t, prov)); n != 3 {
		t.Fatalf("provider holds %d sandboxes, want 3", n)
	}
	// AUTO_CLEANUP's shutdown deletes them at the provider too.
	front.stop()
	if at := providerSandboxes(t, prov); len(at) != 0 {
		t.Fatalf("the provider holds %v after the front's shutdown", at)
	}
}

func TestRemoteProviderDown(t *testing.T) {
	prov := startProvider(t)
	front := startDaemon(t, remoteSettings(prov)...)
	c := front.sdk(t, "k1")
	ctx := context.Background()
	local, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	remote, err := c.Create(ctx, client.CreateRequest{Template: "e2b:base"})
	if err != nil {
		t.Fatal(err)
	}
	prov.stop()
	_, err = c.Create(ctx, client.CreateRequest{Template: "e2b:base"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || !strings.Contains(apiErr.Message, "provider e2b does not answer") {
		t.Fatalf("create with the provider down: %v", err)
	}
	if strings.Contains(err.Error(), remoteProviderKey) {
		t.Fatal("the error shows the provider key")
	}
	// The remote sandbox's calls fail plainly; local sandboxes are as they were.
	if _, err := c.Exec(ctx, remote.ID, client.ExecRequest{Cmd: []string{"true"}}); err == nil {
		t.Fatal("exec in a sandbox of a provider that is down succeeded")
	}
	if r, err := c.Exec(ctx, local.ID, client.ExecRequest{Cmd: []string{"echo", "ok"}}); err != nil || r.Stdout != "ok\n" {
		t.Fatalf("local exec with the provider down: %+v %v", r, err)
	}
	again, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("local create with the provider down: %v", err)
	}
	// Deleting the remote sandbox works (the sweep finishes it at the
	// provider once it answers).
	if err := c.Delete(ctx, remote.ID); err != nil {
		t.Fatalf("delete with the provider down: %v", err)
	}
	for _, id := range []string{local.ID, again.ID} {
		if err := c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRemoteRestartAndSweep(t *testing.T) {
	prov := startProvider(t)
	front := startDaemon(t, remoteSettings(prov, "AUTO_CLEANUP=false")...)
	c := front.sdk(t, "k1")
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Template: "e2b:base"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo kept > /tmp/state"}}); err != nil {
		t.Fatal(err)
	}
	_, md := remoteOf(t, prov, sb.ID)
	node := md["agentbox-node"]

	// A daemon restart re-lists the remote sandbox, still working.
	front.stop()
	front.start()
	c = front.sdk(t, "k1")
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.Provider != "e2b" || got.State != "running" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/tmp/state"}}); err != nil || r.Stdout != "kept\n" {
		t.Fatalf("exec after restart: %+v %v", r, err)
	}

	// A crash between the provider's create and the daemon's record left
	// a labelled sandbox at the provider: the next start deletes it. A
	// sandbox of another daemon (another node label) stays.
	front.kill()
	orphan := createAtProvider(t, prov, map[string]string{"agentbox-node": node, "agentbox-sandbox": "crashedcreate000000"})
	other := createAtProvider(t, prov, map[string]string{"agentbox-node": "some-other-daemon", "agentbox-sandbox": "x"})
	front.start()
	c = front.sdk(t, "k1")
	at := providerSandboxes(t, prov)
	if _, ok := at[orphan]; ok {
		t.Fatalf("the orphan %s is still at the provider after the start: %v", orphan, at)
	}
	if _, ok := at[other]; !ok {
		t.Fatal("the sweep deleted another daemon's sandbox")
	}
	if _, err := c.Get(ctx, sb.ID); err != nil {
		t.Fatalf("the recorded sandbox after the sweep: %v", err)
	}

	// A remote sandbox the provider lost is dropped at the next start.
	front.stop()
	rid, _ := remoteOf(t, prov, sb.ID)
	req, _ := http.NewRequest(http.MethodDelete, prov.url+"/sandboxes/"+rid, nil)
	req.Header.Set("X-API-Key", remoteProviderKey)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete at the provider: %v", err)
	}
	front.start()
	c = front.sdk(t, "k1")
	if _, err := c.Get(ctx, sb.ID); err == nil {
		t.Fatal("a sandbox the provider no longer has is still listed")
	}
}

// TestRemoteE2BSDK drives a remote sandbox with the unmodified E2B
// code-interpreter SDK against the front daemon.
func TestRemoteE2BSDK(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := waitCtx(t, 10*time.Minute)
	sdk := e2bSDK(t, ctx)
	const key = "e2b_00112233445566778899aabbccddeeff"
	for _, tc := range []struct {
		provider string
		settings func(*daemon, ...string) []string
		held     func(*testing.T, *daemon) map[string]map[string]string
	}{
		{"e2b", remoteSettings, providerSandboxes},
		{"daytona", daytonaSettings, daytonaSandboxes},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			prov := startProvider(t)
			front := startDaemon(t, tc.settings(prov, "API_KEYS="+key+":alice")...)
			bin, _ := binaries(t)
			out, err := exec.CommandContext(ctx, bin, "e2b", "env", "--url", front.url, "--api-key", key).Output()
			if err != nil {
				t.Fatalf("agentbox e2b env: %v", err)
			}
			env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NODE_PATH=" + filepath.Join(sdk, "node_modules"), "TEMPLATE=" + tc.provider + ":base"}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
				env = append(env, k+"="+strings.Trim(v, "'"))
			}
			root, err := testutil.ModuleRoot()
			if err != nil {
				t.Fatal(err)
			}
			node := exec.CommandContext(ctx, "node", filepath.Join(root, "test", "e2e", "testdata", "e2b_remote.cjs"))
			node.Env = env
			var stderr bytes.Buffer
			node.Stderr = &stderr
			res, err := node.Output()
			if err != nil {
				t.Fatalf("the SDK script: %v\n%s", err, stderr.String())
			}
			r := mustJSON(t, res)
			streamed, _ := r["streamed"].(map[string]any)
			if r["stdout"] != "sdk-42\n" || r["file"] != "hello from the sdk" || r["state"] != "42\n" ||
				streamed["stdout"] != "out\n" || streamed["stderr"] != "err\n" || r["pty"] != true || r["ptyExit"] != float64(0) {
				t.Fatalf("SDK results: %s", res)
			}
			// Results (the value of the last expression) are E2B's; Daytona's
			// interpreter streams output only.
			if tc.provider == "e2b" && r["code"] != "42" {
				t.Fatalf("SDK result of runCode: %s", res)
			}
			if ids, _ := r["listed"].([]any); len(ids) != 1 || ids[0] != r["id"] {
				t.Fatalf("SDK list: %s", res)
			}
			if n := len(tc.held(t, prov)); n != 0 {
				t.Fatalf("the provider holds %d sandboxes after the SDK's kill", n)
			}
		})
	}
}
