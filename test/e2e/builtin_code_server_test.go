package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// codeServerPort is where the code-server template's service listens
// (templates/code-server/agentbox-code-server), on the sandbox's loopback.
const codeServerPort = 13337

// codeServerScript opens the signed preview link (argv[1]) in headless
// Chromium (argv[2]), waits for VS Code's workbench with the explorer
// showing the file named argv[3], opens it in an editor, and screenshots
// the page to argv[4].
const codeServerScript = `
const { chromium } = require('playwright-core');
const [url, exe, file, shot] = process.argv.slice(1);
(async () => {
  const browser = await chromium.launch({ executablePath: exe, args: ['--no-sandbox', '--disable-gpu'] });
  const out = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.goto(url, { waitUntil: 'load', timeout: 120000 });
    await page.waitForSelector('.monaco-workbench', { timeout: 180000 });
    const row = page.locator('.explorer-folders-view .monaco-list-row', { hasText: file });
    await row.first().waitFor({ timeout: 180000 });
    out.title = await page.title();
    out.explorer = await page.locator('.explorer-folders-view').innerText();
    out.file = await row.first().innerText();
    // Opening it reads it through VS Code's server: its text in an editor.
    await row.first().click();
    const lines = page.locator('.editor-instance .monaco-editor .view-lines', { hasText: 'hello' });
    await lines.first().waitFor({ timeout: 120000 });
    out.editor = await lines.first().innerText();
    await page.waitForTimeout(1000);
    await page.screenshot({ path: shot });
    out.shot = shot;
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
`

// checkCodeServer creates a code-server sandbox (create returns once the
// editor answers), puts a file in /workspace, and opens the editor as a
// person does: the signed preview link in a browser (headless Chromium),
// through the daemon's preview proxy. VS Code's workbench must load with
// /workspace open and the file in its explorer, open it in an editor with
// its text, and the screenshot must not be blank.
func checkCodeServer(t *testing.T, d *daemon) {
	chromium := os.Getenv("AGENTBOX_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the code-server check needs %s (apt-get install chromium)", chromium)
		}
		t.Skipf("the code-server check needs %s (apt-get install chromium)", chromium)
	}
	mods := playwrightDir(t)

	start := time.Now()
	id := createRaw(t, d, "", map[string]any{"template": "code-server"})
	t.Logf("create from code-server (returns once the editor answers): %s", time.Since(start).Round(time.Millisecond))
	defer deleteSandbox(t, d, "", id)

	const file = "agentbox-hello.py"
	if out, code := sbRun(t, d, id, `echo 'print("hello")' > /workspace/`+file+` && code-server --version | head -1`); code != 0 {
		t.Fatalf("write a workspace file: %d %s", code, out)
	}
	// The editor has no password of its own and listens on the sandbox's
	// loopback only.
	if out, _ := sbRun(t, d, id, `cat /proc/net/tcp | awk '$4 == "0A" {print $2}'`); !strings.Contains(out, "0100007F:3419") {
		t.Errorf("code-server is not listening on 127.0.0.1:%d only: %q", codeServerPort, out)
	}
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/preview-tokens", "", map[string]any{"port": codeServerPort, "ttl": 600})
	if status != http.StatusCreated {
		t.Fatalf("preview token: %d %s", status, data)
	}
	url, _ := mustJSON(t, data)["url"].(string)
	if url == "" {
		t.Fatalf("no browser URL in %s", data)
	}
	// Without the signed link the editor stays closed.
	if res, err := http.Get(strings.SplitN(url, "?", 2)[0]); err == nil {
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusForbidden {
			t.Errorf("the editor without a token: %d, want 401 or 403", res.StatusCode)
		}
	}

	shot := filepath.Join(t.ArtifactDir(), "code-server.png")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start = time.Now()
	cmd := exec.CommandContext(ctx, "node", "-e", codeServerScript, url, chromium, file, shot)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("open VS Code through the preview link: %v\n%s", err, lastLines(stderr.String(), 30))
	}
	t.Logf("VS Code loaded with the file in its explorer: %s", time.Since(start).Round(time.Millisecond))
	res := mustJSON(t, out)
	if title, _ := res["title"].(string); !strings.Contains(title, "workspace") {
		t.Errorf("page title %q does not name the workspace folder", title)
	}
	if got, _ := res["file"].(string); !strings.Contains(got, file) {
		t.Errorf("explorer row %q, want %s", got, file)
	}
	if got, _ := res["editor"].(string); !strings.Contains(got, `print("hello")`) {
		t.Errorf("the editor shows %q, want the file's text", got)
	}
	if v, colors := pixelVariance(t, shot); v < 200 || colors < 8 {
		t.Errorf("%s looks blank: luminance variance %.0f, %d colours", shot, v, colors)
	}
}
