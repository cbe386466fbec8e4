package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeDesktop is a stand-in, in Python, for what the browser and desktop
// templates serve on the sandbox's loopback: Chromium's DevTools on 9222
// (a /json/version that names a foreign host, a browser WebSocket that
// answers with the headers it was sent) and two VNC servers on 5910 and
// 5911 that greet and log every byte they receive. It is hostile sandbox
// code as much as a fake: the daemon must not believe its host names.
const fakeDesktop = `import base64, hashlib, json, socket, threading
def devtools(c, port):
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            return
        data += d
    lines = data.split(b"\r\n\r\n")[0].decode("latin1").split("\r\n")
    path = lines[0].split()[1]
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if path == "/json/version":
        body = json.dumps({"Browser": "fake/1", "webSocketDebuggerUrl": "ws://169.254.169.254:80/devtools/browser/fake-1"}).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    elif path == "/devtools/browser/fake-1" and hdrs.get("upgrade", "").lower() == "websocket":
        acc = base64.b64encode(hashlib.sha1((hdrs["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
        msg = json.dumps(hdrs).encode()
        c.sendall(bytes([0x81, 126, len(msg) >> 8, len(msg) & 255]) + msg)
        c.recv(1)
    else:
        c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    c.close()
def vnc(c, port):
    c.sendall(b"RFB 003.008\n")
    with open("/tmp/vnc-%d.log" % port, "ab") as f:
        while True:
            d = c.recv(4096)
            if not d:
                break
            f.write(d)
            f.flush()
    c.close()
def serve(port, fn):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    while True:
        c, _ = s.accept()
        threading.Thread(target=fn, args=(c, port), daemon=True).start()
for port, fn in ((9222, devtools), (5910, vnc), (5911, vnc)):
    threading.Thread(target=serve, args=(port, fn), daemon=True).start()
threading.Event().wait()
`

// startFakeDesktop runs fakeDesktop in sandbox id and waits for it.
func startFakeDesktop(t *testing.T, d *daemon, key, id string) {
	t.Helper()
	script := "cat > /tmp/fake.py <<'EOF'\n" + fakeDesktop + "EOF\nsetsid python3 /tmp/fake.py </dev/null >/tmp/fake.out 2>&1 &"
	if out, code := sbRunAs(t, d, key, id, script); code != 0 {
		t.Fatalf("start the fake desktop: %d %s", code, out)
	}
	waitFor(t, "the fake desktop", func() (bool, string) {
		out, _ := sbRunAs(t, d, key, id, "python3 -c 'import socket\nfor p in (9222, 5910, 5911): socket.create_connection((\"127.0.0.1\", p)).close()\nprint(\"up\")' 2>&1; cat /tmp/fake.out")
		return strings.HasPrefix(out, "up"), out
	})
}

func wsURL(d *daemon, path string) string { return "ws" + strings.TrimPrefix(d.url, "http") + path }

