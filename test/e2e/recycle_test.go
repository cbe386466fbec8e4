package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// shIn runs a shell script in a sandbox through the API and returns its
// stdout; env is the exec's own environment.
func shIn(t *testing.T, d *daemon, key, id, script string, env map[string]string) string {
	t.Helper()
	body := map[string]any{"cmd": []string{"/bin/bash", "-c", script}, "timeout": 30}
	if env != nil {
		body["env"] = env
	}
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, body)
	if status != http.StatusOK {
		t.Fatalf("exec %q: %d %s", script, status, data)
	}
	return mustJSON(t, data)["stdout"].(string)
}

// previewGet fetches / of a sandbox port through the preview route with an
// access token (X-Access-Token) or a preview token (query).
func previewGet(t *testing.T, d *daemon, id string, port int, accessToken, previewToken string) int {
	t.Helper()
	u := fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d/", d.url, id, port)
	if previewToken != "" {
		u += "?agentbox_token=" + previewToken
	}
	req, _ := http.NewRequest("GET", u, nil)
	if accessToken != "" {
		req.Header.Set("X-Access-Token", accessToken)
	}
	cl := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("preview GET: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestPoolRecycleLeavesNothing is the proof of POOL_MAX_USES: user A leaves
// every kind of trace in a pooled sandbox and deletes it; it is reset in
// place and user B, handed the same sandbox from the pool, finds none of
// them. At max_uses the sandbox is destroyed instead.
func TestPoolRecycleLeavesNothing(t *testing.T) {
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1"})
	suffix := inet.hostIf[len(inet.hostIf)-6:]
	d := startDaemon(t, "NETWORK=on", "NETWORK_BRIDGE=abxr"+suffix, "NETWORK_SUBNET=10.93.0.0/16",
		"NETWORK_DNS="+inet.addr, "DEFAULT_NETWORK_MODE=egress",
		"API_KEYS=key-alice:alice,key-bob:bob", "METRICS_TOKEN=recycle-metrics", "POOL_SIZE=1", "POOL_MAX_USES=2")
	const keyA, keyB = "key-alice", "key-bob"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitPool := func(want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, data := d.call(t, "GET", "/v1/info", keyA, nil)
			pools, _ := mustJSON(t, data)["pools"].(map[string]any)
			if pools["host"].(float64) >= float64(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool never reached %d: %s\n%s", want, data, d.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPool(1)

	// User A.
	ca := d.sdk(t, keyA)
	a, err := ca.Create(ctx, client.CreateRequest{Env: map[string]string{"A_CREATE_ENV": "secretA-env"}})
	if err != nil {
		t.Fatal(err)
	}
	if !a.FromPool {
		t.Fatalf("A did not get a pooled sandbox: %+v", a)
	}
	id := a.ID
	const port = 4555
	out := shIn(t, d, keyA, id, `
echo secretA > /workspace/a.txt; echo secretA > "$HOME/a.txt"; echo secretA > /tmp/a.txt; echo secretA > /dev/shm/a.txt
echo 'export A_PROFILE=secretA-profile' >> "$HOME/.bashrc"; echo 'export A_PROFILE=secretA-profile' >> "$HOME/.profile"
setsid nohup sleep 31337 >/dev/null 2>&1 &
cd /tmp && setsid nohup python3 -m http.server `+fmt.Sprint(port)+` --bind 127.0.0.1 >/dev/null 2>&1 &
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", `+fmt.Sprint(port)+`)).close()' 2>/dev/null && break; sleep 0.1; done
echo "$A_EXEC_ENV $A_CREATE_ENV $(bash -lc 'echo $A_PROFILE')"`, map[string]string{"A_EXEC_ENV": "secretA-exec"})
	if strings.TrimSpace(out) != "secretA-exec secretA-env secretA-profile" {
		t.Fatalf("A's env: %q", out)
	}
	// Shell history, written by an interactive bash at exit.
	pty, err := ca.PTY(ctx, id, client.PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pty.Write([]byte("echo secretA-history >/dev/null; exit\n")); err != nil {
		t.Fatal(err)
	}
	if code, err := pty.Wait(); err != nil || code != 0 {
		t.Fatalf("history pty: %d %v", code, err)
	}
	pty.Close()
	if h := shIn(t, d, keyA, id, `cat "$HOME/.bash_history"`, nil); !strings.Contains(h, "secretA-history") {
		t.Fatalf("bash wrote no history to find later: %q", h)
	}
	// A PTY still open at delete time.
	openPTY, err := ca.PTY(ctx, id, client.PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer openPTY.Close()
	// Code contexts: a variable in the default one, and a bash context.
	if x := mustRun(t, d, keyA, id, map[string]any{"code": "secret_var = 'secretA-code'\nprint(secret_var)"}); x.stdout != "secretA-code\n" {
		t.Fatalf("A's code: %q", x.stdout)
	}
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/code/contexts", keyA, map[string]any{"language": "bash"})
	if status != http.StatusCreated {
		t.Fatalf("bash context: %d %s", status, data)
	}
	bashCtx := mustJSON(t, data)["id"].(string)
	// A UDP flow of A's that the test host answers: conntrack holds it as
	// established, and established flows pass whatever the policy says.
	udpEcho := inet.listenPacket(t, inet.other+":5300")
	t.Cleanup(func() { udpEcho.Close() })
	udpGot := make(chan string, 64)
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := udpEcho.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case udpGot <- string(buf[:n]):
			default:
			}
			udpEcho.WriteTo(buf[:n], from)
		}
	}()
	if got := strings.TrimSpace(shIn(t, d, keyA, id, udpFromFixedPort(inet.other, "udp-A"), nil)); got != "udp-A" {
		t.Fatalf("A's UDP flow to the test host: %q", got)
	}
	// Network policy: A denies the test host.
	if got := fetchInSandbox(t, d, keyA, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK") {
		t.Fatalf("default egress did not reach the test host: %s", got)
	}
	status, data = d.call(t, "PUT", "/v1/sandboxes/"+id+"/network", keyA, map[string]any{"mode": "egress", "deny_out": []string{"198.18.77.1/32"}})
	if status != http.StatusOK {
		t.Fatalf("A's network update: %d %s", status, data)
	}
	if got := fetchInSandbox(t, d, keyA, id, "http://allowed.test/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("A's deny rule did not act: %s", got)
	}
	// Tokens: A's access token and a preview token both open the port.
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/preview-tokens", keyA, map[string]any{"port": port})
	if status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("preview token: %d %s", status, data)
	}
	previewTok := mustJSON(t, data)["token"].(string)
	if s := previewGet(t, d, id, port, a.AccessToken, ""); s != http.StatusOK {
		t.Fatalf("A's access token on A's server: %d", s)
	}
	if s := previewGet(t, d, id, port, "", previewTok); s != http.StatusOK && s != http.StatusSeeOther {
		t.Fatalf("A's preview token on A's server: %d", s)
	}

	if err := ca.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Get(ctx, id); err == nil {
		t.Fatal("A still sees the sandbox after deleting it")
	}
	// A's open terminal ended with the reset.
	ptyDone := make(chan struct{})
	go func() { _, _ = openPTY.Wait(); close(ptyDone) }()
	select {
	case <-ptyDone:
	case <-time.After(30 * time.Second):
		t.Fatal("A's open PTY survived the recycle")
	}

	// User B takes from the pool until handed A's sandbox (FIFO: the
	// refill started by A's take may come first).
	cb := d.sdk(t, keyB)
	var b *client.Sandbox
	for i := 0; i < 3 && b == nil; i++ {
		waitPool(1)
		sb, err := cb.Create(ctx, client.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if sb.ID == id {
			b = sb
		}
	}
	if b == nil {
		t.Fatalf("the recycled sandbox never came out of the pool\n%s", d.logs.String())
	}
	if !b.FromPool || b.AccessToken == a.AccessToken {
		t.Fatalf("B's sandbox: from_pool=%v, same token=%v", b.FromPool, b.AccessToken == a.AccessToken)
	}
	if _, err := ca.Get(ctx, id); err == nil {
		t.Fatal("A sees B's sandbox")
	}

	// The host template's reset is the warm one (the init kept); the
	// checks below are its proof (the full reset's: TestRecycle* in
	// backend/native and POOL_WARM_RESET=false).
	if logs := d.logs.String(); strings.Contains(logs, "warm reset not possible") {
		t.Fatalf("the reset fell back to the full one:\n%s", grepLines(logs, "warm reset"))
	}
	// Files anywhere writable, and the profile.
	out = shIn(t, d, keyB, id, `ls -A /workspace /tmp /dev/shm "$HOME" 2>&1; grep -rs secretA /workspace /tmp /dev/shm /home /root /var/tmp 2>/dev/null; echo end`, nil)
	if strings.Contains(out, "secretA") || strings.Contains(out, "a.txt") || strings.Contains(out, ".bash_history") || !strings.HasSuffix(out, "end\n") {
		t.Fatalf("A's files survived the recycle:\n%s", out)
	}
	// Processes and sockets.
	out = shIn(t, d, keyB, id, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null`, nil)
	if strings.Contains(out, "31337") || strings.Contains(out, "http.server") || strings.Contains(strings.ToUpper(out), fmt.Sprintf(":%04X", port)) {
		t.Fatalf("A's processes or sockets survived the recycle:\n%s", out)
	}
	// The kernel's memory of the hosts A talked to, which any process of
	// the network namespace may list: TCP metrics and route exceptions.
	out = shIn(t, d, keyB, id, `ip tcp_metrics show; ip -6 tcp_metrics show; ip route show cache; ip -6 route show cache; echo end`, nil)
	if strings.Contains(out, inet.addr) || strings.Contains(out, inet.other) || !strings.HasSuffix(out, "end\n") {
		t.Fatalf("the kernel remembers A's peers after the recycle:\n%s", out)
	}
	// Env: the agent's, a login shell's, an interactive shell's.
	out = shIn(t, d, keyB, id, `env; bash -lc env; bash -ic env 2>/dev/null`, nil)
	if strings.Contains(out, "secretA") || strings.Contains(out, "A_CREATE_ENV") || strings.Contains(out, "A_EXEC_ENV") {
		t.Fatalf("A's env survived the recycle:\n%s", out)
	}
	// Code contexts.
	status, data = d.call(t, "GET", "/v1/sandboxes/"+id+"/code/contexts", keyB, nil)
	if status != http.StatusOK || strings.Contains(string(data), bashCtx) {
		t.Fatalf("A's code context survived: %d %s", status, data)
	}
	if x := mustRun(t, d, keyB, id, map[string]any{"code": "print(secret_var)"}); x.errName() != "NameError" || strings.Contains(x.stdout, "secretA") {
		t.Fatalf("A's code variable survived: %q %v", x.stdout, x.err)
	}
	// Network policy back to the default: the test host is reachable.
	if got := fetchInSandbox(t, d, keyB, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK") {
		t.Fatalf("A's deny rule survived the recycle: %s", got)
	}
	// B denies the host A's UDP flow went to, then sends from A's port to
	// it: A's flow must be gone, so B's own rule applies.
	status, data = d.call(t, "PUT", "/v1/sandboxes/"+id+"/network", keyB, map[string]any{"mode": "egress", "deny_out": []string{inet.other + "/32"}})
	if status != http.StatusOK {
		t.Fatalf("B's network update: %d %s", status, data)
	}
	if got := strings.TrimSpace(shIn(t, d, keyB, id, udpFromFixedPort(inet.other, "udp-B"), nil)); got == "udp-B" {
		t.Fatalf("B's datagram passed B's deny rule on A's conntrack entry")
	}
	for drained := false; !drained; {
		select {
		case got := <-udpGot:
			if got != "udp-A" {
				t.Fatalf("the test host got %q through B's deny rule", got)
			}
		default:
			drained = true
		}
	}
	// Tokens: A's access token and preview token are refused; B's works.
	shIn(t, d, keyB, id, `cd /tmp && setsid nohup python3 -m http.server `+fmt.Sprint(port)+` --bind 127.0.0.1 >/dev/null 2>&1 &
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", `+fmt.Sprint(port)+`)).close()' 2>/dev/null && break; sleep 0.1; done`, nil)
	if s := previewGet(t, d, id, port, a.AccessToken, ""); s != http.StatusUnauthorized {
		t.Fatalf("A's access token on B's sandbox: %d", s)
	}
	if s := previewGet(t, d, id, port, "", previewTok); s != http.StatusUnauthorized {
		t.Fatalf("A's preview token on B's sandbox: %d", s)
	}
	if s := previewGet(t, d, id, port, b.AccessToken, ""); s != http.StatusOK {
		t.Fatalf("B's access token: %d", s)
	}

	// At max_uses (2) the sandbox is destroyed, not recycled.
	if err := cb.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, data = d.call(t, "GET", "/metrics", "recycle-metrics", nil)
	if !strings.Contains(string(data), `agentbox_sandboxes_recycled_total{template="host"} 1`) {
		t.Fatalf("recycles counted wrong:\n%s", grepLines(string(data), "recycled"))
	}
	for i := 0; i < 3; i++ {
		waitPool(1)
		sb, err := cb.Create(ctx, client.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if sb.ID == id {
			t.Fatal("a sandbox at max_uses came out of the pool again")
		}
	}
}

// udpFromFixedPort is a script that sends msg from UDP port 40404 to port
// 5300 of host and prints the answer, or "no answer".
func udpFromFixedPort(host, msg string) string {
	return `python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 40404))
s.settimeout(2)
try:
    s.sendto(b"` + msg + `", ("` + host + `", 5300))
    print(s.recvfrom(64)[0].decode())
except OSError as e:
    print("no answer:", e)
EOF`
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
