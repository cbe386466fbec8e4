package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/testutil"
)

// consoleTools returns the web console's directory (with its npm packages)
// and the Chromium to drive. Without them the test skips locally and fails
// in CI, where make test installs both (install-deps.sh, make build).
func consoleTools(t *testing.T) (dir, chromium string) {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "web", "console")
	chromium = os.Getenv("AGENTBOX_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	var missing []string
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		missing = append(missing, "web/console/node_modules (make build installs it)")
	}
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium+" (apt-get install chromium)")
	}
	if len(missing) > 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("the console test needs %s", strings.Join(missing, ", "))
		}
		t.Skipf("the console test needs %s", strings.Join(missing, ", "))
	}
	return dir, chromium
}

// TestConsole drives the web console in Chromium (playwright-core) against
// a real daemon with three keys: two tenants and the operator. The script
// signs in, creates a sandbox, runs echo hi in the terminal, uploads and
// edits a file (read back through the API), visits every page and kills
// the sandbox; the other tenant must not see it. Every page's screenshot
// must show something (pixel variance).
func TestConsole(t *testing.T) {
	dir, chromium := consoleTools(t)
	// Webhooks may target the script's loopback receiver.
	d := startDaemon(t, "API_KEYS=key-alice:alice,key-bob:bob,key-ops:ops", "TEMPLATE_ADMIN_USERS=ops", "POOL_SIZE=1", "WEBHOOK_ALLOW_PRIVATE=true")

	// The static shell is public and the same for everyone, with strict
	// headers; the daemon must have been built with it.
	resp, err := http.Get(d.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(page, []byte("console not built")) {
		if os.Getenv("CI") != "" {
			t.Fatal("the daemon under test was built without the console (make build builds it)")
		}
		t.Skip("the daemon under test was built without the console: run make build")
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("console headers: %v", resp.Header)
	}
	if bytes.Contains(page, []byte("key-alice")) || len(page) > 4096 {
		t.Errorf("the shell is more than a shell: %d bytes", len(page))
	}
	// Data never without a key; the operator's routes not for tenants.
	for _, c := range []struct{ path, key string }{{"/v1/sandboxes", ""}, {"/v1/pools", "key-alice"}, {"/v1/admin/overview", "key-bob"}, {"/v1/admin/overview", ""}} {
		req, _ := http.NewRequest("GET", d.url+c.path, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if want := map[bool]int{true: 401, false: 403}[c.key == ""]; res.StatusCode != want {
			t.Errorf("GET %s with key %q: %d, want %d", c.path, c.key, res.StatusCode, want)
		}
	}

	// The screenshots are the test's artefacts: kept under -outputdir with
	// go test -artifacts (a temporary directory otherwise), never in the
	// checkout.
	// GET /v1/overview: a key needed, a tenant kept to its own, the range checked.
	for _, c := range []struct {
		path, key string
		want      int
	}{{"/v1/overview", "", 401}, {"/v1/overview?owner=alice", "key-bob", 403}, {"/v1/overview?range=2d", "key-bob", 400},
		{"/v1/overview?range=7d", "key-bob", 200}, {"/v1/overview?owner=alice", "key-ops", 200}} {
		req, _ := http.NewRequest("GET", d.url+c.path, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Buckets []json.RawMessage
			Tenants []json.RawMessage
		}
		_ = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("GET %s with key %q: %d, want %d", c.path, c.key, res.StatusCode, c.want)
		}
		if c.want == 200 && (len(body.Buckets) != 60 && len(body.Buckets) != 84 || (c.key == "key-bob" && body.Tenants != nil)) {
			t.Errorf("GET %s with key %q: %d buckets, tenants %v", c.path, c.key, len(body.Buckets), body.Tenants)
		}
	}

	shots := t.ArtifactDir()
	t.Logf("screenshots in %s", shots)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "e2e/console.e2e.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CONSOLE_URL="+d.url, "KEY_A=key-alice", "KEY_B=key-bob", "KEY_OP=key-ops",
		"CHROMIUM="+chromium, "OUT_DIR="+shots)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var res struct {
		Error, Sandbox, Refusal, Terminal, Uploaded, Edited     string
		OtherCount, OtherDetail, AdminTenants, AdminSandboxes   string
		Pools                                                   string
		PausedState, ResumedState, BuildLog, BuildError         string
		KeyboardTabs, PreviewHref, PreviewPage, Revoked         string
		Folder, Workdir, WorkdirWanted, Crumbs, Dropped         string
		PreviewText, Hover, Timeline, OverviewStats             string
		EventsPage, Deliveries, OverviewTenants, DarkBackground string
		OverviewPools, Desktop, VolumeRow                       string
		SnapshotRefusal, Fork, SecretRow, VolumeBrowse          string
		ExecRow                                                 []string
		DesktopStatus, DesktopNewTab                            string
		DesktopFrame                                            struct{ Title, Mode, Src string }
		ForeignFrame                                            struct {
			URL     string
			Desktop int
		}
		DesktopDrawn struct {
			Colours int
			Done    bool
		}
		KeyUser, KeyHint, KeyManaged string
		KeyShown                     bool
		Resent                       struct {
			Rows, Received int
			SameEvent      bool
		}
		ForkHasUpload, SecretValueShown                 bool
		ForkKilled, SecretVersion, SecretDeleted        int
		PreviewImage, HookReceived, AdminMetricFamilies int
		AdminRawRows                                    int
		WebhookSecretShown, VolumeDeleted               bool
		FirstView                                       struct{ Tabs, Panel, Height float64 }
		ResourceCharts                                  []struct {
			Title, Unit string
			YTicks      int
			XTicks      int
		}
		Layouts map[string]struct {
			Width, Scroll, Charts, XTicks int
		}
		RevokedStorage        int
		ExtendedBySeconds     int
		AxeChecked            int
		PauseSupported        bool
		OtherRows, AfterKill  int
		Screenshots, Problems []string
		Storage               struct {
			Session []string
			Local   int
			Cookie  string
		}
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("console script: %v (%v)\nstdout:\n%s\nstderr:\n%s", runErr, err, stdout.String(), stderr.String())
	}
	if runErr != nil || res.Error != "" {
		t.Fatalf("console script failed: %v\n%s\nstderr:\n%s", runErr, res.Error, stderr.String())
	}
	if len(res.Problems) > 0 {
		t.Errorf("errors in the browser (CSP violations, exceptions): %q", res.Problems)
	}
	check := func(what string, ok bool, got any) {
		t.Helper()
		if !ok {
			t.Errorf("%s: got %v", what, got)
		}
	}
	check("a wrong key's refusal in the API's words", res.Refusal == "unauthenticated: invalid API key", res.Refusal)
	check("every screenshot's page checked for accessibility", res.AxeChecked == len(res.Screenshots), res.AxeChecked)
	check("tabs by the keyboard", res.KeyboardTabs == "focused", res.KeyboardTabs)
	check("extend from the list", res.ExtendedBySeconds >= 250, res.ExtendedBySeconds)
	check("the preview link of a listening port", strings.Contains(res.PreviewHref, "8123-"+res.Sandbox+"."), res.PreviewHref)
	check("the preview page", strings.Contains(res.PreviewPage, "Directory listing"), res.PreviewPage)
	check("echo hi in the terminal", strings.Contains(res.Terminal, "echo hi\nhi\n"), res.Terminal)
	check("the uploaded file through the API", res.Uploaded == "uploaded from the browser\n", res.Uploaded)
	check("Files opens at the work directory", res.Workdir == res.WorkdirWanted && res.Workdir != "", res.Workdir+" want "+res.WorkdirWanted)
	check("the directory's breadcrumbs", strings.Contains(res.Crumbs, strings.TrimPrefix(res.Workdir, "/")), res.Crumbs)
	check("a new folder, opened", res.Folder == res.Workdir+"/made-here", res.Folder)
	check("a file dropped on the panel, uploaded", res.Dropped == "dropped in\n", res.Dropped)
	check("a text file's preview", strings.TrimSpace(res.PreviewText) == "dropped in", res.PreviewText)
	check("an image's preview", res.PreviewImage == 2, res.PreviewImage)
	check("the desktop tab of a sandbox without one", strings.Contains(res.Desktop, "no desktop"), res.Desktop)
	check("the desktop embedded, connected watch-only", res.DesktopStatus == "view only" && res.DesktopFrame.Mode == "view" &&
		strings.HasPrefix(res.DesktopFrame.Src, "/v1/sandboxes/"+res.Sandbox+"/desktop?") && strings.Contains(res.DesktopFrame.Src, "sig="), res.DesktopFrame)
	check("the embedded desktop drawn (the whole picture, not one colour)", res.DesktopDrawn.Done && res.DesktopDrawn.Colours >= 4, res.DesktopDrawn)
	check("the API keys page: the signed-in tenant", res.KeyUser == "alice" && res.KeyHint == "a key of 9 characters", res.KeyUser+" "+res.KeyHint)
	check("the API keys page: keys are operator-managed", strings.Contains(res.KeyManaged, "API_KEYS") && strings.Contains(res.KeyManaged, "operator"), res.KeyManaged)
	check("the API keys page never shows the key", !res.KeyShown, res.KeyShown)
	check("another origin cannot frame the desktop page", res.ForeignFrame.Desktop == 0 && res.ForeignFrame.URL != "", res.ForeignFrame)
	check("the desktop link to open in a new tab", strings.Contains(res.DesktopNewTab, "/v1/sandboxes/"+res.Sandbox+"/desktop?"), res.DesktopNewTab)
	check("the sandbox's events timeline", strings.Contains(res.Timeline, "created") && strings.Contains(res.Timeline, "by an API call (alice)"), res.Timeline)
	check("a chart's values under the pointer", strings.Contains(res.Hover, "used") && strings.Contains(res.Hover, "iB"), res.Hover)
	check("the tabs in the first viewport at 1400x900", res.FirstView.Height == 900 && res.FirstView.Tabs > 0 && res.FirstView.Tabs < 900 && res.FirstView.Panel < 900-200, res.FirstView)
	for _, c := range res.ResourceCharts {
		check("resource chart "+c.Title+" with axes and a unit", c.Unit != "" && c.YTicks >= 2 && c.XTicks >= 2, c)
	}
	check("the resource charts", len(res.ResourceCharts) >= 4, len(res.ResourceCharts))
	check("the overview's numbers", strings.Contains(res.OverviewStats, "Running") && strings.Contains(res.OverviewStats, "host cores"), res.OverviewStats)
	check("the events page", strings.Contains(res.EventsPage, res.Sandbox) && strings.Contains(res.EventsPage, "created"), res.EventsPage)
	check("a webhook's secret shown once", res.WebhookSecretShown, res.WebhookSecretShown)
	check("a webhook's deliveries", strings.Contains(res.Deliveries, "delivered") && res.HookReceived > 0, res.Deliveries)
	check("a delivery resent from the webhooks page", res.Resent.Rows == 1 && res.Resent.Received >= 1 && res.Resent.SameEvent, res.Resent)
	check("a volume made on the volumes page, listed with its size", strings.Contains(res.VolumeRow, "console-vol") && strings.Contains(res.VolumeRow, "64"), res.VolumeRow)
	check("a volume's files browsed on the volumes page", strings.Contains(res.VolumeBrowse, "in-volume.txt") && strings.Contains(res.VolumeBrowse, "data"), res.VolumeBrowse)
	check("a volume deleted on the volumes page", res.VolumeDeleted, res.VolumeDeleted)
	check("the exec history: command, exit code, duration, who", len(res.ExecRow) == 5 && res.ExecRow[1] == "sh -c echo from-history; exit 3" && res.ExecRow[2] == "3" && strings.HasSuffix(res.ExecRow[3], "ms") && res.ExecRow[4] == "alice", res.ExecRow)
	check("a host sandbox's snapshot refused in the API's words", strings.HasPrefix(res.SnapshotRefusal, "invalid_argument"), res.SnapshotRefusal)
	check("a fork opened, with the source's files", res.Fork != "" && res.Fork != res.Sandbox && res.ForkHasUpload && res.ForkKilled == http.StatusNoContent, res.Fork)
	check("a secret made and rotated on the secrets page", strings.Contains(res.SecretRow, "CONSOLE_TOKEN") && res.SecretVersion == 2, res.SecretRow)
	check("a secret's value never on the page", !res.SecretValueShown, res.SecretValueShown)
	check("a secret deleted on the secrets page", res.SecretDeleted == http.StatusNotFound, res.SecretDeleted)
	check("the operator's per-tenant usage", strings.Contains(res.OverviewTenants, "alice"), res.OverviewTenants)
	check("the operator's pools on the overview", strings.HasPrefix(res.OverviewPools, "host"), res.OverviewPools)
	check("admin metrics grouped into charts, no raw rows", res.AdminMetricFamilies >= 5 && res.AdminRawRows == 0, res.AdminMetricFamilies)
	check("dark mode", res.DarkBackground != "" && res.DarkBackground != "rgb(245, 246, 248)", res.DarkBackground)
	for name, l := range res.Layouts {
		check(name+" without sideways scrolling", l.Scroll <= l.Width+1, l)
	}
	for _, name := range []string{"overview", "overview-operator", "resources"} {
		check(name+": charts with a time axis", res.Layouts[name].Charts >= 4 && res.Layouts[name].XTicks >= 2, res.Layouts[name])
	}
	narrow := 0
	for name, l := range res.Layouts {
		if strings.HasPrefix(name, "narrow") && l.Width == 375 {
			narrow++
		}
	}
	check("every page at 375 px", narrow >= 13, narrow)
	check("the edited file through the API", res.Edited == "edited in the console\n", res.Edited)
	check("the other tenant's list", res.OtherRows == 0 && res.OtherCount == "0 sandboxes", res.OtherCount)
	check("the other tenant opening the sandbox", strings.Contains(res.OtherDetail, "not_found"), res.OtherDetail)
	check("the key only in sessionStorage", len(res.Storage.Session) == 1 && res.Storage.Local == 0 && res.Storage.Cookie == "", res.Storage)
	check("the operator's tenants", strings.Contains(res.AdminTenants, "alice"), res.AdminTenants)
	check("the operator's sandboxes", strings.Contains(res.AdminSandboxes, res.Sandbox+"\talice"), res.AdminSandboxes)
	check("the build's live log", strings.Contains(res.BuildLog, "Step 2/2: LABEL made=console") && strings.Contains(res.BuildLog, "Done: console-built:1"), res.BuildLog)
	check("a failing build's error", strings.Contains(res.BuildError, "invalid_argument"), res.BuildError)
	check("the pools page", strings.HasPrefix(res.Pools, "host\t"), res.Pools)
	if res.PauseSupported {
		check("paused from the console", res.PausedState == "paused", res.PausedState)
		check("resumed from the console", res.ResumedState == "running", res.ResumedState)
	} else {
		t.Log("the backend cannot pause: the console shows no pause buttons (checked)")
	}
	check("a revoked key back to signing in", res.Revoked == "unauthenticated: invalid API key" && res.RevokedStorage == 0, res.Revoked)
	check("the killed sandbox through the API", res.AfterKill == http.StatusNotFound, res.AfterKill)

	// Every page's screenshot shows something.
	if len(res.Screenshots) < 50 {
		t.Errorf("%d screenshots, want every page", len(res.Screenshots))
	}
	for _, p := range res.Screenshots {
		if v, colors := pixelVariance(t, p); v < 200 || colors < 8 {
			t.Errorf("%s looks blank: luminance variance %.0f, %d colours", filepath.Base(p), v, colors)
		}
	}
}

