package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// networkDaemon starts a daemon with networking on its own bridge and
// subnet, resolving through the test internet's DNS server.
func networkDaemon(t *testing.T, inet *testInternet, extra ...string) *daemon {
	t.Helper()
	suffix := inet.hostIf[len(inet.hostIf)-6:]
	settings := append([]string{"NETWORK=on", "NETWORK_BRIDGE=abxb" + suffix, "NETWORK_SUBNET=10.89.0.0/16",
		"NETWORK_DNS=" + inet.addr, "BEARER_TOKEN=net-key"}, extra...)
	return startDaemon(t, settings...)
}

func TestNetworkEgressPolicy(t *testing.T) {
	inet := newTestInternet(t, map[string]string{
		"allowed.test": "198.18.77.1", "other.test": "198.18.77.3", "meta.test": "169.254.169.254",
	})
	d := networkDaemon(t, inet)
	const key = "net-key"

	none := createRaw(t, d, key, map[string]any{})
	if got := fetchInSandbox(t, d, key, none, "http://198.18.77.1/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("none mode reached the test host: %s", got)
	}

	open := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress", "deny_out": []string{"198.18.77.3/32"}}})
	if got := fetchInSandbox(t, d, key, open, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
		t.Fatalf("egress by name: %s", got)
	}
	start := time.Now()
	if got := fetchInSandbox(t, d, key, open, "http://198.18.77.3/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("denied CIDR reachable: %s", got)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("a denied connection took %s: it must fail fast, not time out", time.Since(start))
	}
	for _, target := range []string{"http://169.254.169.254/", "http://10.0.0.1/", "http://192.168.1.1/", "http://meta.test/"} {
		if got := fetchInSandbox(t, d, key, open, target); !strings.HasPrefix(got, "ERR") {
			t.Errorf("%s reachable by default: %s", target, got)
		}
	}
	// The host's own services are off limits, on every address.
	hostPort := freePort(t)
	srv := &http.Server{Addr: fmt.Sprintf("0.0.0.0:%d", hostPort), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "host secret")
	})}
	go srv.ListenAndServe()
	defer srv.Close()
	for _, hostAddr := range []string{testLANHost, "10.89.0.1"} {
		if got := fetchInSandbox(t, d, key, open, fmt.Sprintf("http://%s:%d/", hostAddr, hostPort)); !strings.HasPrefix(got, "ERR") {
			t.Errorf("host port reachable at %s: %s", hostAddr, got)
		}
	}

	// An allow list of names: only those resolve and connect.
	strict := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress", "allow_out": []string{"allowed.test"}}})
	if got := fetchInSandbox(t, d, key, strict, "http://allowed.test/"); !strings.HasPrefix(got, "OK") {
		t.Fatalf("allowed name: %s", got)
	}
	if got := fetchInSandbox(t, d, key, strict, "http://other.test/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("name outside the allow list: %s", got)
	}
	if got := fetchInSandbox(t, d, key, strict, "http://198.18.77.3/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("address outside the allow list: %s", got)
	}

	// The policy changes on the running sandbox.
	status, data := d.call(t, "PUT", "/v1/sandboxes/"+strict+"/network", key,
		map[string]any{"mode": "egress", "allow_out": []string{"other.test", "allowed.test"}})
	if status != 200 {
		t.Fatalf("update policy: %d %s", status, data)
	}
	if got := fetchInSandbox(t, d, key, strict, "http://other.test/"); !strings.HasPrefix(got, "OK") {
		t.Fatalf("after widening the policy: %s", got)
	}
	status, data = d.call(t, "PUT", "/v1/sandboxes/"+none+"/network", key, map[string]any{"mode": "egress"})
	if status != 409 {
		t.Fatalf("changing the mode of a running sandbox: %d %s", status, data)
	}
	status, data = d.call(t, "PUT", "/v1/sandboxes/"+strict+"/network", key, map[string]any{"mode": "egress", "allow_out": []string{"not a name!"}})
	if status != 400 {
		t.Fatalf("invalid policy entry: %d %s", status, data)
	}
	status, data = d.call(t, "GET", "/v1/sandboxes/"+open+"/stats", key, nil)
	if status != 200 || mustJSON(t, data)["network_denials"].(float64) == 0 {
		t.Fatalf("denials not counted: %d %s", status, data)
	}
}

