package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	pngpkg "image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// buildDesktop builds templates/base, browser and desktop into d's
// template store (the test cache's), as `make templates` does: a cached
// store runs no step.
func buildDesktop(t *testing.T, ctx context.Context, d *daemon, key string) {
	t.Helper()
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("needs mmdebstrap (apt-get install mmdebstrap) to bootstrap debian:bookworm")
	}
	bin, _ := binaries(t)
	boot := exec.CommandContext(ctx, bin, "template", "bootstrap", "debian:bookworm")
	boot.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+key)
	if out, err := boot.CombinedOutput(); err != nil {
		t.Skipf("cannot bootstrap debian:bookworm on this host (no Debian mirror reachable through its apt settings?): %v\n%s", err, lastLines(string(out), 20))
	}
	for _, name := range []string{"base", "browser", "desktop"} {
		args := append([]string{"template", "build", "-t", name}, builtinSecrets()...)
		args = append(args, templateContext(t, ctx, name))
		out, took := templateCLIAs(t, ctx, d, key, args...)
		t.Logf("build %s: %s, %d steps run, %d cached", name, took.Round(time.Millisecond),
			strings.Count(out, "---> Running in"), strings.Count(out, "---> Using cache"))
	}
	if info := getTemplate(t, d, key, "desktop"); info["size"] != nil {
		t.Logf("desktop template: %.0f MiB unpacked (browser: %.0f MiB)", info["size"].(float64)/(1<<20), getTemplate(t, d, key, "browser")["size"].(float64)/(1<<20))
	}
}

