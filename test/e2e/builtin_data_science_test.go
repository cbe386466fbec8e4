package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// jupyterPort is where the data-science template's notebook server
// listens (templates/data-science/agentbox-jupyter), on the sandbox's
// loopback.
const jupyterPort = 8888

// checkDataScience creates a data-science sandbox (create returns once
// Jupyter answers and the code context is warm) and uses it the two ways
// its users do: the code context with the analysis stack imported, and a
// notebook made and run through Jupyter's REST API and kernel WebSocket
// (as a program does, on the path form of the preview proxy). Jupyter's
// only guard of its own, the origin check, must refuse another origin.
func checkDataScience(t *testing.T, d *daemon) {
	start := time.Now()
	id := createRaw(t, d, "", map[string]any{"template": "data-science"})
	t.Logf("create from data-science (returns once Jupyter answers and the context is warm): %s", time.Since(start).Round(time.Millisecond))
	defer deleteSandbox(t, d, "", id)

	const imports = `python3 -c 'import scipy.stats, sklearn.linear_model, seaborn, openpyxl, notebook; print("ok")'`
	if got, code := sbRun(t, d, id, imports); got != "ok" || code != 0 {
		t.Errorf("the analysis stack: %q (exit %d)", got, code)
	}
	// Jupyter has no token of its own and listens on the sandbox's
	// loopback only (127.0.0.1:8888 is 0100007F:22B8).
	if out, _ := sbRun(t, d, id, `awk '$4 == "0A" {print $2}' /proc/net/tcp /proc/net/tcp6`); !strings.Contains(out, "0100007F:22B8") ||
		strings.Contains(out, "00000000:22B8") {
		t.Errorf("Jupyter is not listening on 127.0.0.1:%d only: %q", jupyterPort, out)
	}
	// The first cell finds the warm-up's names (seaborn's among them) and
	// fits a model with scikit-learn.
	x := mustRun(t, d, "", id, map[string]any{"code": "from sklearn.linear_model import LinearRegression\n" +
		"m = LinearRegression().fit(pd.DataFrame({'x': [0, 1, 2, 3]}), [1, 3, 5, 7])\n(sns.__name__, round(float(m.coef_[0]), 6))"})
	if x.text() != "('seaborn', 2.0)" || x.err != nil {
		t.Errorf("a cell with seaborn and scikit-learn: %q %+v stderr %q", x.text(), x.err, x.stderr)
	}

	// A program reaches Jupyter on the path form with the owner's key or,
	// as here (a daemon without keys), the sandbox's access token.
	status, data := d.call(t, "GET", "/v1/sandboxes/"+id, "", nil)
	token, _ := mustJSON(t, data)["access_token"].(string)
	if status != http.StatusOK || token == "" {
		t.Fatalf("the sandbox's access token: %d %s", status, data)
	}
	call := func(method, path string, body any, hdr ...string) (int, []byte) {
		t.Helper()
		return d.call(t, method, path, "", body, append([]string{"X-Access-Token", token}, hdr...)...)
	}
	api := "/v1/sandboxes/" + id + fmt.Sprintf("/ports/%d/api", jupyterPort)
	if status, data := d.call(t, "GET", api+"/sessions", "", nil); status != http.StatusUnauthorized {
		t.Errorf("Jupyter without a credential: %d %s, want 401", status, data)
	}
	// A notebook with one pandas cell, saved through the contents API.
	const cell = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [4.0, 5.0, 6.0]})\nprint(df['a'].sum())\ndf['b'].mean()"
	nb := map[string]any{"type": "notebook", "format": "json", "content": map[string]any{
		"nbformat": 4, "nbformat_minor": 5, "metadata": map[string]any{},
		"cells": []any{map[string]any{"cell_type": "code", "id": "c1", "source": cell, "metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil}},
	}}
	if status, data := call("PUT", api+"/contents/analysis.ipynb", nb); status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("save a notebook: %d %s", status, data)
	}
	if got, _ := sbRun(t, d, id, `ls /workspace; stat -c %U /workspace/analysis.ipynb`); got != "analysis.ipynb\nuser" {
		t.Errorf("the notebook in /workspace: %q", got)
	}
	sess := map[string]any{"path": "analysis.ipynb", "type": "notebook", "name": "", "kernel": map[string]any{"name": "python3"}}
	// Jupyter's own guard, on the host form a browser uses
	// (<port>-<id>.<PREVIEW_DOMAIN>, here the default localhost): its own
	// preview origin is admitted (the pattern names the sandbox), a page
	// of another origin (another sandbox's preview, say) is refused
	// before anything starts.
	host := previewHost(d, jupyterPort, id)
	other := "http://" + previewHost(d, jupyterPort, "someoneelse")
	if status, data := call("GET", "/api/sessions", nil, "Host", host, "Origin", "http://"+host); status != http.StatusOK {
		t.Errorf("the sessions list from the sandbox's own origin: %d %s, want 200", status, data)
	}
	if status, data := call("POST", "/api/sessions", sess, "Host", host, "Origin", other); status != http.StatusNotFound {
		t.Errorf("a session started from origin %s: %d %s, want Jupyter's 404", other, status, data)
	}
	// On the path form the daemon itself refuses a preview page's request.
	if status, data := call("POST", api+"/sessions", sess, "Origin", other); status != http.StatusForbidden {
		t.Errorf("a path-form request from origin %s: %d %s, want 403", other, status, data)
	}
	status, data = call("POST", api+"/sessions", sess)
	if status != http.StatusCreated {
		t.Fatalf("start a kernel for the notebook: %d %s", status, data)
	}
	var session struct {
		ID     string `json:"id"`
		Kernel struct {
			ID string `json:"id"`
		} `json:"kernel"`
	}
	if err := json.Unmarshal(data, &session); err != nil || session.Kernel.ID == "" {
		t.Fatalf("session %s: %v", data, err)
	}
	defer call("DELETE", api+"/sessions/"+session.ID, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(d.url, "http") + api + "/kernels/" + session.Kernel.ID + "/channels?session_id=" + randomHex(t, 16)
	hostWS := "ws://" + strings.TrimPrefix(d.url, "http://") + "/api/kernels/" + session.Kernel.ID + "/channels?session_id=" + randomHex(t, 16)
	if ws, res, err := websocket.Dial(ctx, hostWS, &websocket.DialOptions{Host: host,
		HTTPHeader: http.Header{"Origin": {other}, "X-Access-Token": {token}}}); err == nil {
		ws.CloseNow()
		t.Errorf("the kernel's WebSocket opened from origin %s", other)
	} else if res == nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("the kernel's WebSocket from origin %s: %v, want Jupyter's (tornado's) 403", other, err)
	} else if b, _ := io.ReadAll(res.Body); strings.Contains(string(b), "permission_denied") {
		t.Errorf("the kernel's WebSocket from origin %s was refused by the daemon (%s), not by Jupyter", other, b)
	}
	start = time.Now()
	stdout, result := runJupyterCell(t, ctx, wsURL, token, cell)
	t.Logf("pandas cell through the kernel WebSocket: %s", time.Since(start).Round(time.Millisecond))
	if stdout != "6\n" || result != "5.0" {
		t.Errorf("the notebook's pandas cell: stdout %q, result %q; want \"6\\n\" and \"5.0\"", stdout, result)
	}
}