// TestSecurityBrowserRoutes probes the browser and desktop routes (/cdp,
// its discovery document, /computer, desktop links, the desktop
// WebSocket, recording) against a fake desktop in a host sandbox, so that
// they hold without building the browser and desktop templates: another
// tenant gets 404 everywhere; the daemon passes no credential, cookie or
// Origin to the sandbox's DevTools and believes no host the sandbox names;
// a desktop link opens only its own sandbox in its own mode; the view-only
// socket passes no input message to the sandbox's VNC server whatever the
// page sends; and on a keyless daemon a page on another origin (or a
// rebound host name) opens neither WebSocket.
func TestSecurityBrowserRoutes(t *testing.T) {
	const alice, bob = "k-alice-browser", "k-bob-browser"
	d := startDaemon(t, "API_KEYS="+alice+":alice,"+bob+":bob")
	id := createRaw(t, d, alice, map[string]any{})
	defer deleteSandbox(t, d, alice, id)
	other := createRaw(t, d, alice, map[string]any{})
	defer deleteSandbox(t, d, alice, other)
	startFakeDesktop(t, d, alice, id)
	upgrade := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}

	// Another tenant: 404 on every route, WebSockets included.
	for _, c := range []struct {
		method, path string
		body         any
		hdr          []string
	}{
		{"GET", "/cdp/json/version", nil, nil},
		{"GET", "/cdp", nil, upgrade},
		{"POST", "/computer", map[string]any{"action": "screenshot"}, nil},
		{"POST", "/desktop/links", map[string]any{"mode": "interactive"}, nil},
		{"GET", "/desktop/record", nil, nil},
		{"POST", "/desktop/record", map[string]any{"action": "stop"}, nil},
	} {
		if status, data := d.call(t, c.method, "/v1/sandboxes/"+id+c.path, bob, c.body, c.hdr...); status != http.StatusNotFound {
			t.Errorf("bob %s %s of alice's sandbox: %d %s, want 404", c.method, c.path, status, data)
		}
	}

	// The discovery document names the daemon's /cdp, never the host the
	// sandbox's answer names.
	status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/cdp/json/version", alice, nil)
	if status != http.StatusOK {
		t.Fatalf("cdp/json/version: %d %s", status, data)
	}
	if v := mustJSON(t, data); v["webSocketDebuggerUrl"] != wsURL(d, "/v1/sandboxes/"+id+"/cdp") || v["Browser"] != "fake/1" {
		t.Errorf("cdp/json/version: %v", v)
	}
	// What reaches the sandbox's DevTools: no key, token, cookie or
	// Origin; a loopback Host.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+alice)
	hdr.Set("X-Access-Token", "some-token")
	hdr.Set("Cookie", "agentbox_preview=secret; other=secret")
	ws, _, err := websocket.Dial(ctx, wsURL(d, "/v1/sandboxes/"+id+"/cdp"), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("dial /cdp: %v", err)
	}
	_, msg, err := ws.Read(ctx)
	ws.CloseNow()
	if err != nil {
		t.Fatalf("read /cdp: %v", err)
	}
	var seen map[string]string
	if err := json.Unmarshal(msg, &seen); err != nil {
		t.Fatalf("the fake DevTools' message %q: %v", msg, err)
	}
	for _, h := range []string{"authorization", "x-access-token", "cookie", "origin"} {
		if v, ok := seen[h]; ok {
			t.Errorf("the sandbox's DevTools received %s: %q", h, v)
		}
	}
	if seen["host"] != "127.0.0.1:9222" || strings.Contains(string(msg), "secret") || strings.Contains(string(msg), alice) {
		t.Errorf("headers the sandbox's DevTools received: %s", msg)
	}

	// Desktop links: bound to their sandbox and mode.
	link := func(mode string, ttl int) url.Values {
		t.Helper()
		status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/desktop/links", alice, map[string]any{"mode": mode, "ttl": ttl})
		if status != http.StatusCreated {
			t.Fatalf("%s link: %d %s", mode, status, data)
		}
		u, err := url.Parse(mustJSON(t, data)["url"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return u.Query()
	}
	view, inter := link("view", 600), link("interactive", 600)
	if status, data := d.call(t, "GET", "/v1/sandboxes/"+other+"/desktop?"+view.Encode(), "", nil); status != http.StatusUnauthorized {
		t.Errorf("a link of one sandbox opens the owner's other sandbox: %d %s", status, data)
	}
	forged := url.Values{"mode": {"interactive"}, "exp": view["exp"], "sig": view["sig"]}
	if status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/desktop/ws?"+forged.Encode(), "", nil, upgrade...); status != http.StatusUnauthorized {
		t.Errorf("a view link's signature as interactive: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/desktop/ws?"+view.Encode(), "", nil, append(upgrade, "Origin", "http://evil.example")...); status != http.StatusForbidden {
		t.Errorf("desktop WebSocket from another origin: %d %s, want 403", status, data)
	}

	// The view socket passes the handshake and what watching needs, and
	// none of the input a page sends: keys, pointer, clipboard.
	handshake := []byte("RFB 003.008\n\x01\x01")
	setEncodings := []byte{2, 0, 0, 1, 0, 0, 0, 0}
	updateReq := []byte{3, 1, 0, 0, 0, 0, 5, 0, 3, 32}
	input := [][]byte{
		{4, 1, 0, 0, 0, 0, 0, 'A'},              // KeyEvent: down, 'A'
		{5, 1, 0, 10, 0, 20},                    // PointerEvent: button 1 at (10, 20)
		{6, 0, 0, 0, 0, 0, 0, 3, 'r', 'm', '!'}, // ClientCutText "rm!"
	}
	drive := func(q url.Values, port, want int) []byte {
		t.Helper()
		ws, _, err := websocket.Dial(ctx, wsURL(d, "/v1/sandboxes/"+id+"/desktop/ws?"+q.Encode()), &websocket.DialOptions{Subprotocols: []string{"binary"}})
		if err != nil {
			t.Fatalf("desktop WebSocket: %v", err)
		}
		defer ws.CloseNow()
		if _, greeting, err := ws.Read(ctx); err != nil || string(greeting) != "RFB 003.008\n" {
			t.Fatalf("greeting %q %v", greeting, err)
		}
		msgs := append([][]byte{handshake, setEncodings, updateReq}, input...)
		for _, m := range append(msgs, updateReq) {
			if err := ws.Write(ctx, websocket.MessageBinary, m); err != nil {
				t.Fatalf("write: %v", err)
			}
		}
		var got []byte
		waitFor(t, "the fake VNC server's log", func() (bool, string) {
			out, _ := sbRunAs(t, d, alice, id, fmt.Sprintf("od -An -v -tx1 /tmp/vnc-%d.log 2>/dev/null", port))
			got = hexBytes(out)
			return len(got) >= want, out
		})
		ws.Close(websocket.StatusNormalClosure, "")
		return got
	}
	want := bytes.Join([][]byte{handshake, setEncodings, updateReq, updateReq}, nil)
	got := drive(view, 5911, len(want))
	if !bytes.Equal(got, want) {
		t.Errorf("the view-only VNC server received % x,\nwant only % x", got, want)
	}
	// The interactive link passes input (the filter is the view link's).
	got = drive(inter, 5910, len(want)+len(bytes.Join(input, nil)))
	if !bytes.Contains(got, input[0]) || !bytes.Contains(got, input[2]) {
		t.Errorf("the interactive VNC server received % x: no input", got)
	}

	// A keyless daemon: a page on another origin, or on a rebound name,
	// opens neither WebSocket (browsers send no CORS preflight for them).
	k := startDaemon(t)
	kid := createRaw(t, k, "", map[string]any{})
	defer deleteSandbox(t, k, "", kid)
	startFakeDesktop(t, k, "", kid)
	status, data = k.call(t, "POST", "/v1/sandboxes/"+kid+"/desktop/links", "", map[string]any{"mode": "interactive"})
	if status != http.StatusCreated {
		t.Fatalf("keyless link: %d %s", status, data)
	}
	kq, _ := url.Parse(mustJSON(t, data)["url"].(string))
	host := strings.TrimPrefix(k.url, "http://")
	for _, p := range []string{"/v1/sandboxes/" + kid + "/cdp", "/v1/sandboxes/" + kid + "/desktop/ws?" + kq.RawQuery} {
		for name, h := range map[string][]string{
			"another origin":   {"Origin", "http://evil.example"},
			"a null origin":    {"Origin", "null"},
			"a rebound name":   {"Host", "evil.example:" + host[strings.LastIndex(host, ":")+1:]},
			"a preview origin": {"Origin", "http://9222-" + kid + ".localhost:" + host[strings.LastIndex(host, ":")+1:]},
		} {
			if status, data := k.call(t, "GET", p, "", nil, append(upgrade, h...)...); status != http.StatusForbidden {
				t.Errorf("keyless %s from %s: %d %.200s, want 403", p, name, status, data)
			}
		}
	}
	// The daemon's own page (same origin) does open it.
	own := http.Header{}
	own.Set("Origin", k.url)
	kws, _, err := websocket.Dial(ctx, wsURL(k, "/v1/sandboxes/"+kid+"/cdp"), &websocket.DialOptions{HTTPHeader: own})
	if err != nil {
		t.Fatalf("keyless /cdp from the daemon's own origin: %v", err)
	}
	if _, msg, err := kws.Read(ctx); err != nil || !strings.Contains(string(msg), `"host": "127.0.0.1:9222"`) {
		t.Errorf("keyless /cdp from the daemon's own origin: %q %v", msg, err)
	}
	kws.CloseNow()
}

// hexBytes parses od's hex output.
func hexBytes(s string) []byte {
	var out []byte
	for _, f := range strings.Fields(s) {
		var b byte
		if _, err := fmt.Sscanf(f, "%02x", &b); err == nil {
			out = append(out, b)
		}
	}
	return out
}
