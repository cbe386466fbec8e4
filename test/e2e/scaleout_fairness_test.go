package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// holdServer accepts connections on port 8000 of its sandbox and answers
// none of them until /tmp/release exists: a preview port that never
// answers, for as long as the test wants. Each accepted connection adds a
// line to /tmp/accepted.
const holdServer = `import os, socket, threading, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000))
s.listen(512)
open("/tmp/ready", "w").close()
lock = threading.Lock()
def hold(c):
    deadline = time.time() + 600
    while not os.path.exists("/tmp/release") and time.time() < deadline:
        time.sleep(0.05)
    try:
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nreleased")
    finally:
        c.close()
while True:
    c, _ = s.accept()
    with lock:
        with open("/tmp/accepted", "a") as f:
            f.write("x\n")
    threading.Thread(target=hold, args=(c,), daemon=True).start()
`

// clientFrom is an HTTP client whose connections come from the loopback
// address src, so that a daemon's per-address connection cap sees each
// test client as the distinct client it stands for.
func clientFrom(src string, keepAlive bool) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: !keepAlive}}
}

// callFrom is daemon.call through hc.
func callFrom(t *testing.T, hc *http.Client, d *daemon, method, path, key string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// previewResult is how one preview request of a flood ended.
type previewResult struct {
	status     int
	retryAfter string
	body       string
	err        error
}

// The security finding this guards against: with two replicas, a tenant's
// previews through replica F to a port of its sandbox on replica H that
// never answers took every connection H accepts from F's address (H's
// per-address cap counted F as one client), so another tenant's exec
// through F failed with "unavailable: the replica running this sandbox
// did not answer; retry" until the flood ended.
//
// Here H accepts 16 connections per address. Tenant A floods 24 previews
// through F (from 24 client addresses, so F's own cap is no obstacle); all
// of them reach A's server on H and wait there. Tenant B's exec through F
// to its sandbox on H still succeeds: F's connections are authenticated
// (the forwarding header) and counted per replica, not per address. Then A
// floods 16 more: H admits A's previews only up to PREVIEW_MAX_PER_USER
// (32) in flight and refuses the rest at once with 429 and Retry-After; B
// is still served. Released, every admitted preview is answered.
func TestSecurityForwardingFairness(t *testing.T) {
	_, rs, ds := startReplicas(t, 2, "CLUSTER_PLACEMENT=local", "POOL_SIZE=0", "MAX_CONNECTIONS_PER_IP=16",
		// The flood is released by the test, long before this.
		"PREVIEW_MAX_PER_USER=32", "PREVIEW_HEADER_TIMEOUT=240")
	front, host := ds[0], ds[1]
	// The test's own calls to H come from an address of their own: H's
	// cap for F's address (127.0.0.1) is what is under test.
	direct := clientFrom("127.0.0.2", true)
	t.Cleanup(direct.CloseIdleConnections)

	create := func(key string) string {
		t.Helper()
		code, data := callFrom(t, direct, host, "POST", "/v1/sandboxes", key, map[string]any{})
		if code != http.StatusCreated {
			t.Fatalf("create on H: %d %s", code, data)
		}
		id, _ := mustJSON(t, data)["id"].(string)
		t.Cleanup(func() { callFrom(t, direct, host, "DELETE", "/v1/sandboxes/"+id, key, nil) })
		if rec, err := rs.Get(context.Background(), sandbox.ID(id)); err != nil || rec.Node != "r1" {
			t.Fatalf("sandbox %s not on H (r1): %+v %v", id, rec, err)
		}
		return id
	}
	idA, idB := create("k1"), create("k2")
	sh := func(script string) string {
		t.Helper()
		code, data := callFrom(t, direct, host, "POST", "/v1/sandboxes/"+idA+"/exec", "k1",
			map[string]any{"cmd": []string{"/bin/sh", "-c", script}, "timeout": 30})
		if code != http.StatusOK {
			t.Fatalf("exec in A's sandbox: %d %s", code, data)
		}
		return strings.TrimSpace(mustJSON(t, data)["stdout"].(string))
	}
	sh("cat > /tmp/hold.py <<'EOF'\n" + holdServer + "EOF\nsetsid nohup python3 /tmp/hold.py >/tmp/hold.log 2>&1 &")
	for i := 0; sh("test -e /tmp/ready && echo up") != "up"; i++ {
		if i == 100 {
			t.Fatalf("A's server did not start: %s", sh("cat /tmp/hold.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	accepted := func() int {
		n, _ := strconv.Atoi(sh("cat /tmp/accepted 2>/dev/null | wc -l"))
		return n
	}

	floodCtx, stopFlood := context.WithTimeout(context.Background(), 4*time.Minute)
	defer stopFlood()
	var mu sync.Mutex
	var results []previewResult
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopFlood() // before the wait: nothing hangs on at a failure
	// flood sends n previews of A through F, from addresses 127.0.0.first..
	flood := func(n, first int) {
		for i := range n {
			wg.Add(1)
			go func(src string) {
				defer wg.Done()
				hc := clientFrom(src, false)
				req, _ := http.NewRequestWithContext(floodCtx, "GET", front.url+"/v1/sandboxes/"+idA+"/ports/8000/", nil)
				req.Header.Set("Authorization", "Bearer k1")
				var res previewResult
				resp, err := hc.Do(req)
				if err != nil {
					res.err = err
				} else {
					data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
					resp.Body.Close()
					res = previewResult{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(data)}
				}
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			}(fmt.Sprintf("127.0.0.%d", first+i))
		}
	}
	// settle waits (bounded) until every one of total previews was either
	// answered or taken by A's server, and returns the answered ones.
	settle := func(total int) []previewResult {
		t.Helper()
		for i := 0; ; i++ {
			mu.Lock()
			answered := append([]previewResult(nil), results...)
			mu.Unlock()
			n := accepted()
			if len(answered)+n >= total {
				return answered
			}
			if i == 300 {
				t.Fatalf("after 30 s: %d previews answered, %d held by A's server, of %d", len(answered), n, total)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	execB := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := front.sdk(t, "k2").Exec(ctx, idB, client.ExecRequest{Cmd: []string{"echo", "b-served"}})
		if err != nil {
			t.Fatalf("%s: tenant B's exec through F: %v", when, err)
		}
		if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "b-served" {
			t.Fatalf("%s: tenant B's exec through F: %+v", when, res)
		}
	}

	flood(24, 10)
	early := settle(24)
	execB("while A's 24 previews wait on H")
	if len(early) != 0 || accepted() != 24 {
		t.Fatalf("A's first 24 previews: %d held by its server, answered early: %+v", accepted(), early)
	}

	flood(16, 40)
	refused := settle(40)
	if n := accepted(); n != 32 {
		t.Fatalf("A's server holds %d previews; PREVIEW_MAX_PER_USER is 32", n)
	}
	if len(refused) != 8 {
		t.Fatalf("%d of A's 16 further previews answered while the others wait, want 8: %+v", len(refused), refused)
	}
	for _, r := range refused {
		if r.status != http.StatusTooManyRequests || r.retryAfter == "" || !strings.Contains(r.body, "PREVIEW_MAX_PER_USER") {
			t.Fatalf("a preview over the per-user limit: %+v", r)
		}
	}
	execB("while A holds its 32 previews")

	sh("touch /tmp/release")
	wg.Wait()
	if len(results) != 40 {
		t.Fatalf("%d results, want 40", len(results))
	}
	released, limited := 0, 0
	for _, r := range results {
		switch {
		case r.status == http.StatusOK && r.body == "released":
			released++
		case r.status == http.StatusTooManyRequests:
			limited++
		}
	}
	if released != 32 || limited != 8 {
		t.Fatalf("%d of the 32 held previews answered once released (and %d refused): %+v", released, limited, results)
	}
}