// TestConsoleKeyless: on a server without keys (loopback only) the console
// signs in with an empty key as the operator, its terminal connects through
// the browser guard's own-origin rule, and a sandbox is created and killed.
func TestConsoleKeyless(t *testing.T) {
	dir, chromium := consoleTools(t)
	d := startDaemon(t)
	shots := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "e2e/keyless.e2e.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CONSOLE_URL="+d.url, "CHROMIUM="+chromium, "OUT_DIR="+shots)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var res struct {
		Error, Who, Terminal, Killed string
		Problems, Screenshots        []string
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || runErr != nil || res.Error != "" {
		t.Fatalf("keyless console script: %v %v %s\nstdout:\n%s\nstderr:\n%s", runErr, err, res.Error, stdout.String(), stderr.String())
	}
	if res.Who != "default (operator) Sign out" || res.Terminal != "keyless-42" || res.Killed == "" || len(res.Problems) > 0 {
		t.Errorf("keyless console: %+v", res)
	}
	for _, p := range res.Screenshots {
		if v, colors := pixelVariance(t, p); v < 200 || colors < 8 {
			t.Errorf("%s looks blank: luminance variance %.0f, %d colours", filepath.Base(p), v, colors)
		}
	}
}

// pixelVariance is the variance of a PNG's luminance and the number of
// distinct colours in it (capped).
func pixelVariance(t *testing.T, path string) (float64, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := img.Bounds()
	var n, sum, sq float64
	colors := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			l := (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(bl)) / 257
			n, sum, sq = n+1, sum+l, sq+l*l
			if len(colors) < 1000 {
				colors[r>>8<<16|g>>8<<8|bl>>8] = true
			}
		}
	}
	mean := sum / n
	return sq/n - mean*mean, len(colors)
}

