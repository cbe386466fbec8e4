package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// daytonaSettings are the front daemon's settings for a Daytona provider
// p (another agentbox daemon: its Daytona door under /api).
func daytonaSettings(p *daemon, more ...string) []string {
	return append([]string{"NETWORK=off", "API_KEYS=k1:alice,k2:bob", "SANDBOX_PROVIDER=daytona", "DAYTONA_API_KEY=" + remoteProviderKey,
		"DAYTONA_SERVER_URL=" + p.url + "/api"}, more...)
}

// daytonaCall calls the provider's Daytona API with the operator's key.
func daytonaCall(t *testing.T, p *daemon, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, p.url+"/api"+path, rd)
	req.Header.Set("Authorization", "Bearer "+remoteProviderKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// daytonaSandboxes lists the provider's sandboxes of the operator's key:
// their IDs, with their labels and "state".
func daytonaSandboxes(t *testing.T, p *daemon) map[string]map[string]string {
	t.Helper()
	status, body := daytonaCall(t, p, http.MethodGet, "/sandbox?limit=1000", nil)
	if status != http.StatusOK {
		t.Fatalf("provider list: %d %s", status, body)
	}
	var list struct {
		Items []struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, s := range list.Items {
		s.Labels["state"] = s.State
		out[s.ID] = s.Labels
	}
	return out
}

func daytonaRemoteOf(t *testing.T, p *daemon, id string) (string, map[string]string) {
	t.Helper()
	for rid, md := range daytonaSandboxes(t, p) {
		if md["agentbox-sandbox"] == id {
			return rid, md
		}
	}
	return "", nil
}

func TestRemoteDaytonaProvider(t *testing.T) {
	prov := startProvider(t)
	front := startDaemon(t, daytonaSettings(prov)...)
	c := front.sdk(t, "k1")
	ctx := context.Background()

	local, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Template: "daytona:base", Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Provider != "daytona" || sb.Template != "daytona:base" || local.Provider != "" {
		t.Fatalf("provider: remote %q (template %q), local %q", sb.Provider, sb.Template, local.Provider)
	}
	rid, md := daytonaRemoteOf(t, prov, sb.ID)
	if rid == "" || md["agentbox-node"] == "" {
		t.Fatalf("no sandbox at the provider labelled %s: %v", sb.ID, daytonaSandboxes(t, prov))
	}
	if n := len(daytonaSandboxes(t, prov)); n != 1 {
		t.Fatalf("the provider holds %d sandboxes, want 1 (the local one stays here)", n)
	}

	t.Run("exec", func(t *testing.T) {
		// A command runs as an async command of a toolbox session: stdout
		// and stderr come apart.
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo $GREETING; echo oops >&2; exit 3"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Stdout != "hi\n" || r.Stderr != "oops\n" || r.ExitCode != 3 {
			t.Fatalf("exec: %+v", r)
		}
		r, err = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"printf", "%s|", "a b", "it's"}, Cwd: "/tmp", Env: map[string]string{"X": "y z"}})
		if err != nil || r.Stdout != "a b|it's|" {
			t.Fatalf("exec with quoting: %+v %v", r, err)
		}
		r, err = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "pwd; echo \"$X\""}, Cwd: "/tmp", Env: map[string]string{"X": "y 'z"}})
		if err != nil || r.Stdout != "/tmp\ny 'z\n" {
			t.Fatalf("exec with cwd and env: %+v %v", r, err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		// The session is deleted at the timeout (the command with it): the
		// marker file the command would write later never appears.
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "sleep 3; touch /tmp/late"}, Timeout: time.Second})
		if err != nil || !r.TimedOut {
			t.Fatalf("exec past its timeout: %+v %v", r, err)
		}
		time.Sleep(3 * time.Second)
		if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"test", "-e", "/tmp/late"}}); err != nil || r.ExitCode == 0 {
			t.Fatalf("the timed-out command ran on: %+v %v", r, err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		// The command waits (bounded) for a file only the test makes after
		// it saw the first line: output that came only at the end fails.
		script := "echo first; i=0; while [ ! -e /tmp/go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; [ -e /tmp/go ] || exit 7; echo second"
		st, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var out strings.Builder
		touched := false
		for ev, err := range st.Events() {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == "stdout" {
				out.WriteString(ev.Data)
			}
			if !touched && strings.Contains(out.String(), "first\n") {
				touched = true
				if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"touch", "/tmp/go"}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if x, ok := st.Exit(); !ok || x.ExitCode != 0 || out.String() != "first\nsecond\n" {
			t.Fatalf("stream: %q, exit %+v", out.String(), x)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		in := "hello\nworld 'quoted' \\ done\n" + strings.Repeat("x", 100000) + "\nno newline at the end"
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat"}, Stdin: in})
		if err != nil || r.ExitCode != 0 || r.Stdout != in {
			t.Fatalf("cat of stdin: %d bytes of %d, exit %d, err %v", len(r.Stdout), len(in), r.ExitCode, err)
		}
		r, err = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "read a; echo got-$a"}, Stdin: "line\n"})
		if err != nil || r.Stdout != "got-line\n" {
			t.Fatalf("read of stdin: %+v %v", r, err)
		}
	})
	t.Run("pty", func(t *testing.T) {
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
	})
	t.Run("files", func(t *testing.T) {
		data := bytes.Repeat([]byte("daytona!"), 100000)
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
		if _, err := c.Stat(ctx, local.ID, "/tmp/f.bin"); err == nil {
			t.Fatal("the remote file is in the local sandbox")
		}
		if e, err := c.Stat(ctx, sb.ID, "/tmp/f.bin"); err != nil || e.Size != int64(len(data)) {
			t.Fatalf("stat: %+v %v", e, err)
		}
		if _, err := c.MakeDir(ctx, sb.ID, "/tmp/d"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Move(ctx, sb.ID, "/tmp/f.bin", "/tmp/d/g.bin"); err != nil {
			t.Fatal(err)
		}
		entries, err := c.ListFiles(ctx, sb.ID, "/tmp/d", 1)
		if err != nil || len(entries) != 1 || entries[0].Name != "g.bin" || entries[0].Path != "/tmp/d/g.bin" {
			t.Fatalf("list /tmp/d: %+v %v", entries, err)
		}
		if err := c.Remove(ctx, sb.ID, "/tmp/d"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Stat(ctx, sb.ID, "/tmp/d"); err == nil {
			t.Fatal("stat of a removed directory succeeded")
		}
		if _, _, err := c.Download(ctx, sb.ID, "/tmp/missing"); err == nil {
			t.Fatal("download of a missing file succeeded")
		}
	})
	t.Run("code", func(t *testing.T) {
		r, err := c.RunCode(ctx, sb.ID, client.CodeRequest{Code: "x = 41\nprint(6*7)"})
		if err != nil || r.Error != nil || r.Stdout != "42\n" {
			t.Fatalf("run code: %+v %v", r, err)
		}
		// The default context keeps its state between calls.
		r, err = c.RunCode(ctx, sb.ID, client.CodeRequest{Code: "print(x + 1)"})
		if err != nil || r.Error != nil || r.Stdout != "42\n" {
			t.Fatalf("state of the default context: %+v %v", r, err)
		}
		r, err = c.RunCode(ctx, sb.ID, client.CodeRequest{Code: "raise ValueError('boom')"})
		if err != nil || r.Error == nil || r.Error.Name != "ValueError" {
			t.Fatalf("failing code: %+v %v", r, err)
		}
		cc, err := c.CreateCodeContext(ctx, sb.ID, "python", "/tmp")
		if err != nil {
			t.Fatal(err)
		}
		r, err = c.RunCode(ctx, sb.ID, client.CodeRequest{Code: "import os\ny = 7\nprint(os.getcwd(), 'x' in dir())", ContextID: cc.ID})
		if err != nil || r.Error != nil || r.Stdout != "/tmp False\n" {
			t.Fatalf("run in a context: %+v %v", r, err)
		}
		r, err = c.RunCode(ctx, sb.ID, client.CodeRequest{Code: "print(y * 6)", ContextID: cc.ID})
		if err != nil || r.Error != nil || r.Stdout != "42\n" {
			t.Fatalf("state of a context: %+v %v", r, err)
		}
		if r, err := c.RunCode(ctx, sb.ID, client.CodeRequest{Code: "print(1)", ContextID: "no-such-context"}); err == nil && r.Error == nil {
			t.Fatalf("run in an unknown context: %+v", r)
		}
	})
	t.Run("e2b-door", func(t *testing.T) {
		// A tenant's E2B client reaches the Daytona sandbox through this
		// daemon's E2B data plane, with this daemon's token.
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
		for _, secret := range []string{"k1", sb.AccessToken, remoteProviderKey} {
			if strings.Contains(string(data), secret) {
				t.Fatalf("a credential reached the sandbox's server: %s", data)
			}
		}
	})
	t.Run("pause", func(t *testing.T) {
		// Daytona has no pause (its stop loses the processes): a pause is
		// refused plainly and the sandbox runs on.
		_, err := c.Pause(ctx, sb.ID)
		if err == nil || !strings.Contains(err.Error(), "pause") {
			t.Fatalf("pause of a Daytona sandbox: %v", err)
		}
		if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("exec after a refused pause: %+v %v", r, err)
		}
	})
	t.Run("stop-start", func(t *testing.T) {
		// Through the front's own Daytona door, as a Daytona client would.
		door := func(action string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, front.url+"/api/sandbox/"+url.PathEscape(sb.ID)+"/"+action, nil)
			req.Header.Set("Authorization", "Bearer k1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", action, resp.StatusCode, out)
			}
		}
		// /tmp is a tmpfs at an agentbox provider: the workspace is what a
		// stop keeps.
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo kept > /workspace/kept"}}); err != nil {
			t.Fatal(err)
		}
		door("stop")
		if _, md := daytonaRemoteOf(t, prov, sb.ID); md["state"] != "stopped" {
			t.Fatalf("provider state after stop: %v", md)
		}
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err == nil {
			t.Fatal("exec in a stopped sandbox succeeded")
		}
		door("start")
		if _, md := daytonaRemoteOf(t, prov, sb.ID); md["state"] != "started" {
			t.Fatalf("provider state after start: %v", md)
		}
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/workspace/kept"}})
		if err != nil || r.Stdout != "kept\n" {
			t.Fatalf("after start: %+v %v", r, err)
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
		if p, ok := providers[sb.ID]; !ok || p != "daytona" || providers[local.ID] != "" {
			t.Fatalf("list: %v", providers)
		}
	})
	t.Run("delete", func(t *testing.T) {
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if rid, _ := daytonaRemoteOf(t, prov, sb.ID); rid != "" {
			t.Fatalf("the provider still has %s", rid)
		}
		if err := c.Delete(ctx, local.ID); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRemoteDaytonaFailures(t *testing.T) {
	prov := startProvider(t)
	front := startDaemon(t, daytonaSettings(prov, "AUTO_CLEANUP=false")...)
	c := front.sdk(t, "k1")
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Template: "daytona:base"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo kept > /tmp/state"}}); err != nil {
		t.Fatal(err)
	}
	_, md := daytonaRemoteOf(t, prov, sb.ID)
	node := md["agentbox-node"]

	// A restart re-lists the remote sandbox, still working.
	front.stop()
	front.start()
	c = front.sdk(t, "k1")
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.Provider != "daytona" || got.State != "running" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/tmp/state"}}); err != nil || r.Stdout != "kept\n" {
		t.Fatalf("exec after restart: %+v %v", r, err)
	}

	// A crash between the provider's create and the record left a
	// labelled sandbox at the provider: the next start deletes it; one of
	// another node's label is not touched.
	front.stop()
	status, body := daytonaCall(t, prov, http.MethodPost, "/sandbox", map[string]any{"snapshot": "base", "labels": map[string]string{"agentbox-node": node, "agentbox-sandbox": "sb-crashed"}})
	if status != http.StatusOK {
		t.Fatalf("create at the provider: %d %s", status, body)
	}
	status, body = daytonaCall(t, prov, http.MethodPost, "/sandbox", map[string]any{"snapshot": "base", "labels": map[string]string{"agentbox-node": "another-node"}})
	if status != http.StatusOK {
		t.Fatalf("create at the provider: %d %s", status, body)
	}
	var other struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &other)
	front.start()
	c = front.sdk(t, "k1")
	at := daytonaSandboxes(t, prov)
	for rid, l := range at {
		if l["agentbox-sandbox"] == "sb-crashed" {
			t.Fatalf("the orphan %s survived the start's sweep", rid)
		}
	}
	if _, ok := at[other.ID]; !ok || len(at) != 2 {
		t.Fatalf("after the sweep the provider holds %v (want the recorded one and the other node's)", at)
	}
	daytonaCall(t, prov, http.MethodDelete, "/sandbox/"+other.ID, nil)

	// Provider down: a create says so plainly; local sandboxes are as
	// they were; a delete still deletes here.
	local, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	prov.stop()
	_, err = c.Create(ctx, client.CreateRequest{Template: "daytona:base"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || !strings.Contains(apiErr.Message, "provider daytona does not answer") {
		t.Fatalf("create with the provider down: %v", err)
	}
	if strings.Contains(err.Error(), remoteProviderKey) {
		t.Fatal("the error shows the provider key")
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err == nil {
		t.Fatal("exec in a sandbox of a provider that is down succeeded")
	}
	if r, err := c.Exec(ctx, local.ID, client.ExecRequest{Cmd: []string{"echo", "ok"}}); err != nil || r.Stdout != "ok\n" {
		t.Fatalf("local exec with the provider down: %+v %v", r, err)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("delete with the provider down: %v", err)
	}
	if err := c.Delete(ctx, local.ID); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteDaytonaOverflow: a type with an overflow route runs here
// while the host has room, at the Daytona provider once it is full; the
// front's AUTO_CLEANUP shutdown deletes it there.
func TestRemoteDaytonaOverflow(t *testing.T) {
	prov := startProvider(t)
	front := startDaemon(t, daytonaSettings(prov, "NODE_MAX_SANDBOXES=1", `PROVIDER_ROUTES={"base":"overflow:daytona:base"}`)...)
	c := front.sdk(t, "k1")
	ctx := context.Background()
	first, err := c.Create(ctx, client.CreateRequest{Template: "base"})
	if err != nil || first.Provider != "" {
		t.Fatalf("first sandbox: %+v %v", first, err)
	}
	second, err := c.Create(ctx, client.CreateRequest{Template: "base"})
	if err != nil || second.Provider != "daytona" {
		t.Fatalf("second sandbox on a full host: %+v %v", second, err)
	}
	if rid, _ := daytonaRemoteOf(t, prov, second.ID); rid == "" {
		t.Fatal("the overflowed sandbox is not at the provider")
	}
	if r, err := c.Exec(ctx, second.ID, client.ExecRequest{Cmd: []string{"echo", "overflowed"}}); err != nil || r.Stdout != "overflowed\n" {
		t.Fatalf("exec in the overflowed sandbox: %+v %v", r, err)
	}
	front.stop()
	if at := daytonaSandboxes(t, prov); len(at) != 0 {
		t.Fatalf("the provider holds %v after the front's shutdown", at)
	}
}
