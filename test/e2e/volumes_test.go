package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// volSandbox creates a host-template sandbox of key's with volume mounts.
func volSandbox(t *testing.T, d *daemon, key string, mounts ...map[string]any) string {
	t.Helper()
	status, data := d.call(t, "POST", "/v1/sandboxes", key, map[string]any{"volumes": mounts})
	if status != http.StatusCreated {
		t.Fatalf("create with volumes %v: %d %s", mounts, status, data)
	}
	return mustJSON(t, data)["id"].(string)
}

// volExec runs script in sandbox id and returns its exit code, stdout and stderr.
func volExec(t *testing.T, d *daemon, key, id, script string) (int, string, string) {
	t.Helper()
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key,
		map[string]any{"cmd": []string{"/bin/sh", "-c", script}, "timeout": 60})
	if status != http.StatusOK {
		t.Fatalf("exec %q: %d %s", script, status, data)
	}
	r := mustJSON(t, data)
	return int(r["exit_code"].(float64)), r["stdout"].(string), r["stderr"].(string)
}

// TestVolumes: a local volume written in sandbox A is read in sandbox B
// at the same time (one shared directory: immediate) and in a sandbox
// created after both are gone; a read-only mount refuses writes; a
// subpath mount sees only its directory and cannot be pointed out of the
// volume by a symlink; the content API reads and writes it without a
// sandbox and refuses paths out of it; another tenant cannot list, get,
// mount or read it; a mounted volume's delete is refused unless forced;
// the volume's size stops a writer with ENOSPC and the daemon stays
// healthy; the storage quota counts volumes.
func TestVolumes(t *testing.T) {
	const alice, bob = "vol-key-alice", "vol-key-bob"
	d := startDaemon(t, "API_KEYS="+alice+":alice,"+bob+":bob", "STORAGE_QUOTA_PER_USER=200M", "TEMPLATE_ADMIN_USERS=nobody")

	status, data := d.call(t, "POST", "/v1/volumes", alice, map[string]any{"name": "shared", "size": "64M"})
	if status != http.StatusCreated {
		t.Fatalf("create volume: %d %s", status, data)
	}
	if v := mustJSON(t, data); v["size"] != float64(64<<20) || v["kind"] != "local" {
		t.Fatalf("volume = %s", data)
	}
	if status, data := d.call(t, "POST", "/v1/volumes", alice, map[string]any{"name": "shared"}); status != http.StatusConflict {
		t.Fatalf("second create of the name: %d %s", status, data)
	}
	if status, data := d.call(t, "POST", "/v1/volumes", alice, map[string]any{"name": "../x"}); status != http.StatusBadRequest {
		t.Fatalf("create with a bad name: %d %s", status, data)
	}
	// The quota: 64M taken of 200M, 150M more is over it.
	if status, data := d.call(t, "POST", "/v1/volumes", alice, map[string]any{"name": "big", "size": "150M"}); status != http.StatusTooManyRequests {
		t.Fatalf("create over the storage quota: %d %s", status, data)
	}

	a := volSandbox(t, d, alice, map[string]any{"name": "shared", "path": "/mnt/shared"})
	b := volSandbox(t, d, alice, map[string]any{"name": "shared", "path": "/data", "read_only": true},
		map[string]any{"name": "shared", "path": "/sub", "subpath": "nested/dir"})
	if code, out, errs := volExec(t, d, alice, a, "echo hello-from-a > /mnt/shared/note && id -u && stat -c %u /mnt/shared/note"); code != 0 || out != "1000\n1000\n" {
		t.Fatalf("write in A: %d %q %q", code, out, errs)
	}
	if code, out, _ := volExec(t, d, alice, b, "cat /data/note"); code != 0 || out != "hello-from-a\n" {
		t.Fatalf("read in B while A runs: %d %q", code, out)
	}
	if code, _, errs := volExec(t, d, alice, b, "echo x > /data/other"); code == 0 || !strings.Contains(errs, "Read-only") {
		t.Fatalf("write to a read-only mount: exit %d %q", code, errs)
	}
	// The subpath is the volume's nested/dir, created for the mount.
	if code, out, _ := volExec(t, d, alice, b, "echo in-sub > /sub/f && ls /sub"); code != 0 || out != "f\n" {
		t.Fatalf("subpath: %d %q", code, out)
	}
	if code, out, _ := volExec(t, d, alice, a, "cat /mnt/shared/nested/dir/f"); code != 0 || out != "in-sub\n" {
		t.Fatalf("subpath file seen from the root mount: %d %q", code, out)
	}
	// A symlink planted in the volume cannot carry a subpath out of it.
	volExec(t, d, alice, a, "ln -s /etc /mnt/shared/esc")
	if status, data := d.call(t, "POST", "/v1/sandboxes", alice, map[string]any{"volumes": []map[string]any{{"name": "shared", "path": "/x", "subpath": "esc"}}}); status != http.StatusBadRequest {
		t.Fatalf("subpath through a symlink: %d %s", status, data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", alice, map[string]any{"volumes": []map[string]any{{"name": "shared", "path": "/x", "subpath": "../.."}}}); status != http.StatusBadRequest {
		t.Fatalf("subpath with '..': %d %s", status, data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", alice, map[string]any{"volumes": []map[string]any{{"name": "shared", "path": "/proc/x"}}}); status != http.StatusBadRequest {
		t.Fatalf("mount at a reserved path: %d %s", status, data)
	}

	// The content API.
	q := func(p string) string { return "?path=" + url.QueryEscape(p) }
	if status, data := d.call(t, "GET", "/v1/volumes/shared/files"+q("/note"), alice, nil); status != 200 || string(data) != "hello-from-a\n" {
		t.Fatalf("read through the API: %d %q", status, data)
	}
	if status, data := d.call(t, "PUT", "/v1/volumes/shared/files"+q("/from-api/x.txt"), alice, "from the api"); status != http.StatusCreated {
		t.Fatalf("write through the API: %d %s", status, data)
	}
	if code, out, _ := volExec(t, d, alice, a, "cat /mnt/shared/from-api/x.txt; echo; stat -c %u /mnt/shared/from-api/x.txt"); code != 0 || !strings.Contains(out, "from the api") || !strings.HasSuffix(out, "1000\n") {
		t.Fatalf("API write seen in A: %d %q", code, out)
	}
	if status, data := d.call(t, "GET", "/v1/volumes/shared/files/list"+q("/"), alice, nil); status != 200 || !strings.Contains(string(data), `"note"`) {
		t.Fatalf("list: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/v1/volumes/shared/files/stat"+q("/esc"), alice, nil); status != 200 || mustJSON(t, data)["type"] != "symlink" {
		t.Fatalf("stat of the symlink: %d %s", status, data)
	}
	for _, p := range []string{"/esc/passwd", "/../../../../etc/passwd"} {
		if status, data := d.call(t, "GET", "/v1/volumes/shared/files"+q(p), alice, nil); status == 200 {
			t.Fatalf("read of %s escaped the volume: %s", p, data)
		}
	}
	if status, data := d.call(t, "PUT", "/v1/volumes/shared/files"+q("/esc/evil"), alice, "x"); status/100 == 2 {
		t.Fatalf("write through a symlink out of the volume: %d %s", status, data)
	}
	if status, data := d.call(t, "DELETE", "/v1/volumes/shared/files"+q("/from-api"), alice, nil); status != http.StatusNoContent {
		t.Fatalf("remove: %d %s", status, data)
	}

	// Another tenant sees nothing of it.
	if status, data := d.call(t, "GET", "/v1/volumes", bob, nil); status != 200 || strings.Contains(string(data), "shared") {
		t.Fatalf("bob's list: %d %s", status, data)
	}
	for _, p := range []string{"/v1/volumes/shared", "/v1/volumes/shared/files" + q("/note"), "/v1/volumes/shared/files/list"} {
		if status, data := d.call(t, "GET", p, bob, nil); status != http.StatusNotFound {
			t.Fatalf("bob GET %s: %d %s", p, status, data)
		}
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", bob, map[string]any{"volumes": []map[string]any{{"name": "shared", "path": "/x"}}}); status != http.StatusNotFound {
		t.Fatalf("bob mounts alice's volume: %d %s", status, data)
	}
	if status, data := d.call(t, "DELETE", "/v1/volumes/shared?force=true", bob, nil); status != http.StatusNotFound {
		t.Fatalf("bob deletes alice's volume: %d %s", status, data)
	}

	// Mounted: the delete is refused.
	if status, data := d.call(t, "DELETE", "/v1/volumes/shared", alice, nil); status != http.StatusConflict {
		t.Fatalf("delete of a mounted volume: %d %s", status, data)
	}
	if status, data := d.call(t, "GET", "/v1/volumes/shared", alice, nil); status != 200 || len(mustJSON(t, data)["mounted_by"].([]any)) != 2 {
		t.Fatalf("get: %d %s", status, data)
	}

	// The size is the kernel's: a writer past it gets ENOSPC.
	if code, out, _ := volExec(t, d, alice, a, "dd if=/dev/zero of=/mnt/shared/fill bs=1M count=100 2>&1 | head -1"); !strings.Contains(out, "No space left") {
		t.Fatalf("a full volume: exit %d %q", code, out)
	}
	if status, _ := d.call(t, "GET", "/v1/info", alice, nil); status != 200 {
		t.Fatalf("daemon after a full volume: %d", status)
	}
	volExec(t, d, alice, a, "rm -f /mnt/shared/fill")

	deleteSandbox(t, d, alice, a)
	deleteSandbox(t, d, alice, b)
	// After both are gone, a new sandbox reads what A wrote.
	c := volSandbox(t, d, alice, map[string]any{"name": "shared", "path": "/home/user/vol"})
	if code, out, _ := volExec(t, d, alice, c, "cat /home/user/vol/note /home/user/vol/nested/dir/f"); code != 0 || out != "hello-from-a\nin-sub\n" {
		t.Fatalf("read in a later sandbox: %d %q", code, out)
	}
	// A forced delete cuts it off.
	if status, data := d.call(t, "DELETE", "/v1/volumes/shared?force=true", alice, nil); status != http.StatusNoContent {
		t.Fatalf("forced delete: %d %s", status, data)
	}
	if code, _, _ := volExec(t, d, alice, c, "cat /home/user/vol/note"); code == 0 {
		t.Fatalf("the sandbox still reads a deleted volume")
	}
	deleteSandbox(t, d, alice, c)
	if status, data := d.call(t, "GET", "/v1/volumes", alice, nil); status != 200 || strings.TrimSpace(string(data)) != "[]" {
		t.Fatalf("list after delete: %d %s", status, data)
	}
}

// TestFork: fork ×5 of a running sandbox gives five sandboxes that each
// start with the source's files (written just before, still in its page
// cache), env, metadata and limits, and are independent of it and of
// each other; the source keeps running, its processes too.
func TestFork(t *testing.T) {
	const key = "fork-key"
	d := startDaemon(t, "API_KEYS="+key+":alice", "MAX_SANDBOXES_PER_USER=8")
	status, data := d.call(t, "POST", "/v1/sandboxes", key, map[string]any{
		"env": map[string]string{"FORK_ENV": "carried"}, "metadata": map[string]string{"team": "a"},
		"resources": map[string]any{"memory": "300M", "disk": "640M"}})
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, data)
	}
	src := mustJSON(t, data)["id"].(string)
	defer deleteSandbox(t, d, key, src)
	if code, _, errs := volExec(t, d, key, src, "mkdir -p /workspace/proj && echo state-1 > /workspace/proj/f && echo home > ~/h && (sleep 600 >/dev/null 2>&1 &)"); code != 0 {
		t.Fatalf("prepare: %s", errs)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+src+"/fork", key, map[string]any{"count": 5})
	if status != http.StatusCreated {
		t.Fatalf("fork: %d %s", status, data)
	}
	var forks []string
	for _, f := range mustJSON(t, data)["sandboxes"].([]any) {
		sb := f.(map[string]any)
		forks = append(forks, sb["id"].(string))
		if sb["metadata"].(map[string]any)["team"] != "a" || sb["resources"].(map[string]any)["memory"] != float64(300<<20) {
			t.Errorf("fork %v lacks the source's metadata or limits", sb)
		}
	}
	for _, id := range forks {
		defer deleteSandbox(t, d, key, id)
	}
	if len(forks) != 5 {
		t.Fatalf("%d forks", len(forks))
	}
	for i, id := range forks {
		code, out, errs := volExec(t, d, key, id, fmt.Sprintf("cat /workspace/proj/f ~/h; echo $FORK_ENV; echo fork-%d > /workspace/proj/f; id -u; stat -c %%u /workspace/proj/f; pgrep -x sleep || echo no-sleep", i))
		if code != 0 || out != "state-1\nhome\ncarried\n1000\n1000\nno-sleep\n" {
			t.Fatalf("fork %d: %d %q %q", i, code, out, errs)
		}
	}
	for i, id := range forks {
		if _, out, _ := volExec(t, d, key, id, "cat /workspace/proj/f"); out != fmt.Sprintf("fork-%d\n", i) {
			t.Errorf("fork %d sees %q: not independent", i, out)
		}
	}
	if code, out, _ := volExec(t, d, key, src, "cat /workspace/proj/f; pgrep -x sleep >/dev/null && echo still-running"); code != 0 || out != "state-1\nstill-running\n" {
		t.Fatalf("source after the forks: %d %q", code, out)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+src+"/fork", "", map[string]any{"count": 1}); status != http.StatusUnauthorized {
		t.Fatalf("fork without a key: %d %s", status, data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+src+"/fork", key, map[string]any{"count": 100}); status != http.StatusBadRequest {
		t.Fatalf("fork ×100: %d %s", status, data)
	}
	// Past MAX_SANDBOXES_PER_USER (8: the source and five forks run) a
	// fork ×5 fails part way, the forks being made at once: all or
	// nothing, none of them is left.
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+src+"/fork", key, map[string]any{"count": 5}); status != http.StatusTooManyRequests {
		t.Fatalf("fork ×5 past the limit: %d %s", status, data)
	}
	status, data = d.call(t, "GET", "/v1/sandboxes", key, nil)
	if n := len(mustJSON(t, data)["sandboxes"].([]any)); status != 200 || n != 6 {
		t.Fatalf("after a refused fork: %d sandboxes (%d), want the source and its 5 forks", n, status)
	}
}