func TestPreviewURLs(t *testing.T) {
	d := startDaemon(t, "BEARER_TOKEN=preview-key", "PREVIEW_DOMAIN=preview.localhost", "API_KEYS=other-key:mallory")
	const key = "preview-key"
	id := createRaw(t, d, key, map[string]any{})
	status, data := d.call(t, "GET", "/v1/sandboxes/"+id, key, nil)
	if status != http.StatusOK {
		t.Fatalf("get sandbox: %d %s", status, data)
	}
	token := mustJSON(t, data)["access_token"].(string)

	// A web server inside a loopback-only sandbox that echoes what it got,
	// and a websocket echo server: neither is published on the host.
	server, _ := os.ReadFile("testdata/preview_server.py")
	upload(t, d, key, id, "/workspace/server.py", server)
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{
		"cmd": []string{"/bin/sh", "-c", "nohup python3 /workspace/server.py 8080 >/tmp/server.log 2>&1 &"}})
	if status != 200 {
		t.Fatalf("start server: %d %s", status, data)
	}
	base := "/v1/sandboxes/" + id + "/ports/8080"
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, data = d.call(t, "GET", base+"/hello?x=1", key, nil)
		if status == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status != 200 || !strings.Contains(string(data), "path=/hello?x=1") {
		t.Fatalf("preview with the API key: %d %s", status, data)
	}
	if strings.Contains(string(data), "authorization") || strings.Contains(string(data), key) {
		t.Fatalf("credentials reached the sandbox: %s", data)
	}
	// Refused: nothing, a wrong token, someone else's key.
	for _, hdr := range [][]string{nil, {"X-Access-Token", "wrong"}, {"Authorization", "Bearer other-key"}} {
		status, _ := d.call(t, "GET", base+"/hello", "", nil, hdr...)
		if status != 401 && status != 404 {
			t.Errorf("preview with %v: %d", hdr, status)
		}
	}
	// The sandbox's own access token works, and is not passed on.
	status, data = d.call(t, "GET", base+"/tok", "", nil, "X-Access-Token", token)
	if status != 200 || strings.Contains(string(data), token) {
		t.Fatalf("preview with the access token: %d %s", status, data)
	}
	// Host-name form.
	status, data = d.call(t, "GET", "/via-host", "", nil, "Host", fmt.Sprintf("8080-%s.preview.localhost", id), "X-Access-Token", token)
	if status != 200 || !strings.Contains(string(data), "path=/via-host") {
		t.Fatalf("preview by host name: %d %s", status, data)
	}

	// A signed, expiring token. The path form takes it per request and sets
	// no cookie (browsers use the host form, see security_web_test.go).
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/preview-tokens", key, map[string]any{"port": 8080, "ttl": 60})
	if status != 201 {
		t.Fatalf("preview token: %d %s", status, data)
	}
	path := mustJSON(t, data)["path"].(string)
	resp, err := http.Get(d.url + path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(body), "agentbox_token") || len(resp.Cookies()) != 0 {
		t.Fatalf("preview token: %d %s cookies %v", resp.StatusCode, body, resp.Cookies())
	}
	tampered := strings.Replace(path, "agentbox_token=", "agentbox_token=9", 1)
	if status, _ := d.call(t, "GET", tampered, "", nil); status != 401 {
		t.Fatalf("tampered token: %d", status)
	}

	// Websockets pass through.
	ctx := waitCtx(t, 30*time.Second)
	wsURL := "ws" + strings.TrimPrefix(d.url, "http") + base + "/ws"
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatalf("websocket through the preview: %v", err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte("ping over preview")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := conn.Read(ctx)
	if err != nil || string(msg) != "echo: ping over preview" {
		t.Fatalf("websocket echo: %q %v", msg, err)
	}
	// Nothing listens on another port: a clear error, not a hang.
	status, data = d.call(t, "GET", "/v1/sandboxes/"+id+"/ports/9/", key, nil)
	if status != 503 {
		t.Fatalf("closed port: %d %s", status, data)
	}
}

func upload(t *testing.T, d *daemon, key, id, path string, data []byte) {
	t.Helper()
	status, body := d.call(t, "PUT", "/v1/sandboxes/"+id+"/files?path="+path, key, bytes.NewReader(data), "Content-Type", "application/octet-stream")
	if status != 201 {
		t.Fatalf("upload %s: %d %s", path, status, body)
	}
}

// TestNetworkCoexistsWithDocker runs egress next to a real Docker engine,
// with the FORWARD policy Docker sets when it manages forwarding (DROP):
// sandbox traffic must still flow, through agentbox's DOCKER-USER rules,
// and those rules must be gone when the daemon stops.
func TestNetworkCoexistsWithDocker(t *testing.T) {
	if exec.Command("docker", "info").Run() != nil {
		t.Skip("no Docker engine running (scripts/start-docker.sh starts one in make test)")
	}
	for _, tool := range []string{"iptables", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	policy, _ := exec.Command("iptables", "-S", "FORWARD").Output()
	if err := exec.Command("iptables", "-P", "FORWARD", "DROP").Run(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if strings.Contains(string(policy), "-P FORWARD ACCEPT") {
			exec.Command("iptables", "-P", "FORWARD", "ACCEPT").Run()
		}
	})
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1"})
	d := networkDaemon(t, inet)
	id := createRaw(t, d, "net-key", map[string]any{"network": map[string]any{"mode": "egress"}})
	if got := fetchInSandbox(t, d, "net-key", id, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
		t.Fatalf("egress with Docker's DROP policy: %s", got)
	}
	rules, _ := exec.Command("nft", "list", "chain", "ip", "filter", "DOCKER-USER").Output()
	if !strings.Contains(string(rules), "agentbox:abxb") {
		t.Fatalf("no agentbox rules in DOCKER-USER during the run:\n%s", rules)
	}
	d.stop()
	rules, _ = exec.Command("nft", "list", "chain", "ip", "filter", "DOCKER-USER").Output()
	if strings.Contains(string(rules), "agentbox:abxb") {
		t.Fatalf("agentbox rules left in DOCKER-USER after stop:\n%s", rules)
	}
}