// TestDesktopTemplate builds templates/desktop (FROM browser) into the test
// cache's template store and checks a desktop sandbox from outside: the
// desktop runs when create returns, its noVNC page opens in a real
// Chromium behind a signed link (refused without, with a bad or an expired
// signature), a view link's click never reaches the desktop while an
// interactive link's does, recordings play, and the SDK and CLI work.
func TestDesktopTemplate(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := waitCtx(t, 30*time.Minute)
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	const alice, bob = "k-alice", "k-bob"
	d := startDaemon(t, "TEMPLATE_DIR="+tmplDir, "API_KEYS=k-alice:alice,k-bob:bob", "TEMPLATE_ADMIN_USERS=alice")
	buildDesktop(t, ctx, d, alice)
	mods := playwrightDir(t)
	if _, err := os.Stat(chromiumPath()); err != nil {
		failOrSkip(t, "needs Chromium on the host (apt-get install chromium): %v", err)
	}

	checkDesktopSandbox(t, d, mods, alice, bob)

	// A warm pool of desktop sandboxes: create hands out a sandbox whose
	// desktop already runs.
	d.stop()
	d2 := startDaemon(t, "TEMPLATE_DIR="+tmplDir, `SANDBOX_TEMPLATES={"base":"host","filesystem":"host","desktop":"desktop:latest"}`,
		"DEFAULT_SANDBOX_TYPE=desktop", "POOL_SIZE=1")
	level := func() float64 {
		_, data := d2.call(t, "GET", "/v1/info", "", nil)
		pools, _ := mustJSON(t, data)["pools"].(map[string]any)
		n, _ := pools["desktop"].(float64)
		return n
	}
	waitForN(t, 600, "a warm desktop sandbox in the pool", func() (bool, string) { return level() == 1, fmt.Sprint(level()) })
	start := time.Now()
	pooled := createRaw(t, d2, "", map[string]any{"template": "desktop"})
	created := time.Since(start)
	defer deleteSandbox(t, d2, "", pooled)
	if status, data := computer(t, d2, "", pooled, map[string]any{"action": "screenshot"}); status != http.StatusOK {
		t.Fatalf("first screenshot of a pooled desktop sandbox: %d %s", status, data)
	}
	t.Logf("pool hit: create %s; create to first screenshot %s", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	_, data := d2.call(t, "GET", "/v1/sandboxes/"+pooled, "", nil)
	if mustJSON(t, data)["from_pool"] != true {
		t.Errorf("the create was not a pool hit: %s", data)
	}
	// A keyless daemon: the page and its WebSocket keep the browser guard
	// (a foreign page cannot open the socket even with a link).
	status, data := d2.call(t, "POST", "/v1/sandboxes/"+pooled+"/desktop/links", "", map[string]any{"mode": "interactive"})
	if status != http.StatusCreated {
		t.Fatalf("desktop link on a keyless daemon: %d %s", status, data)
	}
	path := mustJSON(t, data)["path"].(string)
	upgrade := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	wsPath := strings.Replace(path, "/desktop?", "/desktop/ws?", 1)
	if status, data := d2.call(t, "GET", wsPath, "", nil, append(upgrade, "Origin", "http://evil.example")...); status != http.StatusForbidden {
		t.Errorf("desktop WebSocket from a foreign origin: %d %s, want 403", status, data)
	}
	if status, data := d2.call(t, "GET", path, "", nil, "Host", "evil.example"); status != http.StatusForbidden {
		t.Errorf("desktop page under a foreign host name on a keyless daemon: %d %s, want 403", status, data)
	}
}

// checkDesktopSandbox creates desktop sandboxes on d and checks them from
// outside; everything it creates is gone when it returns.
func checkDesktopSandbox(t *testing.T, d *daemon, mods, alice, bob string) {
	start := time.Now()
	id := createRaw(t, d, alice, map[string]any{"template": "desktop"})
	created := time.Since(start)
	defer deleteSandbox(t, d, alice, id)
	status, shot := computer(t, d, alice, id, map[string]any{"action": "screenshot"})
	if status != http.StatusOK {
		t.Fatalf("first screenshot of a desktop sandbox: %d %s", status, shot)
	}
	t.Logf("cold: create %s; create to first screenshot %s", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	// Create returned with the desktop up: the window manager and the
	// desktop run, and the screen shows it (not one colour).
	if out, code := sbRunAs(t, d, alice, id, `pgrep -x xfwm4 >/dev/null && pgrep -x xfdesktop >/dev/null && echo up`); code != 0 || out != "up" {
		t.Fatalf("desktop processes right after create: %d %q", code, out)
	}
	if n := pngColors(t, shot); n < 5 {
		t.Errorf("first screenshot has %d colours: the desktop is not drawn", n)
	}
	_, data := d.call(t, "GET", "/v1/sandboxes/"+id, alice, nil)
	if res, _ := mustJSON(t, data)["resources"].(map[string]any); res["memory"] != float64(2<<30) || res["pids"] != 1024.0 {
		t.Errorf("resources of a desktop sandbox: %v, want the template's labels (2G, 1024)", res)
	}
	// A Chromium started on the desktop (Debian's wrapper reads the
	// template's flags) runs.
	if out, code := sbRunAs(t, d, alice, id, `timeout 60 chromium --headless --disable-gpu --dump-dom 'data:text/html,<title>on the desktop</title>' 2>/dev/null`); code != 0 || !strings.Contains(out, "<title>on the desktop</title>") {
		t.Errorf("chromium in a desktop sandbox: exit %d: %.300s", code, out)
	}
	// VNC listens on the sandbox's loopback only.
	if out, _ := sbRunAs(t, d, alice, id, `netstat -tln | awk '$4 ~ /:591[01]$/ {print $4}' | sort`); out != "127.0.0.1:5910\n127.0.0.1:5911" {
		t.Errorf("VNC listeners: %q, want 127.0.0.1:5910 and 127.0.0.1:5911 only", out)
	}

	checkDesktopLinks(t, d, mods, alice, bob, id)
	checkRecording(t, d, alice, bob, id)
	checkDesktopClients(t, d, alice, id)

	// Idle memory, next to an idle base sandbox's (the reference).
	plain := createRaw(t, d, alice, map[string]any{"template": "base:latest"})
	defer deleteSandbox(t, d, alice, plain)
	browser := createRaw(t, d, alice, map[string]any{"template": "browser"})
	defer deleteSandbox(t, d, alice, browser)
	idle := createRaw(t, d, alice, map[string]any{"template": "desktop"})
	defer deleteSandbox(t, d, alice, idle)
	for _, s := range []struct{ name, id string }{{"desktop", idle}, {"browser (reference)", browser}, {"base (reference)", plain}} {
		var mem float64
		var pids any
		waitForN(t, 150, "an idle "+s.name+" sandbox's stats", func() (bool, string) {
			status, data := d.call(t, "GET", "/v1/sandboxes/"+s.id+"/stats", alice, nil)
			st := mustJSON(t, data)
			mem, _ = st["memory_bytes"].(float64)
			pids = st["pids"]
			return status == http.StatusOK && mem > 0, string(data)
		})
		t.Logf("idle %s sandbox: memory %.0f MiB, %v pids", s.name, mem/(1<<20), pids)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+plain+"/desktop/links", alice, map[string]any{}); status != http.StatusConflict ||
		!strings.Contains(string(data), "sandbox "+plain+" has no desktop") || !strings.Contains(string(data), "desktop template") {
		t.Errorf("a desktop link to a base sandbox: %d %s, want 409 saying it has no desktop", status, data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+plain+"/desktop/record", alice, map[string]any{"action": "start"}); status != http.StatusConflict {
		t.Errorf("recording a base sandbox: %d %s, want 409", status, data)
	}

}

// chromiumPath is the host's Chromium the page tests drive.
func chromiumPath() string {
	if p := os.Getenv("AGENTBOX_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// failOrSkip fails in CI (make test installs what is missing) and skips
// elsewhere.
func failOrSkip(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// pngColors counts the distinct colours of a PNG, sampled every 4 pixels.
func pngColors(t *testing.T, data []byte) int {
	t.Helper()
	img, err := pngpkg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	return imageColors(img)
}

func imageColors(img image.Image) int {
	colors := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
		}
	}
	return len(colors)
}

// openDesktopPage runs testdata/desktop_page.cjs on link and returns its
// result and the screenshot it saved.
func openDesktopPage(t *testing.T, mods, link string, click ...string) (map[string]any, []byte) {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "page.png")
	args := append([]string{filepath.Join(root, "test", "e2e", "testdata", "desktop_page.cjs"), link, out}, click...)
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods, "CHROMIUM="+chromiumPath())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("desktop page %s: %v\n%s", link, err, lastLines(stderr.String(), 30))
	}
	r := mustJSON(t, res)
	png, _ := os.ReadFile(out)
	return r, png
}

// xevWindow starts xev (it prints every event its window gets) in sandbox
// id and returns its log's path and the window's centre.
func xevWindow(t *testing.T, d *daemon, key, id string) (string, int, int) {
	t.Helper()
	log := "/tmp/xev-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".log"
	if out, code := sbRunAs(t, d, key, id, `(setsid -f xev -geometry 400x300+300+200 >`+log+` 2>&1) && echo started`); code != 0 {
		t.Fatalf("start xev: %d %s", code, out)
	}
	var x, y, w, h int
	waitForN(t, 150, "xev's window mapped", func() (bool, string) {
		out, _ := sbRunAs(t, d, key, id, `wid=$(xdotool search --onlyvisible --name '^Event Tester$' | tail -1) && [ -n "$wid" ] && xdotool getwindowgeometry --shell "$wid"`)
		vals := map[string]int{}
		for _, line := range strings.Fields(out) {
			k, v, _ := strings.Cut(line, "=")
			vals[k], _ = strconv.Atoi(v)
		}
		x, y, w, h = vals["X"], vals["Y"], vals["WIDTH"], vals["HEIGHT"]
		return w >= 100 && h >= 100, out
	})
	// xev prints its first events (map, expose) once it runs: wait for
	// them so that later reads see a live log.
	waitFor(t, "xev's first events", func() (bool, string) {
		out, _ := sbRunAs(t, d, key, id, `cat `+log)
		return strings.Contains(out, "MapNotify") || strings.Contains(out, "Expose"), out
	})
	return log, x + w/2, y + h/2
}

var buttonPress = regexp.MustCompile(`ButtonPress event[^\n]*\n[^\n]*\(\d+,\d+\), root:\((\d+),(\d+)\)`)

// pressesIn returns the root coordinates of xev's ButtonPress events.
func pressesIn(t *testing.T, d *daemon, key, id, log string) [][2]int {
	t.Helper()
	out, _ := sbRunAs(t, d, key, id, `cat `+log)
	var got [][2]int
	for _, m := range buttonPress.FindAllStringSubmatch(out, -1) {
		x, _ := strconv.Atoi(m[1])
		y, _ := strconv.Atoi(m[2])
		got = append(got, [2]int{x, y})
	}
	return got
}

func checkDesktopLinks(t *testing.T, d *daemon, mods, alice, bob, id string) {
	link := func(key string, body map[string]any) (int, map[string]any) {
		status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/desktop/links", key, body)
		if status != http.StatusCreated {
			return status, map[string]any{"body": string(data)}
		}
		return status, mustJSON(t, data)
	}
	status, view := link(alice, map[string]any{"mode": "view", "ttl": 600})
	if status != http.StatusCreated || view["mode"] != "view" || !strings.HasPrefix(view["url"].(string), d.url+"/v1/sandboxes/"+id+"/desktop?") {
		t.Fatalf("view link: %d %v", status, view)
	}
	status, inter := link(alice, map[string]any{"mode": "interactive"})
	if status != http.StatusCreated || inter["mode"] != "interactive" {
		t.Fatalf("interactive link: %d %v", status, inter)
	}
	if exp, _ := time.Parse(time.RFC3339, inter["expires_at"].(string)); time.Until(exp) < 50*time.Minute || time.Until(exp) > 61*time.Minute {
		t.Errorf("default link expiry %v, want in an hour", inter["expires_at"])
	}
	// Only the owner gets links; bad requests are refused.
	for _, c := range []struct {
		key  string
		body map[string]any
		want int
	}{
		{bob, map[string]any{}, http.StatusNotFound},
		{"", map[string]any{}, http.StatusUnauthorized},
		{alice, map[string]any{"mode": "admin"}, http.StatusBadRequest},
		{alice, map[string]any{"ttl": 25 * 3600}, http.StatusBadRequest},
		{alice, map[string]any{"ttl": -1}, http.StatusBadRequest},
		{alice, map[string]any{"sig": "x"}, http.StatusBadRequest},
	} {
		if status, body := link(c.key, c.body); status != c.want {
			t.Errorf("link as %q with %v: %d %v, want %d", c.key, c.body, status, body, c.want)
		}
	}

	// The page opens only with a valid signature.
	viewURL, _ := url.Parse(view["url"].(string))
	q := viewURL.Query()
	page := func(q url.Values) (int, string) {
		status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/desktop?"+q.Encode(), "", nil)
		return status, string(data)
	}
	with := func(k, v string) url.Values {
		c := url.Values{}
		for kk, vv := range q {
			c[kk] = vv
		}
		if v == "" {
			c.Del(k)
		} else {
			c.Set(k, v)
		}
		return c
	}
	status, body := page(q)
	if status != http.StatusOK || !strings.Contains(body, "/desktop/assets/desktop.js") {
		t.Fatalf("desktop page with its link: %d %s", status, body)
	}
	sig := q.Get("sig")
	flipped := string(rune(sig[0]^1)) + sig[1:]
	exp, _ := strconv.ParseInt(q.Get("exp"), 10, 64)
	for name, bad := range map[string]url.Values{
		"no signature":                 with("sig", ""),
		"no expiry":                    with("exp", ""),
		"a bad signature":              with("sig", flipped),
		"a truncated signature":        with("sig", sig[:len(sig)-2]),
		"the view link as interactive": with("mode", "interactive"),
		"a later expiry":               with("exp", strconv.FormatInt(exp+60, 10)),
		"a far expiry":                 with("exp", strconv.FormatInt(exp+365*24*3600, 10)),
		"nothing":                      {},
	} {
		if status, body := page(bad); status != http.StatusUnauthorized {
			t.Errorf("desktop page with %s: %d %s, want 401", name, status, body)
		}
	}
	if status, body := d.call(t, "GET", "/v1/sandboxes/sbx-other/desktop?"+q.Encode(), "", nil); status != http.StatusUnauthorized {
		t.Errorf("the link's signature on another sandbox: %d %s, want 401", status, body)
	}
	// The WebSocket is held to the same rules.
	upgrade := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	if status, body := d.call(t, "GET", "/v1/sandboxes/"+id+"/desktop/ws?"+with("sig", flipped).Encode(), "", nil, upgrade...); status != http.StatusUnauthorized {
		t.Errorf("desktop WebSocket with a bad signature: %d %s, want 401", status, body)
	}
	// Another site's page cannot open the socket, even with a valid link;
	// a plain GET of it is a clear error.
	if status, body := d.call(t, "GET", "/v1/sandboxes/"+id+"/desktop/ws?"+q.Encode(), "", nil, append(upgrade, "Origin", "http://evil.example")...); status != http.StatusForbidden {
		t.Errorf("desktop WebSocket with a valid link from another origin: %d %s, want 403", status, body)
	}
	if status, body := d.call(t, "GET", "/v1/sandboxes/"+id+"/desktop/ws?"+q.Encode(), "", nil); status != http.StatusBadRequest {
		t.Errorf("desktop WebSocket without an upgrade: %d %s, want 400", status, body)
	}
	// A session ends when its link expires: the VNC server's greeting
	// arrives, then the daemon closes the socket.
	status, brief := link(alice, map[string]any{"mode": "view", "ttl": 3})
	if status != http.StatusCreated {
		t.Fatalf("a three-second link: %d %v", status, brief)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	ws, _, err := websocket.Dial(wctx, "ws"+strings.TrimPrefix(d.url, "http")+strings.Replace(brief["path"].(string), "/desktop?", "/desktop/ws?", 1),
		&websocket.DialOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		t.Fatalf("desktop WebSocket with a valid link: %v", err)
	}
	defer ws.CloseNow()
	if _, greeting, err := ws.Read(wctx); err != nil || !strings.HasPrefix(string(greeting), "RFB 003.") {
		t.Fatalf("the VNC server's greeting: %q %v", greeting, err)
	}
	if _, _, err := ws.Read(wctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "expired") {
		t.Errorf("a session past its link's expiry: %v, want closed as expired", err)
	}

	// An expired link: a link of one second, refused once it is past.
	status, short := link(alice, map[string]any{"mode": "view", "ttl": 1})
	if status != http.StatusCreated {
		t.Fatalf("a one-second link: %d %v", status, short)
	}
	shortPath := short["path"].(string)
	waitFor(t, "the one-second link to expire", func() (bool, string) {
		status, data := d.call(t, "GET", shortPath, "", nil)
		return status == http.StatusUnauthorized && strings.Contains(string(data), "expired"), fmt.Sprint(status, string(data))
	})

	// A person opens the view link in Chromium: noVNC connects and shows
	// the desktop.
	res, png := openDesktopPage(t, mods, view["url"].(string))
	if res["state"] != "connected" || res["label"] != "view only" || len(res["problems"].([]any)) > 0 {
		t.Fatalf("the view page in Chromium: %v", res)
	}
	if n := pngColors(t, png); n < 10 {
		t.Errorf("the page's screenshot has %d colours: the desktop is not shown", n)
	}
	t.Logf("desktop page (view): %v", res["canvas"])
	// An expired or forged link in Chromium: no page.
	if res, _ := openDesktopPage(t, mods, d.url+shortPath); res["status"] != 401.0 {
		t.Errorf("an expired link in Chromium: %v", res)
	}

	// A click through the view link, with the page's own view-only
	// turned off so that it really is sent, does not reach the desktop; the
	// same click through the interactive link does.
	log, cx, cy := xevWindow(t, d, alice, id)
	vx, vy := cx-100, cy-60
	if res, _ := openDesktopPage(t, mods, view["url"].(string), "click", strconv.Itoa(vx), strconv.Itoa(vy), "force"); res["clicked"] == nil {
		t.Fatalf("click through the view page: %v", res)
	}
	if res, _ := openDesktopPage(t, mods, inter["url"].(string), "click", strconv.Itoa(cx), strconv.Itoa(cy)); res["clicked"] == nil || res["label"] != "interactive" {
		t.Fatalf("click through the interactive page: %v", res)
	}
	var presses [][2]int
	waitForN(t, 100, "the interactive click in xev's window", func() (bool, string) {
		presses = pressesIn(t, d, alice, id, log)
		return len(presses) > 0, fmt.Sprint(presses)
	})
	if len(presses) != 1 || presses[0] != [2]int{cx, cy} {
		t.Errorf("clicks seen on the desktop: %v, want only the interactive one at (%d, %d) (the view click was at (%d, %d))", presses, cx, cy, vx, vy)
	}
}

func checkRecording(t *testing.T, d *daemon, alice, bob, id string) {
	rec := func(key, method string, body any) (int, map[string]any) {
		status, data := d.call(t, method, "/v1/sandboxes/"+id+"/desktop/record", key, body)
		if status != http.StatusOK {
			return status, map[string]any{"body": string(data)}
		}
		return status, mustJSON(t, data)
	}
	status, st := rec(alice, "POST", map[string]any{"action": "start", "name": "demo", "max_seconds": 120, "fps": 10})
	if status != http.StatusOK || st["recording"] != true || st["path"] != "/workspace/recordings/demo.mp4" {
		t.Fatalf("start recording: %d %v", status, st)
	}
	if status, st := rec(alice, "POST", map[string]any{"action": "start"}); status != http.StatusConflict {
		t.Errorf("a second recording: %d %v, want 409", status, st)
	}
	for _, bad := range []map[string]any{
		{"action": "start", "name": "../etc/x"},
		{"action": "start", "name": "-y"},
		{"action": "start", "fps": 100},
		{"action": "start", "max_seconds": -1},
		{"action": "start", "max_seconds": 100000},
		{"action": "start", "max_bytes": 10},
		{"action": "pause"},
		{"action": "stop", "name": "x"},
	} {
		if status, st := rec(alice, "POST", bad); status != http.StatusBadRequest {
			t.Errorf("record %v: %d %v, want 400", bad, status, st)
		}
	}
	if status, st := rec(bob, "GET", nil); status != http.StatusNotFound {
		t.Errorf("another tenant's recording status: %d %v", status, st)
	}
	// Something happens on the screen while it records.
	for i := range 5 {
		mustComputer(t, d, alice, id, map[string]any{"action": "move", "x": 100 + 100*i, "y": 100 + 50*i})
	}
	waitForN(t, 150, "the recording to grow", func() (bool, string) {
		_, st := rec(alice, "GET", nil)
		b, _ := st["bytes"].(float64)
		return st["recording"] == true && b > 0, fmt.Sprint(st)
	})
	status, st = rec(alice, "POST", map[string]any{"action": "stop"})
	if status != http.StatusOK || st["recording"] != false || st["bytes"].(float64) <= 0 {
		t.Fatalf("stop recording: %d %v", status, st)
	}
	checkVideo(t, d, alice, id, "/workspace/recordings/demo.mp4")

	// The time bound: a one-second recording ends by itself, playable.
	c := d.sdk(t, alice)
	ctx := waitCtx(t, 2*time.Minute)
	r, err := c.StartRecording(ctx, id, client.RecordOptions{Name: "short", MaxSeconds: 1})
	if err != nil || !r.Recording || r.Path != "/workspace/recordings/short.mp4" {
		t.Fatalf("StartRecording: %+v %v", r, err)
	}
	waitForN(t, 150, "the one-second recording to end by itself", func() (bool, string) {
		r, err = c.RecordingStatus(ctx, id)
		return err == nil && !r.Recording, fmt.Sprintf("%+v %v", r, err)
	})
	if r.Error != "" || r.Bytes <= 0 {
		t.Errorf("the one-second recording: %+v", r)
	}
	dur := checkVideo(t, d, alice, id, "/workspace/recordings/short.mp4")
	if dur > 1.5 {
		t.Errorf("a recording bounded to 1 s lasts %.2f s", dur)
	}
	if r, err := c.StopRecording(ctx, id); err != nil || r.Recording {
		t.Errorf("StopRecording with none running: %+v %v", r, err)
	}
}

// checkVideo probes a recording in the sandbox with ffprobe and decodes
// all of it with ffmpeg, and returns its duration in seconds.
func checkVideo(t *testing.T, d *daemon, key, id, file string) float64 {
	t.Helper()
	out, code := sbRunAs(t, d, key, id, `ffprobe -v error -select_streams v:0 -show_entries stream=codec_name,width,height -show_entries format=duration -of default=nw=1 `+file+` && ffmpeg -v error -i `+file+` -f null - && echo decoded`)
	if code != 0 || !strings.Contains(out, "codec_name=h264") || !strings.Contains(out, "width=1280") || !strings.Contains(out, "height=800") || !strings.HasSuffix(out, "decoded") {
		t.Fatalf("ffprobe %s: exit %d\n%s", file, code, out)
	}
	var dur float64
	for _, line := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(line, "duration="); ok {
			dur, _ = strconv.ParseFloat(v, 64)
		}
	}
	if dur <= 0 {
		t.Errorf("%s: duration %v\n%s", file, dur, out)
	}
	t.Logf("%s: %s", file, strings.ReplaceAll(out, "\n", " "))
	return dur
}

// checkDesktopClients: the Go SDK's and the CLI's desktop links.
func checkDesktopClients(t *testing.T, d *daemon, key, id string) {
	ctx := waitCtx(t, time.Minute)
	l, err := d.sdk(t, key).DesktopLink(ctx, id, "", 10*time.Minute)
	if err != nil || l.Mode != "view" || time.Until(l.ExpiresAt) > 11*time.Minute {
		t.Fatalf("DesktopLink: %+v %v", l, err)
	}
	if status, _ := d.call(t, "GET", l.Path, "", nil); status != http.StatusOK {
		t.Errorf("the SDK's link: %d", status)
	}
	out := strings.TrimSpace(cli(t, d, key, "desktop", id, "--view"))
	u, err := url.Parse(out)
	if err != nil || u.Query().Get("mode") != "view" {
		t.Fatalf("agentbox desktop --view: %q", out)
	}
	if status, _ := d.call(t, "GET", u.RequestURI(), "", nil); status != http.StatusOK {
		t.Errorf("the CLI's link: %d", status)
	}
	out = strings.TrimSpace(cli(t, d, key, "desktop", id))
	if u, err := url.Parse(out); err != nil || u.Query().Get("mode") != "interactive" {
		t.Errorf("agentbox desktop: %q", out)
	}
}

// The pinned @e2b/desktop (with the e2b SDK TestE2BSDK pins).
var e2bDesktopPackages = []string{"@e2b/desktop@2.4.0", "e2b@2.51.0"}

// e2bDesktopSDK installs the pinned @e2b/desktop into the test cache once
// and returns its node_modules.
func e2bDesktopSDK(t *testing.T, ctx context.Context) string {
	t.Helper()
	return filepath.Join(npmPackages(t, ctx, filepath.Join(testCache(t), "e2b-desktop-2.4.0"), e2bDesktopPackages...), "node_modules")
}

// TestE2BDesktop drives a desktop sandbox with the unmodified @e2b/desktop
// SDK (testdata/e2b_desktop.cjs): create from the desktop template,
// screenshot, moveMouse, leftClick, write, press, scroll, stream.start()
// and getUrl(); the test checks inside the sandbox that xev's window got
// the click, the keys and the wheel, and that the stream URL serves noVNC
// and speaks RFB through the daemon's preview of port 6080.
func TestE2BDesktop(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("node"); err != nil {
		failOrSkip(t, "needs node for @e2b/desktop: %v", err)
	}
	ctx := waitCtx(t, 30*time.Minute)
	mods := e2bDesktopSDK(t, ctx)
	tmplDir := filepath.Join(testCache(t), "templates")
	lockCache(t, ctx, tmplDir+".lock")
	const key = "e2b_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	d := startDaemon(t, "API_KEYS="+key+":alice", "TEMPLATE_DIR="+tmplDir, "TEMPLATE_ADMIN_USERS=alice")
	buildDesktop(t, ctx, d, key)

	bin, _ := binaries(t)
	envOut, err := exec.CommandContext(ctx, bin, "e2b", "env", "--url", d.url, "--api-key", key).Output()
	if err != nil {
		t.Fatalf("agentbox e2b env: %v", err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NODE_PATH=" + mods}
	domain := ""
	for _, line := range strings.Split(strings.TrimSpace(string(envOut)), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		env = append(env, k+"="+strings.Trim(v, "'"))
		if k == "E2B_DOMAIN" {
			domain = strings.Trim(v, "'")
		}
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	node := exec.CommandContext(nctx, "node", filepath.Join(root, "test", "e2e", "testdata", "e2b_desktop.cjs"))
	node.Env = env
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("@e2b/desktop: %v\n%s", err, lastLines(stderr.String(), 40))
	}
	res := mustJSON(t, out)
	id, _ := res["id"].(string)
	if id == "" {
		t.Fatalf("no sandbox id: %s", out)
	}
	defer deleteSandbox(t, d, key, id)
	t.Logf("@e2b/desktop: create %v ms, create to first screenshot %v ms", res["createMs"], res["screenshotMs"])

	// screenshot(): a PNG of the screen, showing the desktop.
	png, err := base64.StdEncoding.DecodeString(res["png"].(string))
	if err != nil {
		t.Fatalf("screenshot is not base64: %v", err)
	}
	cfg, err := pngpkg.DecodeConfig(bytes.NewReader(png))
	if err != nil || cfg.Width != 1280 || cfg.Height != 800 {
		t.Fatalf("screenshot: %+v %v", cfg, err)
	}
	if n := pngColors(t, png); n < 5 {
		t.Errorf("the SDK's screenshot has %d colours", n)
	}
	if size, _ := json.Marshal(res["size"]); string(size) != `{"height":800,"width":1280}` {
		t.Errorf("getScreenSize: %s", size)
	}
	target := res["target"].([]any)
	tx, ty := int(target[0].(float64)), int(target[1].(float64))
	if cur, _ := json.Marshal(res["cursor"]); string(cur) != fmt.Sprintf(`{"x":%d,"y":%d}`, tx-20, ty-20) {
		t.Errorf("getCursorPosition after moveMouse(%d, %d): %s", tx-20, ty-20, cur)
	}

	// What xev's window got: the left click where the SDK clicked, the
	// typed text and Return, ctrl+a, and two wheel clicks down.
	log, _ := sbRunAs(t, d, key, id, `cat /tmp/e2b-xev.log`)
	var buttons []string
	for _, m := range regexp.MustCompile(`ButtonPress event[^\n]*\n[^\n]*root:\((\d+),(\d+)\),\n[^\n]*button (\d+)`).FindAllStringSubmatch(log, -1) {
		buttons = append(buttons, m[1]+","+m[2]+":"+m[3])
	}
	at := fmt.Sprintf("%d,%d", tx, ty)
	if strings.Join(buttons, " ") != at+":1 "+at+":5 "+at+":5" {
		t.Errorf("button presses in xev's window: %v, want a left click and two wheel-downs at %s", buttons, at)
	}
	var keys []string
	for _, m := range regexp.MustCompile(`KeyPress event[^\n]*\n[^\n]*\n[^\n]*keysym 0x[0-9a-f]+, ([A-Za-z0-9_]+)\)`).FindAllStringSubmatch(log, -1) {
		keys = append(keys, m[1])
	}
	if got := strings.Join(keys, " "); got != "h i space e 2 b Return Control_L a" {
		t.Errorf("keys in xev's window: %q", got)
	}

	// stream.start() and getUrl(): E2B's URL of noVNC on port 6080.
	streamURL, _ := url.Parse(res["streamUrl"].(string))
	if streamURL == nil || streamURL.Host != "6080-"+id+"."+domain {
		t.Fatalf("stream URL: %v", res["streamUrl"])
	}
	if streamURL.Path != "/vnc.html" || streamURL.Query().Get("autoconnect") != "true" {
		t.Errorf("stream URL: %v", streamURL)
	}
	if v, _ := url.Parse(res["viewUrl"].(string)); v == nil || v.Query().Get("view_only") != "true" {
		t.Errorf("view-only stream URL: %v", res["viewUrl"])
	}
	// The daemon serves it over http (the SDK writes https), with the
	// owner's key as preview ports need (docs/e2b.md).
	status, page := d.call(t, "GET", "/vnc.html", key, nil, "Host", streamURL.Host)
	if status != http.StatusOK || !strings.Contains(string(page), "noVNC") {
		t.Fatalf("the stream's page through the preview: %d %.200s", status, page)
	}
	if status, _ := d.call(t, "GET", "/vnc.html", "", nil, "Host", streamURL.Host); status != http.StatusUnauthorized {
		t.Errorf("the stream's page without credentials: %d, want 401", status)
	}
	// websockify answers the WebSocket with the VNC server's greeting.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	hdr := http.Header{"Authorization": {"Bearer " + key}}
	ws, _, err := websocket.Dial(wctx, "ws://"+d.url[len("http://"):]+"/websockify", &websocket.DialOptions{
		HTTPHeader: hdr, Host: streamURL.Host, Subprotocols: []string{"binary"}})
	if err != nil {
		t.Fatalf("the stream's WebSocket: %v", err)
	}
	defer ws.CloseNow()
	_, greeting, err := ws.Read(wctx)
	if err != nil || !strings.HasPrefix(string(greeting), "RFB 003.") {
		t.Errorf("the stream's first message: %q %v", greeting, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// A person opens the stream's page in Chromium (over http, with the
	// owner's key): noVNC connects and draws the desktop.
	pw := playwrightDir(t)
	if _, err := os.Stat(chromiumPath()); err != nil {
		failOrSkip(t, "needs Chromium on the host (apt-get install chromium): %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer pcancel()
	streamURL.Scheme = "http"
	viewer := exec.CommandContext(pctx, "node", filepath.Join(root, "test", "e2e", "testdata", "e2b_stream.cjs"), streamURL.String(), key)
	viewer.Env = append(os.Environ(), "NODE_PATH="+pw, "CHROMIUM="+chromiumPath())
	stderr.Reset()
	viewer.Stderr = &stderr
	pout, err := viewer.Output()
	if err != nil {
		t.Fatalf("the stream's page in Chromium: %v\n%s", err, lastLines(stderr.String(), 30))
	}
	if r := mustJSON(t, pout); r["connected"] != true || r["status"] != 200.0 {
		t.Errorf("the stream's page in Chromium: %s", pout)
	}
}
