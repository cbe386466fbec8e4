package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"strings"
	"testing"
	"time"
)

// Browser-facing hardening of the daemon's HTTP surface: what a web page
// the operator visits can and cannot do to the daemon (cross-origin
// requests, DNS rebinding), and what sandbox pages served through preview
// URLs can do to the API and to each other.

// rawHTTP is one request as a browser (or a page) would send it: only the
// headers given, Host overridable. It returns status, headers and body.
func rawHTTP(t *testing.T, d *daemon, method, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// daemonPort is the TCP port the daemon listens on, as text.
func daemonPort(d *daemon) string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(d.url, "http://"))
	return port
}

// browserClient keeps cookies like a browser and reaches the daemon under
// any host name (preview names such as 8080-<id>.preview.localhost need
// no DNS entry).
func browserClient(t *testing.T, d *daemon) *http.Client {
	t.Helper()
	addr := strings.TrimPrefix(d.url, "http://")
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "tcp", addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Jar: jar, Transport: tr, Timeout: time.Minute}
}

// get fetches url with c and returns status, headers and body.
func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

// startPreviewServer runs testdata/preview_server.py on port 8080 in
// sandbox id and waits until the path-form preview answers.
func startPreviewServer(t *testing.T, d *daemon, key, id string) {
	t.Helper()
	status, data := d.call(t, "GET", "/v1/sandboxes/"+id, key, nil)
	if status != 200 {
		t.Fatalf("get %s: %d %s", id, status, data)
	}
	token := mustJSON(t, data)["access_token"].(string)
	server, err := os.ReadFile("testdata/preview_server.py")
	if err != nil {
		t.Fatal(err)
	}
	upload(t, d, key, id, "/workspace/server.py", server)
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{
		"cmd": []string{"/bin/sh", "-c", "nohup python3 /workspace/server.py 8080 >/tmp/server.log 2>&1 &"}})
	if status != 200 {
		t.Fatalf("start server: %d %s", status, data)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 400; i++ {
		status, data = d.call(t, "GET", "/v1/sandboxes/"+id+"/ports/8080/ready", "", nil, "X-Access-Token", token)
		if status == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status != 200 {
		t.Fatalf("preview server in %s not up: %d %s", id, status, data)
	}
}

// previewToken mints a preview token for port 8080 of id.
func previewToken(t *testing.T, d *daemon, key, id string) map[string]any {
	t.Helper()
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/preview-tokens", key, map[string]any{"port": 8080, "ttl": 120})
	if status != 201 {
		t.Fatalf("preview token: %d %s", status, data)
	}
	return mustJSON(t, data)
}

func countSandboxes(t *testing.T, d *daemon, key string) int {
	t.Helper()
	status, data := d.call(t, "GET", "/v1/sandboxes", key, nil)
	if status != 200 {
		t.Fatalf("list: %d %s", status, data)
	}
	var out struct {
		Sandboxes []json.RawMessage `json:"sandboxes"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("list: %v: %s", err, data)
	}
	return len(out.Sandboxes)
}

// TestSecurityAgentscopeCrossOrigin sends what a web page can make a
// browser send (a form or no-cors fetch: text/plain or no content type,
// its own Origin, or a rebound foreign Host) to the agentscope routes and
// the native ones, in both auth modes: every one is refused, and nothing
// is created, run or cleaned up.
func TestSecurityAgentscopeCrossOrigin(t *testing.T) {
	for _, mode := range []string{"keyless", "keyed"} {
		t.Run(mode, func(t *testing.T) {
			key := ""
			var settings []string
			if mode == "keyed" {
				key = "as-owner-key"
				settings = append(settings, "BEARER_TOKEN="+key)
			}
			d := startDaemon(t, settings...)
			port := daemonPort(d)
			status, body := asCall(t, d, "create", key, map[string]any{"sandbox_type": "base"})
			id, _ := body["data"].(string)
			if status != 200 || id == "" {
				t.Fatalf("create: %d %v", status, body)
			}
			auth := map[string]string{}
			if key != "" {
				// A page cannot attach the key; this checks that the
				// content type and origin rules hold even with it.
				auth["Authorization"] = "Bearer " + key
			}
			with := func(extra map[string]string) map[string]string {
				h := map[string]string{}
				for k, v := range auth {
					h[k] = v
				}
				for k, v := range extra {
					h[k] = v
				}
				return h
			}
			attacks := map[string]map[string]string{
				"form post from another site": with(map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}),
				"no-cors fetch, no type":      with(map[string]string{"Origin": "http://evil.example"}),
				"text/plain without origin":   with(map[string]string{"Content-Type": "text/plain"}),
				"no content type":             with(nil),
				"preview page":                with(map[string]string{"Origin": "http://8080-" + id + ".localhost:" + port, "Content-Type": "text/plain"}),
				"preview page with JSON":      with(map[string]string{"Origin": "http://8080-" + id + ".localhost:" + port, "Content-Type": "application/json"}),
			}
			if mode == "keyless" {
				attacks["DNS rebinding"] = map[string]string{"Host": "evil.example:" + port, "Origin": "http://evil.example:" + port,
					"Content-Type": "application/json"}
				attacks["foreign Host"] = map[string]string{"Host": "evil.example:" + port, "Content-Type": "application/json"}
			}
			n := 0
			for name, hdr := range attacks {
				for _, req := range []struct{ path, body string }{
					{"/create", `{"sandbox_type":"base"}`},
					{"/create_async", `{"sandbox_type":"base"}`},
					{"/proxy/" + id + "/tools/run_shell_command", fmt.Sprintf(`{"command":"touch /tmp/pwned-%d"}`, n)},
					{"/proxy/" + id + "/fastapi/tools/run_shell_command", fmt.Sprintf(`{"command":"touch /tmp/pwned-%d"}`, n+1)},
					{"/call_tool", fmt.Sprintf(`{"identity":%q,"tool_name":"run_shell_command","arguments":{"command":"touch /tmp/pwned-%d"}}`, id, n+2)},
					{"/cleanup", `{}`},
					{"/release", fmt.Sprintf(`{"identity":%q}`, id)},
					// The native routes follow the same rules.
					{"/v1/sandboxes", `{}`},
					{"/v1/sandboxes/" + id + "/exec", fmt.Sprintf(`{"cmd":["touch","/tmp/pwned-%d"]}`, n)},
				} {
					n += 3
					status, _, data := rawHTTP(t, d, "POST", req.path, req.body, hdr)
					if status < 400 || status >= 500 {
						t.Errorf("%s: POST %s answered %d %s", name, req.path, status, data)
					}
				}
			}
			if got := countSandboxes(t, d, key); got != 1 {
				t.Errorf("%d sandboxes after the attacks, want the 1 created legitimately", got)
			}
			status, body = asCall(t, d, "call_tool", key, map[string]any{"identity": id, "tool_name": "run_shell_command",
				"arguments": map[string]any{"command": "ls /tmp"}})
			if out, _ := json.Marshal(body); status != 200 || strings.Contains(string(out), "pwned") {
				t.Errorf("sandbox after the attacks: %d %s", status, out)
			}
		})
	}
}

// TestSecurityPreviewOrigins: each sandbox port is its own browser origin;
// a cookie a sandbox's server sets never reaches another sandbox's
// preview; path-form previews are rendered inert (CSP sandbox, no
// cookies either way); the API never answers on a preview host; and a
// preview page cannot drive the API.
func TestSecurityPreviewOrigins(t *testing.T) {
	const key = "web-owner-key"
	d := startDaemon(t, "BEARER_TOKEN="+key, "PREVIEW_DOMAIN=preview.localhost")
	port := daemonPort(d)
	a := createRaw(t, d, key, map[string]any{})
	b := createRaw(t, d, key, map[string]any{})
	startPreviewServer(t, d, key, a)
	startPreviewServer(t, d, key, b)
	hostURL := func(id, path string) string {
		return fmt.Sprintf("http://8080-%s.preview.localhost:%s%s", id, port, path)
	}
	tokA, tokB := previewToken(t, d, key, a), previewToken(t, d, key, b)
	if tokA["url"] == nil {
		t.Errorf("preview token has no browser url: %v", tokA)
	}
	browser := browserClient(t, d)

	// The token is exchanged for a host-only, HttpOnly cookie, and the
	// page is reloaded without the token in its URL.
	noFollow := *browser
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	status, hdr, _ := get(t, &noFollow, hostURL(a, "/start?x=1&agentbox_token="+tokA["token"].(string)))
	setCookie := strings.Join(hdr.Values("Set-Cookie"), "\n")
	if status != http.StatusSeeOther || hdr.Get("Location") != "/start?x=1" {
		t.Errorf("token exchange: %d Location %q", status, hdr.Get("Location"))
	}
	for _, want := range []string{"HttpOnly", "SameSite=Lax", "Path=/"} {
		if !strings.Contains(setCookie, want) {
			t.Errorf("preview cookie %q lacks %s", setCookie, want)
		}
	}
	if strings.Contains(strings.ToLower(setCookie), "domain=") {
		t.Errorf("preview cookie is not host-only: %q", setCookie)
	}
	status, _, page := get(t, browser, hostURL(a, "/start?x=1"))
	if status != 200 || !strings.Contains(page, "path=/start?x=1") || strings.Contains(page, "agentbox") {
		t.Fatalf("sandbox A by host name: %d %s", status, page)
	}

	// Sandbox A's server sets cookies, one of them for the parent domain
	// and one named like the daemon's own.
	if status, _, page = get(t, browser, hostURL(a, "/setcookie")); status != 200 {
		t.Fatalf("A /setcookie: %d %s", status, page)
	}
	if status, _, page = get(t, browser, hostURL(a, "/again")); status != 200 || !strings.Contains(page, "sba=secret-a") {
		t.Fatalf("A lost its own cookie or its preview access: %d %s", status, page)
	}
	if strings.Contains(page, "forged") {
		t.Errorf("sandbox A replaced the daemon's cookie: %s", page)
	}
	// B, opened in the same browser with its own token, sees none of it.
	status, _, page = get(t, browser, tokB["url"].(string))
	if status != 200 || !strings.Contains(page, "path=/") {
		t.Fatalf("sandbox B by host name: %d %s", status, page)
	}
	for _, leaked := range []string{"sba=", "tossed", "agentbox"} {
		if strings.Contains(page, leaked) {
			t.Errorf("%q from sandbox A reached sandbox B's server:\n%s", leaked, page)
		}
	}
	// A's token does not open B.
	if status, _, _ := get(t, http.DefaultClient, d.url+"/v1/sandboxes/"+b+"/ports/8080/?agentbox_token="+tokA["token"].(string)); status != 401 {
		t.Errorf("A's token opened B: %d", status)
	}

	// Path form: for programs, not browsers.
	status, hdr, page2 := rawHTTP(t, d, "GET", "/v1/sandboxes/"+a+"/ports/8080/setcookie", "",
		map[string]string{"Authorization": "Bearer " + key, "Cookie": "session=from-the-api-origin"})
	if status != 200 || !strings.Contains(hdr.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("path form: %d CSP %q", status, hdr.Get("Content-Security-Policy"))
	}
	if sc := hdr.Values("Set-Cookie"); len(sc) != 0 {
		t.Errorf("path form passed the sandbox's cookies on: %v", sc)
	}
	if strings.Contains(string(page2), "from-the-api-origin") {
		t.Errorf("path form passed the caller's cookies to the sandbox: %s", page2)
	}

	// The API does not answer on preview host names.
	for _, host := range []string{"api.preview.localhost:" + port, "8080-" + a + ".preview.localhost:" + port} {
		status, _, data := rawHTTP(t, d, "GET", "/v1/sandboxes", "", map[string]string{"Host": host, "Authorization": "Bearer " + key})
		if strings.Contains(string(data), `"sandboxes"`) {
			t.Errorf("API served on preview host %s: %d %s", host, status, data)
		}
	}
	// A preview page cannot drive the API (it has no key; even with one,
	// its origin is refused).
	status, _, data := rawHTTP(t, d, "POST", "/v1/sandboxes", "{}", map[string]string{"Authorization": "Bearer " + key,
		"Content-Type": "application/json", "Origin": "http://8080-" + a + ".preview.localhost:" + port})
	if status != 403 {
		t.Errorf("create from a preview origin: %d %s", status, data)
	}
}

// TestSecurityKeylessPreviews: without API keys a preview still needs a
// credential, previews live on their own origins by default
// (<port>-<id>.localhost), and those origins cannot drive the API.
func TestSecurityKeylessPreviews(t *testing.T) {
	d := startDaemon(t)
	port := daemonPort(d)
	id := createRaw(t, d, "", map[string]any{})
	startPreviewServer(t, d, "", id)
	hostForm := fmt.Sprintf("http://8080-%s.localhost:%s/page", id, port)
	browser := browserClient(t, d)

	if status, _, page := get(t, http.DefaultClient, d.url+"/v1/sandboxes/"+id+"/ports/8080/page"); status != 401 {
		t.Errorf("keyless path-form preview without a credential: %d %s", status, page)
	}
	if status, _, page := get(t, browser, hostForm); status != 401 {
		t.Errorf("keyless host-form preview without a credential: %d %s", status, page)
	}
	tok := previewToken(t, d, "", id)
	u, _ := tok["url"].(string)
	if !strings.HasPrefix(u, fmt.Sprintf("http://8080-%s.localhost:%s/", id, port)) {
		t.Fatalf("default preview url %q", u)
	}
	if status, _, page := get(t, browser, u); status != 200 || !strings.Contains(page, "path=/") {
		t.Fatalf("keyless preview with its token: %d %s", status, page)
	}
	if status, _, page := get(t, browser, hostForm); status != 200 || !strings.Contains(page, "path=/page") {
		t.Fatalf("keyless preview with its cookie: %d %s", status, page)
	}
	// The preview origin is loopback, but not the API's origin.
	origin := fmt.Sprintf("http://8080-%s.localhost:%s", id, port)
	status, _, data := rawHTTP(t, d, "POST", "/v1/sandboxes", "{}", map[string]string{"Content-Type": "application/json", "Origin": origin})
	if status != 403 {
		t.Errorf("keyless create from a preview origin: %d %s", status, data)
	}
	status, _, data = rawHTTP(t, d, "GET", "/v1/sandboxes", "", map[string]string{"Host": fmt.Sprintf("8080-%s.localhost:%s", id, port)})
	if strings.Contains(string(data), `"sandboxes"`) {
		t.Errorf("keyless API served on a preview host: %d %s", status, data)
	}
	// /metrics follows the same rules as the API.
	if status, _, _ := rawHTTP(t, d, "GET", "/metrics", "", map[string]string{"Host": "evil.example:" + port}); status != 403 {
		t.Errorf("keyless /metrics on a foreign Host: %d", status)
	}
	if status, _, _ := rawHTTP(t, d, "GET", "/metrics", "", map[string]string{"Origin": origin}); status != 403 {
		t.Errorf("keyless /metrics from a preview origin: %d", status)
	}
	if status, _, _ := rawHTTP(t, d, "GET", "/metrics", "", nil); status != 200 {
		t.Errorf("keyless /metrics on loopback: %d", status)
	}
}

// TestSecurityAccessLogAndMetrics: the access log names the authenticated
// user on every route family, and /metrics is for the operator only.
func TestSecurityAccessLogAndMetrics(t *testing.T) {
	d := startDaemon(t, "API_KEYS=alice-key:alice", "METRICS_TOKEN=ops-metrics-token")
	if status, data := d.call(t, "GET", "/v1/sandboxes", "alice-key", nil); status != 200 {
		t.Fatalf("list: %d %s", status, data)
	}
	if status, data := d.call(t, "POST", "/list_session_keys", "alice-key", map[string]any{}); status != 200 {
		t.Fatalf("list_session_keys: %d %s", status, data)
	}
	for _, path := range []string{"/v1/sandboxes", "/list_session_keys"} {
		// The line is written once the response went out: wait for it.
		line := ""
		for i := 0; i < 250 && line == ""; i++ {
			for _, l := range strings.Split(d.logs.String(), "\n") {
				if strings.Contains(l, "msg=request ") && strings.Contains(l, "path="+path+" ") {
					line = l
				}
			}
			if line == "" {
				time.Sleep(20 * time.Millisecond)
			}
		}
		if line == "" {
			t.Errorf("no access log line for %s in:\n%s", path, tail(d.logs.String(), 30))
		} else if !strings.Contains(line, "user=alice") {
			t.Errorf("access log line without the user: %s", line)
		}
	}
	for _, key := range []string{"", "alice-key", "wrong"} {
		if status, data := d.call(t, "GET", "/metrics", key, nil); status != 401 && status != 403 {
			t.Errorf("/metrics with key %q: %d %s", key, status, data)
		}
	}
	status, data := d.call(t, "GET", "/metrics", "ops-metrics-token", nil)
	if status != 200 || !strings.Contains(string(data), "agentbox_http_request_seconds") {
		t.Errorf("/metrics with the metrics token: %d %.200s", status, data)
	}
	// The metrics token is no API key.
	if status, data := d.call(t, "GET", "/v1/sandboxes", "ops-metrics-token", nil); status != 401 {
		t.Errorf("API with the metrics token: %d %s", status, data)
	}
}