// TestConsoleTerminalTickets checks how the browser's terminal
// authenticates: a ticket bought with the owner's key, offered as a
// websocket subprotocol, good once, for one sandbox, never another
// tenant's.
func TestConsoleTerminalTickets(t *testing.T) {
	d := startDaemon(t, "API_KEYS=key-alice:alice,key-bob:bob")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: time.Minute}
	call := func(method, path, key string) (int, map[string]any) {
		req, _ := http.NewRequest(method, d.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body
	}
	create := func(key string) string {
		req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/v1/sandboxes", strings.NewReader(`{"timeout":120}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var sb struct{ ID string }
		if err := json.NewDecoder(res.Body).Decode(&sb); err != nil || res.StatusCode != 201 {
			t.Fatalf("create: %d %v", res.StatusCode, err)
		}
		t.Cleanup(func() { call("DELETE", "/v1/sandboxes/"+sb.ID, key) })
		return sb.ID
	}
	a1, a2 := create("key-alice"), create("key-alice")
	ticket := func(id string) string {
		code, body := call("POST", "/v1/sandboxes/"+id+"/pty-tickets", "key-alice")
		if code != 201 {
			t.Fatalf("ticket: %d %v", code, body)
		}
		return body["ticket"].(string)
	}
	wsURL := func(id string) string {
		return "ws" + strings.TrimPrefix(d.url, "http") + "/v1/sandboxes/" + id + "/pty?cmd=echo%20ticket-ok"
	}
	dial := func(id, tk string) (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, wsURL(id), &websocket.DialOptions{Subprotocols: []string{"agentbox.pty", "agentbox.ticket." + tk}})
	}

	// A good ticket opens the terminal, once, and the protocol is agreed.
	tk := ticket(a1)
	conn, _, err := dial(a1, tk)
	if err != nil {
		t.Fatalf("dial with a ticket: %v", err)
	}
	if conn.Subprotocol() != "agentbox.pty" {
		t.Errorf("subprotocol %q", conn.Subprotocol())
	}
	var out bytes.Buffer
	for i := 0; i < 50 && !strings.Contains(out.String(), "ticket-ok"); i++ {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageBinary {
			out.Write(data)
		}
	}
	conn.CloseNow()
	if !strings.Contains(out.String(), "ticket-ok") {
		t.Errorf("terminal output %q", out.String())
	}
	if _, res, err := dial(a1, tk); err == nil || res == nil || res.StatusCode != 401 {
		t.Errorf("a used ticket: %v %v", res, err)
	}
	// A ticket is for its sandbox only.
	if _, res, err := dial(a2, ticket(a1)); err == nil || res == nil || res.StatusCode != 401 {
		t.Errorf("a ticket for another sandbox: %v %v", res, err)
	}
	// No ticket, no key: refused.
	if _, res, err := websocket.Dial(ctx, wsURL(a1), nil); err == nil || res == nil || res.StatusCode != 401 {
		t.Errorf("no credentials: %v %v", res, err)
	}
	// Another tenant gets no ticket for alice's sandbox (404, as for every route).
	if code, body := call("POST", "/v1/sandboxes/"+a1+"/pty-tickets", "key-bob"); code != 404 {
		t.Errorf("bob's ticket for alice's sandbox: %d %v", code, body)
	}
	// A ticket does not open any other route.
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/sandboxes/"+a1, nil)
	req.Header.Set("Sec-WebSocket-Protocol", "agentbox.ticket."+ticket(a1))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("a ticket on GET /v1/sandboxes/{id}: %d", res.StatusCode)
	}
}