// runJupyterCell runs code on the kernel behind wsURL (Jupyter's kernel
// messaging over the notebook server's WebSocket, with the sandbox's
// access token) and returns what it
// printed and its result's text/plain, failing on an error reply.
func runJupyterCell(t *testing.T, ctx context.Context, wsURL, token, code string) (stdout, result string) {
	t.Helper()
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"X-Access-Token": {token}}})
	if err != nil {
		t.Fatalf("the kernel's WebSocket: %v", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(16 << 20)
	msgID := randomHex(t, 16)
	req := map[string]any{
		"header": map[string]any{"msg_id": msgID, "username": "agentbox-test", "session": randomHex(t, 16),
			"msg_type": "execute_request", "version": "5.3", "date": time.Now().UTC().Format(time.RFC3339)},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "channel": "shell", "buffers": []any{},
		"content": map[string]any{"code": code, "silent": false, "store_history": true,
			"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true},
	}
	b, _ := json.Marshal(req)
	if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("send execute_request: %v", err)
	}
	var out strings.Builder
	replied, idle := false, false
	// A cell's messages: status busy, execute_input, stream, execute_result,
	// status idle on iopub, execute_reply on shell; bounded in count.
	for i := 0; i < 200 && !(replied && idle); i++ {
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("read the kernel's messages (after %q): %v", out.String(), err)
		}
		var m struct {
			Channel string `json:"channel"`
			Header  struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			ParentHeader struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content struct {
				Name           string            `json:"name"`
				Text           string            `json:"text"`
				Data           map[string]string `json:"data"`
				ExecutionState string            `json:"execution_state"`
				Status         string            `json:"status"`
				EName          string            `json:"ename"`
				EValue         string            `json:"evalue"`
			} `json:"content"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("a kernel message %q: %v", data, err)
		}
		if m.ParentHeader.MsgID != msgID {
			continue
		}
		switch m.Header.MsgType {
		case "stream":
			if m.Content.Name == "stdout" {
				out.WriteString(m.Content.Text)
			}
		case "execute_result":
			result = m.Content.Data["text/plain"]
		case "error":
			t.Fatalf("the cell failed: %s: %s", m.Content.EName, m.Content.EValue)
		case "execute_reply":
			replied = true
			if m.Content.Status != "ok" {
				t.Fatalf("execute_reply %s", data)
			}
		case "status":
			if m.Content.ExecutionState == "idle" {
				idle = true
			}
		}
	}
	if !replied || !idle {
		t.Fatalf("no execute_reply and idle status for the cell (printed %q)", out.String())
	}
	ws.Close(websocket.StatusNormalClosure, "")
	return out.String(), result
}

// checkBuiltinPools restarts d with warm pools of the data-science and
// code-server templates (one each) and checks that their start is
// pool-able: a create of each is served from its pool, and the pooled
// sandbox's service answers as a cold one's does (Jupyter admitting the
// sandbox's own origin, whose id the pool chose). It logs pool-hit and
// cold create times side by side.
func checkBuiltinPools(t *testing.T, d *daemon) {
	d.stop()
	d.env = append(d.env, `SANDBOX_TEMPLATES={"data-science":"data-science","code-server":"code-server"}`,
		"DEFAULT_SANDBOX_TYPE=data-science,code-server", "POOL_SIZE=1")
	d.start()
	for _, tmpl := range []string{"data-science", "code-server"} {
		deadline := time.Now().Add(3 * time.Minute)
		for poolStats(t, d, "", tmpl)["ready"] == float64(0) {
			if time.Now().After(deadline) {
				t.Fatalf("the %s pool has no ready sandbox after 3 minutes:\n%s", tmpl, lastLines(d.logs.String(), 30))
			}
			time.Sleep(200 * time.Millisecond)
		}
		start := time.Now()
		status, data := d.call(t, "POST", "/v1/sandboxes", "", map[string]any{"template": tmpl})
		hit := time.Since(start)
		if status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", tmpl, status, data)
		}
		sb := mustJSON(t, data)
		id, _ := sb["id"].(string)
		defer deleteSandbox(t, d, "", id)
		if sb["from_pool"] != true {
			t.Errorf("create %s was not served from its pool: %s", tmpl, data)
		}
		start = time.Now()
		// Other resources than the template's defaults: never from a pool.
		cold := createRaw(t, d, "", map[string]any{"template": tmpl, "resources": map[string]any{"memory": "1536M"}})
		t.Logf("create %s: pool hit %s, cold %s", tmpl, hit.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		deleteSandbox(t, d, "", cold)

		port, path := codeServerPort, "/healthz"
		if tmpl == "data-science" {
			port, path = jupyterPort, "/api/sessions"
		}
		host := previewHost(d, port, id)
		token, _ := sb["access_token"].(string)
		if status, data := d.call(t, "GET", path, "", nil, "Host", host, "Origin", "http://"+host, "X-Access-Token", token); status != http.StatusOK {
			t.Errorf("%s of the pooled %s sandbox from its own origin: %d %s", path, tmpl, status, data)
		}
	}
}

// previewHost is the host form of sandbox id's port on d with the default
// PREVIEW_DOMAIN: <port>-<id>.localhost:<daemon port>.
func previewHost(d *daemon, port int, id string) string {
	_, daemonPort, _ := strings.Cut(strings.TrimPrefix(d.url, "http://"), ":")
	return fmt.Sprintf("%d-%s.localhost:%s", port, id, daemonPort)
}
