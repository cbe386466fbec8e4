package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// templateRootfs builds a minimal unpacked root filesystem for a dir:
// template outside every daemon's data dir: the mount points a sandbox
// needs and a marker file to prove a sandbox runs on it.
func templateRootfs(t *testing.T) string {
	t.Helper()
	rootfs := filepath.Join(testutil.ShortTempDir(t), "rootfs")
	for _, d := range []string{"usr", "etc", "proc", "sys", "dev", "tmp", "run", "var/tmp", "workspace",
		"home/user", "root", ".agentbox"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, ".agentbox", "agent"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "marker.txt"), []byte("operator template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return rootfs
}

// TestSecurityTemplateDirFromAPIRefused: an API caller cannot make a host
// directory the root of its sandbox (another tenant's disk, /sys/fs/cgroup,
// /run ...) through the native API or the agentscope routes, whatever the
// spelling; a template the operator registered still works.
func TestSecurityTemplateDirFromAPIRefused(t *testing.T) {
	const aliceKey, bobKey = "alice-key-templates", "bob-key-templates"
	rootfs := templateRootfs(t)
	tmpls, _ := json.Marshal(map[string]string{"base": "host", "custom": "dir:" + rootfs})
	d := startDaemon(t, "API_KEYS="+aliceKey+":alice,"+bobKey+":bob", "SANDBOX_TEMPLATES="+string(tmpls))

	// Bob's sandbox: its disk is what Alice is after.
	status, data := d.call(t, "POST", "/v1/sandboxes", bobKey, map[string]any{"template": "host"})
	if status != 201 && status != 200 {
		t.Fatalf("bob create: %d %s", status, data)
	}
	bobID, _ := mustJSON(t, data)["id"].(string)
	bobDisk := filepath.Join(d.dataDir, "native", "state", "sb", bobID, "disk", "workspace")
	link := filepath.Join(testutil.ShortTempDir(t), "root-link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	for _, tmpl := range []string{
		"dir:" + bobDisk,
		"dir:/sys/fs/cgroup/pids",
		"dir:/run",
		"dir:" + link,
		"dir:" + rootfs, // even the operator's own directory, spelt as a path
		"dir:" + rootfs + ":/etc",
		"dir:" + rootfs + ",upperdir=/tmp",
		"dir:relative",
	} {
		status, data := d.call(t, "POST", "/v1/sandboxes", aliceKey, map[string]any{"template": tmpl})
		body := mustJSON(t, data)
		if status != 400 || body["code"] != "invalid_argument" || !strings.Contains(body["message"].(string), "operator") {
			if id, _ := body["id"].(string); id != "" {
				d.call(t, "DELETE", "/v1/sandboxes/"+id, aliceKey, nil)
			}
			t.Errorf("template %q from the API: %d %s, want 400 invalid_argument naming the operator", tmpl, status, data)
		}
	}
	// The agentscope routes name sandbox types only.
	for _, route := range []string{"create", "create_from_pool"} {
		status, body := asCall(t, d, route, aliceKey, map[string]any{"sandbox_type": "dir:" + bobDisk})
		if id, _ := body["data"].(string); id != "" || status == 200 && body["data"] != nil {
			t.Errorf("agentscope %s with a dir: type: %d %v, want a refusal", route, status, body)
		}
	}

	// Tenants see the registered names and kinds, never the host path.
	status, data = d.call(t, "GET", "/v1/info", aliceKey, nil)
	if status != 200 || strings.Contains(string(data), rootfs) || mustJSON(t, data)["templates"].(map[string]any)["custom"] != "dir" {
		t.Errorf("GET /v1/info: %d %s, want template kinds without the operator's path", status, data)
	}

	// The operator's registered template, by its name.
	c := d.sdk(t, aliceKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	status, data = d.call(t, "POST", "/v1/sandboxes", aliceKey, map[string]any{"template": "custom"})
	if status != 201 && status != 200 {
		t.Fatalf("create from the operator's template: %d %s", status, data)
	}
	id, _ := mustJSON(t, data)["id"].(string)
	rd, _, err := c.Download(ctx, id, "/marker.txt")
	if err != nil {
		t.Fatalf("read the template's marker: %v", err)
	}
	got, _ := io.ReadAll(rd)
	rd.Close()
	if string(got) != "operator template\n" {
		t.Errorf("marker = %q: the sandbox does not run on the operator's template", got)
	}
	for _, sb := range []struct{ id, key string }{{id, aliceKey}, {bobID, bobKey}} {
		if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+sb.id, sb.key, nil); status >= 300 {
			t.Errorf("delete %s: %d %s", sb.id, status, data)
		}
	}
}

// TestSecurityTemplateDirConfigValidated: a configured dir: template that
// could expose the host (a pseudo filesystem, the data dir, a path through a
// symlink, overlay option separators) fails the daemon's start with a
// message naming the setting.
func TestSecurityTemplateDirConfigValidated(t *testing.T) {
	testutil.RequireRoot(t)
	daemonBin, agentBin := binaries(t)
	dataDir := testutil.ShortTempDir(t)
	link := filepath.Join(testutil.ShortTempDir(t), "link")
	if err := os.Symlink("/usr", link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/proc", "/sys/fs/cgroup", "/", link, dataDir, filepath.Join(dataDir, "native"), "/usr,upperdir=/tmp"} {
		tmpls, _ := json.Marshal(map[string]string{"base": "host", "evil": "dir:" + dir})
		// Before the fix such a daemon starts and serves: stop it politely
		// (it then cleans up its data dir) after a while.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := execCommand(daemonBin, "serve")
		cmd.Env = append(cmd.Env, "AGENT_PATH="+agentBin, "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", freePort(t)),
			"AGENTBOX_DATA_DIR="+dataDir, "SANDBOX_TEMPLATES="+string(tmpls), "NETWORK=off")
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-done
		}
		cancel()
		if err == nil || !strings.Contains(string(out), "SANDBOX_TEMPLATES") {
			t.Errorf("daemon with template dir:%s: err %v, output:\n%s", dir, err, tail(string(out), 5))
		}
	}
}
